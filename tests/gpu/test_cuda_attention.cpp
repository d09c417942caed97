// Paged attention (fa2 backend) against cpu::paged_attention on random batches, plus an
// informative decode bandwidth line.
//
// Tolerance (bf16 output): the GPU rounds P (the softmax numerators) to bf16 before P·V, as
// FlashAttention does, and rounds the output to bf16; the CPU stays in f32 on the same bf16
// inputs. Each element must satisfy |gpu - cpu| <= 1e-2 + 1e-2 |cpu| (the worst case of P's
// rounding, 2^-9 relative, times a |v| of up to ~4, plus half a bf16 ulp of the output), and
// the mean absolute error over the batch must stay below 2e-3 (expected ~3e-4), which catches
// systematic errors (a wrongly masked key, a bad split merge) that a per-element bound may hide.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "gpu_testing.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/attention.h"
#include "paged_attention_testing.h"

using namespace miniinfer;
using namespace miniinfer::attention_testing;

namespace {

Tensor run_gpu(const Batch& b) {
    Tensor q = cuda::to_device(b.q), k = cuda::to_device(b.k_cache), v = cuda::to_device(b.v_cache);
    Tensor qs = cuda::to_device(b.query_start), lens = cuda::to_device(b.seq_lens),
           table = cuda::to_device(b.block_table);
    Tensor out =
        cuda::device_tensor({b.num_tokens, b.cfg.num_heads * b.cfg.head_dim}, DType::kBF16);
    const size_t ws_bytes =
        cuda::attention_workspace_bytes(b.num_tokens, b.cfg.num_heads, b.cfg.head_dim);
    cuda::DeviceBuffer workspace(ws_bytes);
    cuda::AttentionParams p{&q,
                            &k,
                            &v,
                            &qs,
                            &lens,
                            &table,
                            b.num_seqs,
                            b.max_query_len,
                            b.max_seq_len,
                            1.f / std::sqrt(float(b.cfg.head_dim)),
                            &out};
    cuda::paged_attention(p, workspace.data(), ws_bytes, nullptr);
    MI_CUDA_CHECK(cudaDeviceSynchronize());
    return cuda::to_host(out).to_f32();
}

void expect_matches_cpu(const Config& cfg, const std::vector<Seq>& seqs, std::mt19937& rng) {
    attention_testing::expect_matches_cpu(cfg, seqs, rng, run_gpu);
}

std::vector<Config> all_configs() {
    return attention_testing::all_configs({16, 64, 256});
}

}  // namespace

TEST(CudaAttention, PrefillOnly) {
    REQUIRE_GPU();
    std::mt19937 rng(10);
    for (const Config& cfg : all_configs()) expect_matches_cpu(cfg, kPrefillSeqs, rng);
}

TEST(CudaAttention, DecodeOnly) {
    REQUIRE_GPU();
    std::mt19937 rng(11);
    for (const Config& cfg : all_configs()) expect_matches_cpu(cfg, kDecodeSeqs, rng);
}

TEST(CudaAttention, MixedBatchAndChunkAfterCachedPrefix) {
    REQUIRE_GPU();
    std::mt19937 rng(12);
    for (const Config& cfg : all_configs()) expect_matches_cpu(cfg, kMixedSeqs, rng);
}

// Long contexts: one or a few sequences, so the decode splits the KV length across blocks;
// a long chunked prefill against a long cached prefix.
TEST(CudaAttention, LongContextsSplitKv) {
    REQUIRE_GPU();
    std::mt19937 rng(13);
    for (const Config& cfg : all_configs()) {
        expect_matches_cpu(cfg, kLongDecodeSeqs, rng);
        expect_matches_cpu(cfg, kLongMixedDecodeSeqs, rng);
    }
    for (const Config& cfg : {Config{16, 8, 128, 16}, Config{14, 2, 64, 256}})
        expect_matches_cpu(cfg, {{200, 3000}, {1, 4000}, {64, 64}}, rng);
}

// A smaller workspace than asked for: fewer splits (none at 0 bytes), same answer.
TEST(CudaAttention, DecodeWithoutWorkspace) {
    REQUIRE_GPU();
    std::mt19937 rng(14);
    const Config cfg{16, 8, 128, 16};
    const Batch b = make_batch(cfg, {{1, 3000}, {1, 999}}, rng);
    const Tensor ref = run_cpu(b);
    Tensor q = cuda::to_device(b.q), k = cuda::to_device(b.k_cache), v = cuda::to_device(b.v_cache);
    Tensor qs = cuda::to_device(b.query_start), lens = cuda::to_device(b.seq_lens),
           table = cuda::to_device(b.block_table);
    Tensor out = cuda::device_tensor({b.num_tokens, cfg.num_heads * cfg.head_dim}, DType::kBF16);
    cuda::AttentionParams p{
        &q, &k, &v, &qs, &lens, &table, b.num_seqs, 1, b.max_seq_len, 1.f / std::sqrt(128.f), &out};
    cuda::paged_attention(p, nullptr, 0, nullptr);
    MI_CUDA_CHECK(cudaDeviceSynchronize());
    const Tensor got = cuda::to_host(out).to_f32();
    for (int64_t i = 0; i < ref.numel(); ++i) {
        const float r = ref.data<float>()[i];
        ASSERT_NEAR(got.data<float>()[i], r, 1e-2f + 1e-2f * std::fabs(r)) << i;
    }
}

// Informative: decode HBM bandwidth at Qwen3-0.6B's shapes (16 heads, 8 KV heads, head_dim
// 128, page 16), 256 sequences x 1024 keys: bytes of K and V read / time, against ~4.8 TB/s.
// Skipped when one launch takes far too long (a sanitizer or profiler is instrumenting it).
TEST(CudaAttention, DecodeBandwidth) {
    REQUIRE_GPU();
    const int64_t num_seqs = 256, seq_len = 1024, num_heads = 16, num_kv_heads = 8, head_dim = 128,
                  page_size = 16;
    const int64_t pages_per_seq = seq_len / page_size, num_pages = num_seqs * pages_per_seq;
    Tensor k = cuda::device_tensor({num_pages, page_size, num_kv_heads, head_dim}, DType::kBF16);
    Tensor v = cuda::device_tensor({num_pages, page_size, num_kv_heads, head_dim}, DType::kBF16);
    MI_CUDA_CHECK(cudaMemset(k.raw(), 0x3c, k.nbytes()));  // bf16 0x3c3c ≈ 0.0115 everywhere
    MI_CUDA_CHECK(cudaMemset(v.raw(), 0x3c, v.nbytes()));
    Tensor q = cuda::device_tensor({num_seqs, num_heads, head_dim}, DType::kBF16);
    Tensor qs_host = Tensor::zeros({num_seqs + 1}, DType::kI32),
           lens_host = Tensor::zeros({num_seqs}, DType::kI32);
    Tensor table_host = Tensor::zeros({num_seqs, pages_per_seq}, DType::kI32);
    std::vector<int32_t> page_ids(static_cast<size_t>(num_pages));
    std::iota(page_ids.begin(), page_ids.end(), 0);
    std::mt19937 rng(15);
    std::shuffle(page_ids.begin(), page_ids.end(), rng);
    for (int64_t s = 0; s < num_seqs; ++s) {
        qs_host.data<int32_t>()[s + 1] = int32_t(s + 1);
        lens_host.data<int32_t>()[s] = int32_t(seq_len);
    }
    std::copy(page_ids.begin(), page_ids.end(), table_host.data<int32_t>());
    Tensor qs = cuda::to_device(qs_host), lens = cuda::to_device(lens_host),
           table = cuda::to_device(table_host);
    Tensor out = cuda::device_tensor({num_seqs, num_heads * head_dim}, DType::kBF16);
    const size_t ws_bytes = cuda::attention_workspace_bytes(num_seqs, num_heads, head_dim);
    cuda::DeviceBuffer workspace(ws_bytes);
    cuda::AttentionParams p{
        &q, &k, &v, &qs, &lens, &table, num_seqs, 1, seq_len, 1.f / std::sqrt(128.f), &out};
    cuda::Event start(true), stop(true);

    start.record(nullptr);
    cuda::paged_attention(p, workspace.data(), ws_bytes, nullptr);
    stop.record(nullptr);
    stop.synchronize();
    if (cuda::Event::elapsed_ms(start, stop) > 50.f)
        GTEST_SKIP() << "one decode launch took " << cuda::Event::elapsed_ms(start, stop)
                     << " ms: instrumented (sanitizer?), bandwidth not measured";
    constexpr int kIters = 20;
    start.record(nullptr);
    for (int i = 0; i < kIters; ++i) cuda::paged_attention(p, workspace.data(), ws_bytes, nullptr);
    stop.record(nullptr);
    stop.synchronize();
    const double seconds = cuda::Event::elapsed_ms(start, stop) / 1e3 / kIters;
    const double bytes = 2.0 * double(num_seqs * seq_len * num_kv_heads * head_dim) * 2.0;
    std::printf(
        "[ BENCH    ] decode 256 seqs x 1024 keys, 16/8 heads, head_dim 128, page 16: %.1f us, "
        "%.0f GB/s of K/V (%.0f%% of 4.8 TB/s)\n",
        seconds * 1e6, bytes / seconds / 1e9, 100.0 * bytes / seconds / 4.8e12);
}

// Informative: causal prefill throughput at Qwen3-0.6B's shapes, 16 prompts x 1024 tokens, in
// TFLOP/s of the two matmuls (4 · head_dim FLOPs per visible (query, key, head)).
TEST(CudaAttention, PrefillThroughput) {
    REQUIRE_GPU();
    const int64_t num_seqs = 16, seq_len = 1024, num_heads = 16, num_kv_heads = 8, head_dim = 128,
                  page_size = 16;
    const int64_t pages_per_seq = seq_len / page_size, num_pages = num_seqs * pages_per_seq,
                  num_tokens = num_seqs * seq_len;
    Tensor k = cuda::device_tensor({num_pages, page_size, num_kv_heads, head_dim}, DType::kBF16);
    Tensor v = cuda::device_tensor({num_pages, page_size, num_kv_heads, head_dim}, DType::kBF16);
    Tensor q = cuda::device_tensor({num_tokens, num_heads, head_dim}, DType::kBF16);
    for (Tensor* t : {&k, &v, &q}) MI_CUDA_CHECK(cudaMemset(t->raw(), 0x3c, t->nbytes()));
    Tensor qs_host = Tensor::zeros({num_seqs + 1}, DType::kI32),
           lens_host = Tensor::zeros({num_seqs}, DType::kI32);
    Tensor table_host = Tensor::zeros({num_seqs, pages_per_seq}, DType::kI32);
    for (int64_t s = 0; s < num_seqs; ++s) {
        qs_host.data<int32_t>()[s + 1] = int32_t((s + 1) * seq_len);
        lens_host.data<int32_t>()[s] = int32_t(seq_len);
    }
    std::iota(table_host.data<int32_t>(), table_host.data<int32_t>() + num_pages, 0);
    Tensor qs = cuda::to_device(qs_host), lens = cuda::to_device(lens_host),
           table = cuda::to_device(table_host);
    Tensor out = cuda::device_tensor({num_tokens, num_heads * head_dim}, DType::kBF16);
    cuda::AttentionParams p{
        &q, &k, &v, &qs, &lens, &table, num_seqs, seq_len, seq_len, 1.f / std::sqrt(128.f), &out};
    cuda::Event start(true), stop(true);
    start.record(nullptr);
    cuda::paged_attention(p, nullptr, 0, nullptr);
    stop.record(nullptr);
    stop.synchronize();
    if (cuda::Event::elapsed_ms(start, stop) > 50.f)
        GTEST_SKIP() << "one prefill launch took " << cuda::Event::elapsed_ms(start, stop)
                     << " ms: instrumented (sanitizer?), throughput not measured";
    constexpr int kIters = 20;
    start.record(nullptr);
    for (int i = 0; i < kIters; ++i) cuda::paged_attention(p, nullptr, 0, nullptr);
    stop.record(nullptr);
    stop.synchronize();
    const double seconds = cuda::Event::elapsed_ms(start, stop) / 1e3 / kIters;
    const double flops = 4.0 * head_dim * num_heads * num_seqs * (seq_len * (seq_len + 1) / 2.0);
    std::printf(
        "[ BENCH    ] prefill 16 x 1024 tokens causal, 16/8 heads, head_dim 128, page 16: %.1f us, "
        "%.0f TFLOP/s (dense bf16 peak ~989)\n",
        seconds * 1e6, flops / seconds / 1e12);
}
