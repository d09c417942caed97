// Every CUDA op at Qwen3-0.6B's shapes (hidden 1024, 16 heads, 8 KV heads, head_dim 128,
// intermediate 3072, vocab 151936), for a decode step of 256 rows and a prefill step of 2048
// tokens, and the MoE layer's ops at Qwen3-30B-A3B's shapes (hidden 2048, 128 experts, top 8,
// moe_intermediate 768) for steps of 1, 2, 4, 8, 256 and 8192 tokens: the median time of a launch
// (L2 flushed before each, so inputs come from HBM) and the achieved GB/s (and TFLOP/s for GEMMs
// and attention) against this device's measured copy bandwidth and bf16 GEMM rate (gpu_testing.h).
// Bytes are what the op must move at least: each input read once, each output written once. A
// table, never a verdict: exits 0 whatever the speed, and without a GPU.
//
//   build/tests/gpu/bench_cuda_ops [filter [moe_tokens]]   only the rows whose op name contains
//   filter ("moe grouped" names the ops inside the group "moe" too); MoE ops at that one step size
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "gpu_testing.h"
#include "kernels/cuda/attention/attention.h"
#include "kernels/cuda/elementwise/cast.h"
#include "kernels/cuda/elementwise/embedding.h"
#include "kernels/cuda/elementwise/fp8_quantize.h"
#include "kernels/cuda/elementwise/gather_rows.h"
#include "kernels/cuda/elementwise/silu_mul.h"
#include "kernels/cuda/gdn/gated_delta_net.h"
#include "kernels/cuda/gemm/fp8_gemm.h"
#include "kernels/cuda/gemm/fp8_gemv.h"
#include "kernels/cuda/gemm/gemm.h"
#include "kernels/cuda/gemm/gemv.h"
#include "kernels/cuda/gemm/grouped_gemm.h"
#include "kernels/cuda/moe/moe_gemv.h"
#include "kernels/cuda/moe/moe_routing.h"
#include "kernels/cuda/norm/qk_norm_rope.h"
#include "kernels/cuda/norm/rms_norm.h"
#include "kernels/cuda/sampling/penalties.h"
#include "kernels/cuda/sampling/sampling.h"
#include "layers/cuda/attention_backend.h"

using namespace miniinfer;
using gpu_testing::LaunchTiming;
using gpu_testing::print_bench_row;
using gpu_testing::random_bf16;
using gpu_testing::time_launch;

namespace {

// Qwen3-0.6B.
constexpr int64_t kHidden = 1024, kHeads = 16, kKvHeads = 8, kHeadDim = 128, kInter = 3072,
                  kVocab = 151936;
constexpr int64_t kDecodeRows = 256, kPrefillTokens = 2048;
constexpr int64_t kPageSize = 16;
constexpr double kBf16 = 2, kF32 = 4, kI32 = 4;

std::string g_filter;
std::mt19937 g_rng(1);

bool wanted(const std::string& op) {
    return g_filter.empty() || op.find(g_filter) != std::string::npos;
}
// Whether a group of ops (e.g. "moe") may hold a wanted op: as wanted(), or the filter names an
// op inside the group ("moe grouped").
bool wanted_group(const std::string& group) {
    return wanted(group) || g_filter.starts_with(group);
}

std::string dims(std::initializer_list<int64_t> sizes) {
    std::string out;
    for (int64_t s : sizes) out += (out.empty() ? "" : "x") + std::to_string(s);
    return out;
}

Tensor device_i32(const std::vector<int32_t>& values) {
    Tensor t = Tensor::zeros({int64_t(values.size())}, DType::kI32);
    std::copy(values.begin(), values.end(), t.data<int32_t>());
    return cuda::to_device(t);
}

Tensor device_f32(const std::vector<float>& values) {
    Tensor t = Tensor::zeros({int64_t(values.size())}, DType::kF32);
    std::copy(values.begin(), values.end(), t.data<float>());
    return cuda::to_device(t);
}

Tensor random_device_bf16(Shape shape, float scale = 1.f) {
    return cuda::to_device(random_bf16(std::move(shape), g_rng, scale));
}

void bench_norms(int64_t rows, const char* phase) {
    Tensor x = random_device_bf16({rows, kHidden}), residual = random_device_bf16({rows, kHidden});
    Tensor w = random_device_bf16({kHidden}),
           out = cuda::device_tensor({rows, kHidden}, DType::kBF16);
    const std::string shape = std::string(phase) + " " + dims({rows, kHidden});
    const double row_bytes = double(rows * kHidden) * kBf16;
    if (wanted("rms_norm"))
        print_bench_row("rms_norm", shape, time_launch([&](cudaStream_t s) {
                            cuda::add_rms_norm(x, nullptr, w, 1e-6f, out, s);
                        }),
                        2 * row_bytes + kHidden * kBf16);
    if (wanted("add_rms_norm"))  // x read; residual read and written; out written
        print_bench_row("add_rms_norm", shape, time_launch([&](cudaStream_t s) {
                            cuda::add_rms_norm(x, &residual, w, 1e-6f, out, s);
                        }),
                        4 * row_bytes + kHidden * kBf16);
}

void bench_qk_norm_rope(int64_t tokens, const char* phase) {
    if (!wanted("qk_norm_rope_store")) return;
    const int64_t total_heads = kHeads + 2 * kKvHeads;
    const int64_t num_pages = (tokens + kPageSize - 1) / kPageSize;
    Tensor qkv = random_device_bf16({tokens, total_heads * kHeadDim});
    Tensor q_norm = random_device_bf16({kHeadDim}), k_norm = random_device_bf16({kHeadDim});
    Tensor q_out = cuda::device_tensor({tokens, kHeads, kHeadDim}, DType::kBF16);
    Tensor k_cache = cuda::device_tensor({num_pages, kPageSize, kKvHeads, kHeadDim}, DType::kBF16);
    Tensor v_cache = cuda::device_tensor({num_pages, kPageSize, kKvHeads, kHeadDim}, DType::kBF16);
    std::vector<int32_t> positions(static_cast<size_t>(tokens)), slots(static_cast<size_t>(tokens));
    std::iota(slots.begin(), slots.end(), 0);
    for (int64_t t = 0; t < tokens; ++t) positions[size_t(t)] = int32_t(500 + t);
    std::vector<float> inv_freq(static_cast<size_t>(kHeadDim / 2));
    for (size_t i = 0; i < inv_freq.size(); ++i)
        inv_freq[i] = float(1.0 / std::pow(1e6, double(2 * i) / double(kHeadDim)));
    Tensor d_positions = device_i32(positions), d_slots = device_i32(slots);
    Tensor d_inv_freq = device_f32(inv_freq);
    const double bytes = 2.0 * double(tokens * total_heads * kHeadDim) * kBf16 + 2 * tokens * kI32;
    print_bench_row(
        "qk_norm_rope_store", std::string(phase) + " " + dims({tokens, total_heads, kHeadDim}),
        time_launch([&](cudaStream_t s) {
            cuda::qk_norm_rope_store(qkv, &q_norm, &k_norm, 1e-6f, d_positions, d_inv_freq, d_slots,
                                     kHeads, kKvHeads, kHeadDim, q_out, k_cache, v_cache, s);
        }),
        bytes);
}

void bench_silu_mul(int64_t rows, const char* phase) {
    if (!wanted("silu_mul")) return;
    Tensor gate_up = random_device_bf16({rows, 2 * kInter});
    Tensor out = cuda::device_tensor({rows, kInter}, DType::kBF16);
    print_bench_row("silu_mul", std::string(phase) + " " + dims({rows, 2 * kInter}),
                    time_launch([&](cudaStream_t s) { cuda::silu_mul(gate_up, out, s); }),
                    3.0 * double(rows * kInter) * kBf16);
}

void bench_gathers(int64_t rows, const char* phase) {
    std::uniform_int_distribution<int32_t> any_id(0, int32_t(kVocab - 1));
    std::vector<int32_t> ids(static_cast<size_t>(rows));
    for (auto& id : ids) id = any_id(g_rng);
    Tensor d_ids = device_i32(ids);
    Tensor out = cuda::device_tensor({rows, kHidden}, DType::kBF16);
    const double bytes = 2.0 * double(rows * kHidden) * kBf16 + double(rows) * kI32;
    if (wanted("embedding")) {
        static const Tensor table = random_device_bf16({kVocab, kHidden});
        print_bench_row("embedding", std::string(phase) + " " + dims({rows, kHidden}),
                        time_launch([&](cudaStream_t s) { cuda::embedding(d_ids, table, out, s); }),
                        bytes);
    }
    if (wanted("gather_rows")) {  // a permutation of the step's own rows
        Tensor x = random_device_bf16({rows, kHidden});
        std::vector<int32_t> perm(static_cast<size_t>(rows));
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), g_rng);
        Tensor d_perm = device_i32(perm);
        print_bench_row("gather_rows", std::string(phase) + " " + dims({rows, kHidden}),
                        time_launch([&](cudaStream_t s) { cuda::gather_rows(x, d_perm, out, s); }),
                        bytes);
    }
}

struct GemmShape {
    const char* name;
    int64_t n, k;
};
constexpr GemmShape kLayerGemms[] = {{"qkv", (kHeads + 2 * kKvHeads) * kHeadDim, kHidden},
                                     {"o_proj", kHidden, kHeads* kHeadDim},
                                     {"gate_up", 2 * kInter, kHidden},
                                     {"down", kHidden, kInter}};

// out: bf16, or f32 (the LM head's logits).
void bench_gemm(int64_t m, const GemmShape& g, const char* phase, DType out = DType::kBF16) {
    static cuda::Gemm gemm;
    Tensor x = random_device_bf16({m, g.k}), w = random_device_bf16({g.n, g.k}, 0.02f);
    Tensor y = cuda::device_tensor({m, g.n}, out);
    const double bytes = double(m * g.k + g.n * g.k) * kBf16 + double(m * g.n) * dtype_size(out);
    print_bench_row(std::string("gemm ") + g.name + (out == DType::kF32 ? " f32" : ""),
                    std::string(phase) + " " + dims({m, g.n, g.k}),
                    time_launch([&](cudaStream_t s) { gemm.run(x, w, nullptr, y, s); }), bytes,
                    2.0 * double(m) * double(g.n) * double(g.k));
}

// gemv: the Gemm's path for m <= 2 (single-sequence decode); bandwidth-bound on w.
void bench_gemv(int64_t m, const GemmShape& g, DType out = DType::kBF16) {
    Tensor x = random_device_bf16({m, g.k}), w = random_device_bf16({g.n, g.k}, 0.02f);
    Tensor y = cuda::device_tensor({m, g.n}, out);
    const double bytes = double(m * g.k + g.n * g.k) * kBf16 + double(m * g.n) * dtype_size(out);
    print_bench_row(std::string("gemv ") + g.name + (out == DType::kF32 ? " f32" : ""),
                    "decode " + dims({m, g.n, g.k}),
                    time_launch([&](cudaStream_t s) { cuda::gemv(x, w, nullptr, y, s); }), bytes,
                    2.0 * double(m) * double(g.n) * double(g.k));
}

// Attention over a paged cache with pages in order. seq_lens: each sequence's context after
// this step; q_lens: its new tokens.
// fp8: an FP8 KV cache (e4m3 bytes, --kv-cache-dtype fp8), half the K/V bytes. heads, kv_heads:
// Qwen3-0.6B's unless given (30B-A3B: 32 and 4, a GQA group of 8).
void bench_attention(const std::vector<int32_t>& q_lens, const std::vector<int32_t>& seq_lens,
                     std::string shape, bool fp8 = false, int64_t heads = kHeads,
                     int64_t kv_heads = kKvHeads) {
    if (heads != kHeads || kv_heads != kKvHeads)
        shape += ", " + std::to_string(heads) + "/" + std::to_string(kv_heads) + " heads";
    const double kv_element = fp8 ? 1.0 : kBf16;
    const int64_t num_seqs = int64_t(q_lens.size());
    std::vector<int32_t> query_start = {0};
    int64_t max_q = 0, max_seq = 0, pages_total = 0;
    double kv_bytes = 0, flops = 0;
    for (int64_t s = 0; s < num_seqs; ++s) {
        query_start.push_back(query_start.back() + q_lens[size_t(s)]);
        max_q = std::max<int64_t>(max_q, q_lens[size_t(s)]);
        max_seq = std::max<int64_t>(max_seq, seq_lens[size_t(s)]);
        pages_total += (seq_lens[size_t(s)] + kPageSize - 1) / kPageSize;
        kv_bytes += 2.0 * double(seq_lens[size_t(s)] * kv_heads * kHeadDim) * kv_element;
        // Q·Kᵀ and P·V over the keys each query row sees (causal).
        const double prefix = seq_lens[size_t(s)] - q_lens[size_t(s)];
        for (int64_t t = 0; t < q_lens[size_t(s)]; ++t)
            flops += 4.0 * double(heads * kHeadDim) * (prefix + double(t) + 1);
    }
    const int64_t tokens = query_start.back();
    const int64_t max_pages = (max_seq + kPageSize - 1) / kPageSize;
    std::vector<int32_t> table(static_cast<size_t>(num_seqs * max_pages), 0);
    int32_t next_page = 0;
    for (int64_t s = 0; s < num_seqs; ++s)
        for (int64_t p = 0; p < (seq_lens[size_t(s)] + kPageSize - 1) / kPageSize; ++p)
            table[size_t(s * max_pages + p)] = next_page++;
    Tensor q = random_device_bf16({tokens, heads, kHeadDim});
    Tensor k_cache = random_device_bf16({pages_total, kPageSize, kv_heads, kHeadDim});
    Tensor v_cache = random_device_bf16({pages_total, kPageSize, kv_heads, kHeadDim});
    if (fp8) {  // e4m3 0x38 = 1.0 everywhere: the values do not change the kernels' speed
        for (Tensor* t : {&k_cache, &v_cache}) {
            *t = cuda::device_tensor({pages_total, kPageSize, kv_heads, kHeadDim}, DType::kU8);
            MI_CUDA_CHECK(cudaMemset(t->raw(), 0x38, t->nbytes()));
        }
    }
    Tensor out = cuda::device_tensor({tokens, heads * kHeadDim}, DType::kBF16);
    Tensor d_query_start = device_i32(query_start), d_seq_lens = device_i32(seq_lens);
    Tensor d_table = cuda::to_device(Tensor::zeros({num_seqs, max_pages}, DType::kI32));
    MI_CUDA_CHECK(
        cudaMemcpy(d_table.raw(), table.data(), table.size() * 4, cudaMemcpyHostToDevice));
    const cuda::AttentionParams p{&q,          &k_cache,  &v_cache, &d_query_start,
                                  &d_seq_lens, &d_table,  num_seqs, max_q,
                                  max_seq,     0.088388f, &out};
    const double bytes = kv_bytes + 2.0 * double(tokens * heads * kHeadDim) * kBf16;
    // Both backends as the runner drives them: plan() (the CPU's, once per step, outside the
    // timing; fa2's uploads the lengths its splits follow and the longest-first order), run().
    for (const char* name : {"fa2", "flashinfer"}) {
        const std::string row = std::string("attention ") + name + (fp8 ? " fp8" : "");
        if (!wanted(row)) continue;  // "attention fa2" names its FP8 rows too
        auto backend = cuda::make_attention_backend(
            name, {tokens, num_seqs, heads, kv_heads, kHeadDim, kPageSize});
        cuda::Stream stream;
        backend->plan(query_start, seq_lens, stream.get());
        stream.synchronize();
        print_bench_row(row, shape, time_launch([&](cudaStream_t s) { backend->run(p, s); }), bytes,
                        flops);
    }
}

// One Qwen3-30B-A3B MoE layer, op by op, on random activations and a random router (near-uniform
// routing, as dummy weights give). Bytes: the expert weights the step reads (the experts that got
// a row) and the activations each op moves.
void bench_moe(int64_t tokens) {
    constexpr int64_t kMoeHidden = 2048, kExperts = 128, kTopK = 8, kMoeInter = 768;
    const std::string shape = std::to_string(tokens) + " tokens";
    const int64_t tile = cuda::grouped_gemm_tile_rows(tokens * kTopK, kExperts);
    const int64_t max_rows = cuda::moe_max_rows(tokens, kTopK, kExperts, tile);
    Tensor x = random_device_bf16({tokens, kMoeHidden});
    Tensor router = random_device_bf16({kExperts, kMoeHidden}, 0.02f);
    Tensor gate_up_w = random_device_bf16({kExperts, 2 * kMoeInter, kMoeHidden}, 0.02f);
    Tensor down_w = random_device_bf16({kExperts, kMoeHidden, kMoeInter}, 0.02f);
    Tensor logits = cuda::device_tensor({tokens, kExperts}, DType::kBF16);
    Tensor ids = cuda::device_tensor({tokens, kTopK}, DType::kI32);
    Tensor weights = cuda::device_tensor({tokens, kTopK}, DType::kF32);
    Tensor slot_row = cuda::device_tensor({tokens, kTopK}, DType::kI32);
    Tensor offsets = cuda::device_tensor({kExperts + 1}, DType::kI32);
    Tensor workspace = cuda::device_tensor(
        {cuda::moe_permute_workspace_elems(tokens, kTopK, kExperts)}, DType::kI32);
    Tensor row_token = cuda::device_tensor({max_rows}, DType::kI32);
    Tensor x_perm = cuda::device_tensor({max_rows, kMoeHidden}, DType::kBF16);
    Tensor gate_up = cuda::device_tensor({max_rows, 2 * kMoeInter}, DType::kBF16);
    Tensor act = cuda::device_tensor({max_rows, kMoeInter}, DType::kBF16);
    Tensor y_perm = cuda::device_tensor({max_rows, kMoeHidden}, DType::kBF16);
    Tensor out = cuda::device_tensor({tokens, kMoeHidden}, DType::kBF16);
    static cuda::Gemm gemm;
    // One pass in order, so that every op below reads what its predecessor wrote.
    gemm.run(x, router, nullptr, logits, nullptr);
    cuda::moe_route(logits, kTopK, true, ids, weights, nullptr);
    cuda::moe_permute(ids, kExperts, tile, workspace, offsets, row_token, slot_row, nullptr);
    cuda::moe_gather(x, row_token, offsets, x_perm, nullptr);
    std::vector<int32_t> host_offsets(kExperts + 1);
    MI_CUDA_CHECK(cudaMemcpy(host_offsets.data(), offsets.raw(), host_offsets.size() * 4,
                             cudaMemcpyDeviceToHost));
    int64_t active = 0;
    for (int64_t e = 0; e < kExperts; ++e) active += host_offsets[e + 1] > host_offsets[e];
    const int64_t rows = host_offsets.back();
    const double routed = double(tokens * kTopK), act_row = double(kMoeHidden) * kBf16;
    const std::string tiled =
        shape + ", tile " + std::to_string(tile) + ", " + std::to_string(active) + " experts";
    if (wanted("moe router"))
        print_bench_row("moe router gemm", shape, time_launch([&](cudaStream_t s) {
                            gemm.run(x, router, nullptr, logits, s);
                        }),
                        double(tokens) * act_row + double(kExperts * kMoeHidden) * kBf16,
                        2.0 * double(tokens * kExperts * kMoeHidden));
    if (wanted("moe_route"))
        print_bench_row("moe_route", shape, time_launch([&](cudaStream_t s) {
                            cuda::moe_route(logits, kTopK, true, ids, weights, s);
                        }),
                        double(tokens * kExperts) * kBf16 + routed * (kI32 + kF32));
    if (wanted("moe_permute"))
        print_bench_row("moe_permute", tiled, time_launch([&](cudaStream_t s) {
                            cuda::moe_permute(ids, kExperts, tile, workspace, offsets, row_token,
                                              slot_row, s);
                        }),
                        routed * 2 * kI32 + double(max_rows) * kI32);
    if (wanted("moe_gather"))
        print_bench_row("moe_gather", tiled, time_launch([&](cudaStream_t s) {
                            cuda::moe_gather(x, row_token, offsets, x_perm, s);
                        }),
                        double(tokens + rows) * act_row);
    const double gate_up_bytes = double(active * 2 * kMoeInter * kMoeHidden) * kBf16 +
                                 double(rows) * (act_row + 2.0 * kMoeInter * kBf16);
    if (wanted("moe grouped"))
        print_bench_row("moe grouped gate_up", tiled, time_launch([&](cudaStream_t s) {
                            cuda::grouped_gemm(x_perm, nullptr, gate_up_w, offsets, tile,
                                               cuda::GroupedGemmEpilogue::kStore, gate_up, s);
                        }),
                        gate_up_bytes, 2.0 * routed * double(2 * kMoeInter * kMoeHidden));
    // The fused gate_up (gather into its row loads, silu_mul into its epilogue; cuda::Moe runs
    // the last), and the three unfused launches it replaces, timed together.
    using cuda::GroupedGemmEpilogue;
    const double tokens_in = double(tokens) * act_row + double(max_rows) * kI32;
    const double gate_up_w_bytes = double(active * 2 * kMoeInter * kMoeHidden) * kBf16;
    const double gate_up_flops = 2.0 * routed * double(2 * kMoeInter * kMoeHidden);
    if (wanted("moe grouped"))
        print_bench_row("moe grouped gate_up+gather", tiled, time_launch([&](cudaStream_t s) {
                            cuda::grouped_gemm(x, &row_token, gate_up_w, offsets, tile,
                                               GroupedGemmEpilogue::kStore, gate_up, s);
                        }),
                        gate_up_w_bytes + tokens_in + double(rows * 2 * kMoeInter) * kBf16,
                        gate_up_flops);
    if (wanted("moe grouped"))
        print_bench_row("moe grouped gate_up+silu", tiled, time_launch([&](cudaStream_t s) {
                            cuda::grouped_gemm(x_perm, nullptr, gate_up_w, offsets, tile,
                                               GroupedGemmEpilogue::kSiluMul, act, s);
                        }),
                        gate_up_w_bytes + double(rows) * (act_row + double(kMoeInter) * kBf16),
                        gate_up_flops);
    if (wanted("moe grouped"))
        print_bench_row("moe grouped gate_up+gather+silu", tiled, time_launch([&](cudaStream_t s) {
                            cuda::grouped_gemm(x, &row_token, gate_up_w, offsets, tile,
                                               GroupedGemmEpilogue::kSiluMul, act, s);
                        }),
                        gate_up_w_bytes + tokens_in + double(rows * kMoeInter) * kBf16,
                        gate_up_flops);
    if (wanted("moe grouped"))
        print_bench_row(
            "moe grouped gather,gate_up,silu_mul", tiled, time_launch([&](cudaStream_t s) {
                cuda::moe_gather(x, row_token, offsets, x_perm, s);
                cuda::grouped_gemm(x_perm, nullptr, gate_up_w, offsets, tile,
                                   GroupedGemmEpilogue::kStore, gate_up, s);
                Tensor used = gate_up.slice_rows(0, rows);
                Tensor used_act = act.slice_rows(0, rows);
                cuda::silu_mul(used, used_act, s);
            }),
            gate_up_w_bytes + tokens_in + double(rows * kMoeInter) * kBf16, gate_up_flops);
    if (wanted("moe silu_mul")) {
        Tensor used = gate_up.slice_rows(0, rows), used_act = act.slice_rows(0, rows);
        print_bench_row("moe silu_mul", tiled,
                        time_launch([&](cudaStream_t s) { cuda::silu_mul(used, used_act, s); }),
                        3.0 * double(rows * kMoeInter) * kBf16);
    }
    const double down_bytes = double(active * kMoeInter * kMoeHidden) * kBf16 +
                              double(rows) * (act_row + double(kMoeInter) * kBf16);
    if (wanted("moe grouped"))
        print_bench_row("moe grouped down", tiled, time_launch([&](cudaStream_t s) {
                            cuda::grouped_gemm(act, nullptr, down_w, offsets, tile,
                                               GroupedGemmEpilogue::kStore, y_perm, s);
                        }),
                        down_bytes, 2.0 * routed * double(kMoeInter * kMoeHidden));
    // As cuda::Moe runs it: row_token marks act's padding rows, which are then not loaded.
    if (wanted("moe grouped"))
        print_bench_row("moe grouped down, padding marked", tiled, time_launch([&](cudaStream_t s) {
                            cuda::grouped_gemm(act, &row_token, down_w, offsets, tile,
                                               GroupedGemmEpilogue::kStore, y_perm, s,
                                               cuda::GroupedGemmRows::kPermuted);
                        }),
                        down_bytes, 2.0 * routed * double(kMoeInter * kMoeHidden));
    if (wanted("moe_combine"))
        print_bench_row("moe_combine", tiled, time_launch([&](cudaStream_t s) {
                            cuda::moe_combine(y_perm, slot_row, weights, out, s);
                        }),
                        (routed + double(tokens)) * act_row + routed * (kI32 + kF32));
    // The small-batch path (moe_gemv.h): two launches straight from the choices, no permute.
    if (wanted("moe gemv") && tokens * kTopK <= 64) {
        const double pair_w = double(kMoeInter * kMoeHidden) * kBf16;  // one expert's gate or down
        print_bench_row(
            "moe gemv gate_up+silu", shape, time_launch([&](cudaStream_t s) {
                cuda::moe_gemv_gate_up_silu(x, ids, gate_up_w, act, s);
            }),
            routed * 2 * pair_w + double(tokens) * act_row + routed * double(kMoeInter) * kBf16,
            gate_up_flops);
        print_bench_row(
            "moe gemv down+combine", shape, time_launch([&](cudaStream_t s) {
                cuda::moe_gemv_down_combine(act, ids, weights, down_w, out, s);
            }),
            routed * pair_w + routed * double(kMoeInter) * kBf16 + double(tokens) * act_row,
            2.0 * routed * double(kMoeInter * kMoeHidden));
    }
}

void bench_sampling() {
    const int64_t rows = kDecodeRows;
    const std::string shape = "decode " + dims({rows, kVocab});
    Tensor logits_bf16 = random_device_bf16({rows, kVocab}, 3.f);
    Tensor logits = cuda::device_tensor({rows, kVocab}, DType::kF32);
    const double logit_bytes = double(rows * kVocab) * kF32;
    if (wanted("bf16_to_f32"))
        print_bench_row("bf16_to_f32", shape, time_launch([&](cudaStream_t s) {
                            cuda::bf16_to_f32(logits_bf16, logits, s);
                        }),
                        double(rows * kVocab) * (kBf16 + kF32));
    cuda::bf16_to_f32(logits_bf16, logits, nullptr);
    Tensor tokens = cuda::device_tensor({rows}, DType::kI32);
    Tensor logprobs = cuda::device_tensor({rows}, DType::kF32);
    if (wanted("argmax"))
        print_bench_row("argmax", shape,
                        time_launch([&](cudaStream_t s) { cuda::argmax(logits, tokens, s); }),
                        logit_bytes);
    // Temperature alone is the balanced workload's sampling; top_p adds a radix select; top_k 20
    // with top_p 0.95 is what Qwen3's generation_config.json asks for.
    for (const auto& [top_k, top_p] :
         {std::pair<int32_t, float>{0, 1.f}, {0, 0.95f}, {20, 0.95f}}) {
        const std::string name = "sample T=0.6" +
                                 (top_k > 0 ? " top_k=" + std::to_string(top_k) : std::string()) +
                                 (top_p < 1.f ? std::string(" top_p=0.95") : std::string());
        if (!wanted(name)) continue;
        std::vector<cuda::RowSampling> params(static_cast<size_t>(rows));
        for (size_t r = 0; r < params.size(); ++r)
            params[r] = {0.6f, top_k, top_p, 0.f, r, 3, 0, 0};
        Tensor d_params =
            cuda::device_tensor({int64_t(rows * sizeof(cuda::RowSampling))}, DType::kU8);
        MI_CUDA_CHECK(
            cudaMemcpy(d_params.raw(), params.data(), d_params.nbytes(), cudaMemcpyHostToDevice));
        print_bench_row(name, shape, time_launch([&](cudaStream_t s) {
                            cuda::sample(logits, d_params, nullptr, 0, tokens, logprobs, nullptr,
                                         nullptr, nullptr, 0, s);
                        }),
                        logit_bytes);
    }
    if (wanted("apply_penalties")) {  // 64 prompt + 64 output ids a row, all three penalties
        std::uniform_int_distribution<int32_t> any_id(0, int32_t(kVocab - 1));
        std::vector<cuda::RowPenalties> params;
        std::vector<int32_t> starts = {0}, ids;
        for (int64_t r = 0; r < rows; ++r) {
            params.push_back({int32_t(r), 1.1f, 0.5, 0.25});
            for (int k = 0; k < 64; ++k) ids.push_back(any_id(g_rng));
            starts.push_back(int32_t(ids.size()));
            for (int k = 0; k < 64; ++k) ids.push_back(any_id(g_rng));
            starts.push_back(int32_t(ids.size()));
            starts.push_back(int32_t(ids.size()));
        }
        Tensor d_params =
            cuda::device_tensor({int64_t(params.size() * sizeof(cuda::RowPenalties))}, DType::kU8);
        MI_CUDA_CHECK(
            cudaMemcpy(d_params.raw(), params.data(), d_params.nbytes(), cudaMemcpyHostToDevice));
        Tensor d_starts = device_i32(starts), d_ids = device_i32(ids);
        cuda::DeviceBuffer workspace(cuda::penalties_workspace_bytes(kVocab));
        // Bytes: the ids, and a logit read and written per id (the kernel's bitmap on top).
        print_bench_row("apply_penalties", shape + " 128 ids/row", time_launch([&](cudaStream_t s) {
                            cuda::apply_penalties(logits, d_params, d_starts, d_ids,
                                                  workspace.data(), workspace.bytes(), s);
                        }),
                        double(ids.size()) * (kI32 + 2 * kF32));
    }
}

// The Gated DeltaNet ops at Qwen3.5-35B-A3B's shapes (16 key heads, 32 value heads of 128,
// conv 4): decode steps of 1 and 64 sequences, where the f32 states' read and write bound the
// time (the bytes counted), and a 2048-token prefill of one sequence.
void bench_gdn() {
    constexpr int64_t nk = 16, nv = 32, d = 128, C = 2 * nk * d + nv * d, Z = nv * d;
    const int64_t cols = C + Z + 2 * nv;
    for (auto [seqs, len] : {std::pair<int64_t, int64_t>{1, 1}, {64, 1}, {1, 2048}}) {
        const int64_t n = seqs * len;
        std::vector<int32_t> qs(static_cast<size_t>(seqs) + 1), pos(static_cast<size_t>(n)),
            slots(static_cast<size_t>(seqs)), zeros(static_cast<size_t>(seqs), 0);
        for (int64_t s = 0; s <= seqs; ++s) qs[size_t(s)] = int32_t(s * len);
        for (int64_t t = 0; t < n; ++t) pos[size_t(t)] = int32_t(len == 1 ? 100 : t % len);
        std::iota(slots.begin(), slots.end(), 0);
        const auto ints = [](const std::vector<int32_t>& v) {
            Tensor h = Tensor::zeros({int64_t(v.size())}, DType::kI32);
            std::copy(v.begin(), v.end(), h.data<int32_t>());
            return cuda::to_device(h);
        };
        Tensor d_qs = ints(qs), d_pos = ints(pos), d_slots = ints(slots), d_zeros = ints(zeros);
        const cuda::GdnSequences sq{&d_qs, &d_pos, &d_slots, &d_zeros, &d_zeros};
        Tensor proj = cuda::to_device(random_bf16({n, cols}, g_rng, 1.f));
        Tensor conv_w = cuda::to_device(random_bf16({C, 4}, g_rng, 0.5f));
        Tensor small = cuda::to_device(random_bf16({nv}, g_rng, 0.5f));
        Tensor norm_w = cuda::to_device(random_bf16({d}, g_rng, 0.5f));
        Tensor conv_state = cuda::device_tensor({seqs, 3, C}, DType::kF32);
        Tensor state = cuda::device_tensor({seqs, nv, d, d}, DType::kF32);
        MI_CUDA_CHECK(cudaMemset(conv_state.raw(), 0, conv_state.nbytes()));
        MI_CUDA_CHECK(cudaMemset(state.raw(), 0, state.nbytes()));
        Tensor qkv = cuda::device_tensor({n, C}, DType::kBF16);
        Tensor out = cuda::device_tensor({n, Z}, DType::kBF16);
        const std::string shape = std::to_string(seqs) + " seqs x " + std::to_string(len) +
                                  (len == 1 ? " token" : " tokens");
        if (wanted("gdn conv1d"))
            print_bench_row("gdn conv1d", shape, time_launch([&](cudaStream_t s) {
                                cuda::causal_conv1d_silu(proj, conv_w, sq, conv_state, qkv, s);
                            }),
                            double(n) * C * kBf16 * 2 + 2.0 * conv_state.nbytes());
        if (wanted("gdn delta rule"))
            print_bench_row("gdn delta rule", shape, time_launch([&](cudaStream_t s) {
                                cuda::gated_delta_rule({.qkv = &qkv,
                                                        .zba = &proj,
                                                        .z_col = C,
                                                        .b_col = C + Z,
                                                        .a_col = C + Z + nv,
                                                        .A_log = &small,
                                                        .dt_bias = &small,
                                                        .norm_weight = &norm_w,
                                                        .norm_eps = 1e-6f,
                                                        .num_k_heads = nk,
                                                        .num_v_heads = nv,
                                                        .head_k_dim = d,
                                                        .head_v_dim = d,
                                                        .state = &state,
                                                        .out = &out},
                                                       sq, s);
                            }),
                            2.0 * double(state.nbytes()) + double(n) * (C + 2 * Z) * kBf16);
    }
}

// The FP8 ops (issue 50) at Qwen3-8B's projections (hidden 4096, q 4096 + kv 2 x 1024, inter
// 12288) and Qwen3-30B-A3B's experts: the activation quantization, the GEMV at 1-8 rows, the GEMM
// at a decode batch and a prefill chunk (against the measured FP8 GEMM rate), the MoE GEMV.
// Weights: random e4m3 bytes of magnitude below 4, scales 1 / (64 sqrt(k)).
Tensor random_fp8(Shape shape) {
    Tensor t = Tensor::zeros(std::move(shape), DType::kF8E4M3);
    auto* b = static_cast<uint8_t*>(t.raw());
    for (int64_t i = 0; i < t.numel(); ++i) {
        const uint32_t r = g_rng();
        b[i] = uint8_t((r & 0x80u) | ((r >> 8) % 72u));
    }
    return cuda::to_device(t);
}

Tensor fp8_scales(Shape shape, int64_t k) {
    Tensor t = Tensor::zeros(std::move(shape), DType::kF32);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = 1.f / (64.f * std::sqrt(float(k)));
    return cuda::to_device(t);
}

void bench_fp8() {
    struct Proj {
        const char* name;
        int64_t n, k;
    };
    const Proj projs[] = {
        {"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 24576, 4096}, {"down", 4096, 12288}};
    auto blocks = [](int64_t v) { return (v + 127) / 128; };
    for (const Proj& p : projs) {
        const Tensor w = random_fp8({p.n, p.k});
        const Tensor s = fp8_scales({blocks(p.n), blocks(p.k)}, p.k);
        const double w_bytes = double(p.n * p.k);
        for (int64_t m : {1, 2, 4, 8}) {
            if (!wanted(std::string("fp8 gemv ") + p.name)) break;
            const Tensor x = random_device_bf16({m, p.k});
            Tensor y = cuda::device_tensor({m, p.n}, DType::kBF16);
            print_bench_row(
                std::string("fp8 gemv ") + p.name, "8B " + dims({m, p.n, p.k}),
                time_launch([&](cudaStream_t st) { cuda::fp8_gemv(x, w, s, nullptr, y, st); }),
                w_bytes + kBf16 * double(m * (p.k + p.n)));
        }
        for (int64_t m : {kDecodeRows, kPrefillTokens}) {
            const Tensor x = random_device_bf16({m, p.k});
            Tensor q = cuda::device_tensor({m, p.k}, DType::kF8E4M3);
            Tensor qs = cuda::device_tensor({m, blocks(p.k)}, DType::kF32);
            Tensor y = cuda::device_tensor({m, p.n}, DType::kBF16);
            if (wanted(std::string("fp8 quantize ") + p.name))
                print_bench_row(
                    std::string("fp8 quantize ") + p.name, "8B " + dims({m, p.k}),
                    time_launch([&](cudaStream_t st) { cuda::fp8_quantize(x, q, qs, st); }),
                    double(m * p.k) * (kBf16 + 1) + double(m * blocks(p.k)) * kF32);
            cuda::fp8_quantize(x, q, qs, nullptr);
            if (wanted(std::string("fp8 gemm ") + p.name))
                print_bench_row(std::string("fp8 gemm ") + p.name, "8B " + dims({m, p.n, p.k}),
                                time_launch([&](cudaStream_t st) {
                                    cuda::fp8_gemm(q, qs, w, s, nullptr, y, st);
                                }),
                                w_bytes + double(m * p.k) + kBf16 * double(m * p.n),
                                2.0 * double(m * p.n * p.k), true);
        }
    }
    // The MoE GEMV at Qwen3-30B-A3B's experts (128 of hidden 2048, inter 768), top 8.
    if (!wanted("fp8 moe gemv")) return;
    constexpr int64_t kE = 128, kH = 2048, kI = 768, kTopK = 8;
    const Tensor gate_up = random_fp8({kE, 2 * kI, kH}), down = random_fp8({kE, kH, kI});
    const Tensor gate_up_s = fp8_scales({kE, blocks(2 * kI), blocks(kH)}, kH);
    const Tensor down_s = fp8_scales({kE, blocks(kH), blocks(kI)}, kI);
    for (int64_t tokens : {1, 4}) {
        std::vector<int32_t> ids;
        std::vector<float> weights;
        for (int64_t t = 0; t < tokens; ++t)
            for (int64_t j = 0; j < kTopK; ++j) {
                ids.push_back(int32_t((t * 37 + j * 16) % kE));
                weights.push_back(1.f / kTopK);
            }
        const Tensor ids_d = device_i32(ids).view({tokens, kTopK});
        const Tensor weights_d = device_f32(weights).view({tokens, kTopK});
        const Tensor x = random_device_bf16({tokens, kH});
        Tensor act = cuda::device_tensor({tokens * kTopK, kI}, DType::kBF16);
        Tensor out = cuda::device_tensor({tokens, kH}, DType::kBF16);
        const double pairs = double(tokens * kTopK);
        print_bench_row("fp8 moe gemv gate_up", "30B-A3B " + dims({tokens, kTopK}),
                        time_launch([&](cudaStream_t st) {
                            cuda::moe_gemv_gate_up_silu_fp8(x, ids_d, gate_up, gate_up_s, act, st);
                        }),
                        pairs * double(2 * kI * kH));
        print_bench_row("fp8 moe gemv down", "30B-A3B " + dims({tokens, kTopK}),
                        time_launch([&](cudaStream_t st) {
                            cuda::moe_gemv_down_combine_fp8(act, ids_d, weights_d, down, down_s,
                                                            out, st);
                        }),
                        pairs * double(kH * kI));
    }
}

}  // namespace

int main(int argc, char** argv) {
    // A row at a time, so that a run cut short by a timeout still leaves the rows it measured.
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    if (cuda::device_count() == 0) {
        std::printf("bench_cuda_ops: no CUDA device visible, nothing measured\n");
        return 0;
    }
    if (argc > 1) g_filter = argv[1];
    // A second argument: the one token count the MoE ops are timed at (filling a 30B-A3B layer's
    // random experts takes seconds per count).
    std::vector<int64_t> moe_tokens = {1, 2, 4, 8, 256, 8192};
    if (argc > 2) moe_tokens = {std::stoll(argv[2])};
    if (gpu_testing::instrumented())
        std::printf("instrumented run (compute-sanitizer): the times below mean nothing\n");
    gpu_testing::print_bench_header();
    for (auto [rows, phase] : {std::pair<int64_t, const char*>{kDecodeRows, "decode"},
                               std::pair<int64_t, const char*>{kPrefillTokens, "prefill"}}) {
        bench_gathers(rows, phase);
        bench_norms(rows, phase);
        bench_qk_norm_rope(rows, phase);
        bench_silu_mul(rows, phase);
        for (const GemmShape& g : kLayerGemms)
            if (wanted(std::string("gemm ") + g.name)) bench_gemm(rows, g, phase);
    }
    if (wanted("gemm lm_head")) {
        bench_gemm(kDecodeRows, {"lm_head", kVocab, kHidden}, "decode");
        bench_gemm(kDecodeRows, {"lm_head", kVocab, kHidden}, "decode", DType::kF32);
    }
    for (int64_t m : {1, 2}) {
        for (const GemmShape& g : kLayerGemms)
            if (wanted(std::string("gemv ") + g.name)) bench_gemv(m, g);
        if (wanted("gemv lm_head")) {
            bench_gemv(m, {"lm_head", kVocab, kHidden});
            bench_gemv(m, {"lm_head", kVocab, kHidden}, DType::kF32);
        }
    }
    if (wanted_group("attention")) {
        // Decode: 256 sequences of 1024 keys; prefill: 2048 new tokens as one sequence, and as
        // 8 chunks of 256 after 768 cached tokens each.
        bench_attention(std::vector<int32_t>(kDecodeRows, 1),
                        std::vector<int32_t>(kDecodeRows, 1024), "decode 256 seqs x 1024 keys");
        bench_attention({int32_t(kPrefillTokens)}, {int32_t(kPrefillTokens)},
                        "prefill 1 x 2048 tokens");
        bench_attention(std::vector<int32_t>(8, 256), std::vector<int32_t>(8, 1024),
                        "prefill 8 x 256 new, 768 cached");
        // The same decode and chunked prefill on an FP8 cache.
        bench_attention(std::vector<int32_t>(kDecodeRows, 1),
                        std::vector<int32_t>(kDecodeRows, 1024), "decode 256 seqs x 1024 keys",
                        true);
        bench_attention(std::vector<int32_t>(8, 256), std::vector<int32_t>(8, 1024),
                        "prefill 8 x 256 new, 768 cached", true);
        // Decode at 30B-A3B's heads (a GQA group of 8) and Qwen3-8B's (a group of 4).
        for (auto [heads, kv_heads] : {std::pair<int64_t, int64_t>{32, 4}, {32, 8}})
            for (bool fp8 : {false, true})
                bench_attention(std::vector<int32_t>(kDecodeRows, 1),
                                std::vector<int32_t>(kDecodeRows, 1024),
                                "decode 256 seqs x 1024 keys", fp8, heads, kv_heads);
        // Decode over lengths spread as a balanced batch has them (128 .. 1148 keys, mean 638;
        // decode256's sequences all have one length at a time, the rows above), at batch 1 (the
        // bs1 workload's middle) and at small batches of long contexts, at 0.6B's and 30B-A3B's
        // heads.
        std::vector<int32_t> spread(kDecodeRows);
        for (int64_t i = 0; i < kDecodeRows; ++i) spread[size_t(i)] = int32_t(128 + 4 * i);
        for (auto [heads, kv_heads] : {std::pair<int64_t, int64_t>{16, 8}, {32, 4}}) {
            bench_attention(std::vector<int32_t>(kDecodeRows, 1), spread,
                            "decode 256 seqs x 128-1148 keys", false, heads, kv_heads);
            bench_attention({1}, {384}, "decode 1 seq x 384 keys", false, heads, kv_heads);
            // Long contexts at small batches (the decode's cluster form bounds their splits).
            bench_attention({1}, {4096}, "decode 1 seq x 4096 keys", false, heads, kv_heads);
            bench_attention({1, 1, 1, 1}, {16384, 16384, 16384, 16384},
                            "decode 4 seqs x 16384 keys", false, heads, kv_heads);
        }
    }
    bench_sampling();
    if (wanted_group("gdn")) bench_gdn();
    if (wanted_group("moe"))
        for (int64_t tokens : moe_tokens) bench_moe(tokens);
    if (wanted_group("fp8") && cuda::fp8_gemm_supported()) bench_fp8();
    MI_CUDA_CHECK(cudaDeviceSynchronize());
    return 0;
}
