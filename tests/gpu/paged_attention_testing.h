// The paged-attention GPU tests' shared part (tests/gpu/test_cuda_attention.cpp, every backend):
// the case tables, random paged batches, the CPU reference (cpu::paged_attention) and the
// comparison. Host only: the test file owns the device copies and the backends.
//
// Tolerance (bf16 output): the GPU rounds P (the softmax numerators) to bf16 before P·V, as
// FlashAttention does, and rounds the output to bf16; the CPU stays in f32 on the same bf16
// inputs. Each element must satisfy |gpu - cpu| <= 1e-2 + 1e-2 |cpu| (the worst case of P's
// rounding, 2^-9 relative, times a |v| of up to ~4, plus half a bf16 ulp of the output), and
// the mean absolute error over the batch must stay below 2e-3 (expected ~3e-4), which catches
// systematic errors (a wrongly masked key, a bad split merge) that a per-element bound may hide.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "kernels/cpu/ops.h"

namespace miniinfer::attention_testing {

struct Config {
    int64_t num_heads, num_kv_heads, head_dim, page_size;
};
struct Seq {
    int32_t q_len, seq_len;  // this step's query rows; context length including them
};

inline constexpr uint16_t kBf16NaN = 0x7FC0;

// The case tables every backend runs.
// GQA ratios 1, 2, 7, 8, 4, 8 (one KV head) x head dims 64, 128 x page sizes 16, 24 (not a power
// of two: the division path of the page lookup), 64, 256.
inline std::vector<Config> all_configs() {
    std::vector<Config> configs;
    for (int64_t head_dim : {64, 128})
        for (int64_t page_size : {16, 24, 64, 256})
            for (auto [h, kv] : std::vector<std::pair<int64_t, int64_t>>{
                     {8, 8}, {16, 8}, {14, 2}, {32, 4}, {32, 8}, {8, 1}})
                configs.push_back({h, kv, head_dim, page_size});
    return configs;
}
// Prefill only: 1 token, page boundaries (16, 64), odd lengths, more than one 64-row tile.
inline const std::vector<Seq> kPrefillSeqs = {{1, 1},   {16, 16}, {17, 17},
                                              {64, 64}, {65, 65}, {133, 133}};
// Decode only: lengths around the page sizes tested (16, 24, 64, 256) and a long one.
inline const std::vector<Seq> kDecodeSeqs = {{1, 1},  {1, 15},  {1, 16},  {1, 17},
                                             {1, 24}, {1, 25},  {1, 63},  {1, 64},
                                             {1, 65}, {1, 256}, {1, 257}, {1, 1000}};
// Decodes, a fresh prefill, chunks after cached prefixes (one ending on a page boundary).
inline const std::vector<Seq> kMixedSeqs = {{1, 40},   {37, 37}, {1, 1},    {29, 300},
                                            {64, 320}, {1, 129}, {100, 611}};
// Long decodes, alone and next to short ones (the KV length split across blocks).
inline const std::vector<Seq> kLongDecodeSeqs = {{1, 4000}};
inline const std::vector<Seq> kLongMixedDecodeSeqs = {{1, 4001}, {1, 2500}, {1, 7}, {1, 3072}};
// Long chunked prefills after long cached prefixes, next to a long decode and a fresh prompt,
// on a few configs (the CPU reference is the cost here).
inline const std::vector<std::vector<Seq>> kLongChunkBatches = {{{200, 3000}, {1, 4000}, {64, 64}},
                                                                {{150, 2500}, {1, 4000}, {64, 64}}};
inline const std::vector<Config> kLongChunkConfigs = {
    {16, 8, 128, 16}, {16, 8, 128, 24}, {14, 2, 64, 256}};
// Many sequences (400: decodes and every fifth a 9-row chunk): more work than the GPU holds at
// once, so no key range needs splitting and a persistent kernel loops over several items.
inline std::vector<Seq> many_seqs() {
    std::vector<Seq> seqs;
    for (int i = 0; i < 400; ++i) seqs.push_back({i % 5 == 0 ? 9 : 1, 9 + (i * 37) % 300});
    return seqs;
}
inline const std::vector<Config> kManySeqsConfigs = {{16, 8, 128, 16}, {32, 4, 64, 24}};
// Every sequence prefilling (fresh prompts and chunks after cached prefixes), 60 of them: more row
// tiles than the GPU holds at once.
inline std::vector<Seq> all_prefill_seqs() {
    std::vector<Seq> seqs;
    for (int i = 0; i < 60; ++i) {
        const int q_len = 2 + (i * 53) % 190;
        seqs.push_back({q_len, q_len + (i % 3 == 0 ? (i * 29) % 400 : 0)});
    }
    return seqs;
}

// One batch on the host: bf16 q and caches, i32 metadata. Cache slots no sequence owns (and
// slots past a sequence's length) hold NaN: a kernel that reads them poisons its output.
struct Batch {
    Config cfg;
    int64_t num_seqs = 0, num_tokens = 0, max_pages = 0, max_query_len = 0, max_seq_len = 0;
    Tensor q, k_cache, v_cache, query_start, seq_lens, block_table;
};

inline Batch make_batch(const Config& cfg, const std::vector<Seq>& seqs, std::mt19937& rng) {
    Batch b;
    b.cfg = cfg;
    b.num_seqs = int64_t(seqs.size());
    int64_t num_pages = 3;  // spare pages nobody owns
    for (const Seq& s : seqs) {
        const int64_t pages = (s.seq_len + cfg.page_size - 1) / cfg.page_size;
        b.max_pages = std::max(b.max_pages, pages);
        num_pages += pages;
        b.num_tokens += s.q_len;
        b.max_query_len = std::max<int64_t>(b.max_query_len, s.q_len);
        b.max_seq_len = std::max<int64_t>(b.max_seq_len, s.seq_len);
    }
    b.query_start = Tensor::zeros({b.num_seqs + 1}, DType::kI32);
    b.seq_lens = Tensor::zeros({b.num_seqs}, DType::kI32);
    b.block_table = Tensor::zeros({b.num_seqs, std::max<int64_t>(b.max_pages, 1)}, DType::kI32);
    std::vector<int32_t> page_ids(static_cast<size_t>(num_pages));
    std::iota(page_ids.begin(), page_ids.end(), 0);
    std::shuffle(page_ids.begin(), page_ids.end(), rng);

    const Shape cache_shape{num_pages, cfg.page_size, cfg.num_kv_heads, cfg.head_dim};
    b.k_cache = Tensor::zeros(cache_shape, DType::kBF16);
    b.v_cache = Tensor::zeros(cache_shape, DType::kBF16);
    const int64_t slot_elems = cfg.num_kv_heads * cfg.head_dim;
    std::fill_n(b.k_cache.data<uint16_t>(), b.k_cache.numel(), kBf16NaN);
    std::fill_n(b.v_cache.data<uint16_t>(), b.v_cache.numel(), kBf16NaN);
    std::normal_distribution<float> normal(0.f, 1.f);

    size_t next_page = 0;
    for (int64_t s = 0; s < b.num_seqs; ++s) {
        b.query_start.data<int32_t>()[s + 1] =
            b.query_start.data<int32_t>()[s] + seqs[size_t(s)].q_len;
        b.seq_lens.data<int32_t>()[s] = seqs[size_t(s)].seq_len;
        int32_t* row = b.block_table.data<int32_t>() + s * b.block_table.size(1);
        std::fill_n(row, b.block_table.size(1), -1);  // unused entries: reading one faults
        for (int64_t key = 0; key < seqs[size_t(s)].seq_len; ++key) {
            if (key % cfg.page_size == 0) row[key / cfg.page_size] = page_ids[next_page++];
            const int64_t slot =
                int64_t(row[key / cfg.page_size]) * cfg.page_size + key % cfg.page_size;
            for (int64_t e = 0; e < slot_elems; ++e) {
                b.k_cache.data<uint16_t>()[slot * slot_elems + e] = f32_to_bf16(normal(rng));
                b.v_cache.data<uint16_t>()[slot * slot_elems + e] = f32_to_bf16(normal(rng));
            }
        }
    }
    // q ~ N(0, 2²): scores with std ~2 after the 1/sqrt(head_dim) scale, so softmax is peaked
    // enough that each key's weight matters.
    b.q = Tensor::zeros({b.num_tokens, cfg.num_heads, cfg.head_dim}, DType::kBF16);
    for (int64_t i = 0; i < b.q.numel(); ++i)
        b.q.data<uint16_t>()[i] = f32_to_bf16(2.f * normal(rng));
    return b;
}

inline Tensor run_cpu(const Batch& b) {
    Tensor q = b.q.to_f32(), k = b.k_cache.to_f32(), v = b.v_cache.to_f32();
    Tensor out = Tensor::zeros({b.num_tokens, b.cfg.num_heads * b.cfg.head_dim}, DType::kF32);
    cpu::PagedAttentionArgs args{q.data<float>(),
                                 k.data<float>(),
                                 v.data<float>(),
                                 b.query_start.data<int32_t>(),
                                 b.seq_lens.data<int32_t>(),
                                 b.block_table.data<int32_t>(),
                                 b.num_seqs,
                                 b.block_table.size(1),
                                 b.cfg.page_size,
                                 b.cfg.num_heads,
                                 b.cfg.num_kv_heads,
                                 b.cfg.head_dim,
                                 1.f / std::sqrt(float(b.cfg.head_dim)),
                                 out.data<float>()};
    cpu::paged_attention(args);
    return out;
}

inline std::string describe(const Config& c) {
    return "heads " + std::to_string(c.num_heads) + "/" + std::to_string(c.num_kv_heads) +
           " head_dim " + std::to_string(c.head_dim) + " page " + std::to_string(c.page_size);
}
inline std::string describe(const Config& c, const std::vector<Seq>& seqs) {
    std::string s = describe(c) + " seqs (q_len/seq_len):";
    for (const Seq& q : seqs) s += " " + std::to_string(q.q_len) + "/" + std::to_string(q.seq_len);
    return s;
}

// `got` (a backend's output as f32 on the host) against the CPU reference on b, within the
// tolerances above; `what` names the case in the failure messages.
inline void expect_close(const Batch& b, const Tensor& got, const std::string& what) {
    const Tensor ref = run_cpu(b);
    double sum_err = 0;
    int64_t bad = 0, first_bad = -1;
    for (int64_t i = 0; i < ref.numel(); ++i) {
        const float r = ref.data<float>()[i], g = got.data<float>()[i];
        const float err = std::fabs(g - r);
        sum_err += std::isfinite(err) ? err : 1e9;
        if (!(err <= 1e-2f + 1e-2f * std::fabs(r))) {
            if (first_bad < 0) first_bad = i;
            ++bad;
        }
    }
    const double mean_err = sum_err / double(std::max<int64_t>(ref.numel(), 1));
    const int64_t head_dim = b.cfg.head_dim, row_elems = b.cfg.num_heads * head_dim;
    EXPECT_EQ(bad, 0) << what << ": first bad element token " << first_bad / row_elems << " head "
                      << first_bad % row_elems / head_dim << " dim " << first_bad % head_dim
                      << ": gpu " << (first_bad >= 0 ? got.data<float>()[first_bad] : 0.f)
                      << " cpu " << (first_bad >= 0 ? ref.data<float>()[first_bad] : 0.f);
    EXPECT_LT(mean_err, 2e-3) << what;
}

// A random batch of `seqs` run through `run_gpu` (one backend; it returns the output as f32 on
// the host) against the CPU reference.
inline void expect_matches_cpu(const Config& cfg, const std::vector<Seq>& seqs, std::mt19937& rng,
                               const std::function<Tensor(const Batch&)>& run_gpu) {
    const Batch b = make_batch(cfg, seqs, rng);
    expect_close(b, run_gpu(b), describe(cfg, seqs));
}

}  // namespace miniinfer::attention_testing
