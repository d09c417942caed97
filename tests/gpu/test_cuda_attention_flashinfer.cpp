// Paged attention, flashinfer backend (FlashInferAttention: plan on the host, run on the device)
// against cpu::paged_attention on the fa2 test's batches, plus page size 24 (not a power of two),
// batches that do and do not split the key ranges, CUDA graph replay after a new plan, and
// informative decode bandwidth / prefill throughput lines at Qwen3-0.6B's shapes.
//
// Tolerances: paged_attention_testing.h (per element |gpu - cpu| <= 1e-2 + 1e-2 |cpu|, mean
// absolute error < 2e-3), the same as fa2's: both round P to bf16 before P·V; the split merge
// adds only f32 rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "gpu_testing.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_flashinfer.h"
#include "paged_attention_testing.h"

using namespace miniinfer;
using namespace miniinfer::attention_testing;

namespace {

// What the planner decided for the last batch run through run_flashinfer.
struct PlanStats {
    int64_t items = 0, merges = 0, chunk = 0, ctas = 0;
};
PlanStats g_last_plan;

std::span<const int32_t> host_span(const Tensor& t) {
    return {t.data<int32_t>(), size_t(t.numel())};
}

Tensor run_flashinfer(const Batch& b) {
    Tensor q = cuda::to_device(b.q), k = cuda::to_device(b.k_cache), v = cuda::to_device(b.v_cache);
    Tensor qs = cuda::to_device(b.query_start), lens = cuda::to_device(b.seq_lens),
           table = cuda::to_device(b.block_table);
    Tensor out =
        cuda::device_tensor({b.num_tokens, b.cfg.num_heads * b.cfg.head_dim}, DType::kBF16);
    // Output poisoned with NaN (0xFFFF): a row the kernels forget to write fails the test.
    MI_CUDA_CHECK(cudaMemset(out.raw(), 0xFF, out.nbytes()));
    cuda::FlashInferAttention attention(b.num_tokens, b.num_seqs, b.cfg.num_heads,
                                        b.cfg.num_kv_heads, b.cfg.head_dim, b.cfg.page_size);
    attention.plan(host_span(b.query_start), host_span(b.seq_lens), nullptr);
    g_last_plan = {attention.planned_items(), attention.planned_merges(), attention.planned_chunk(),
                   attention.num_ctas()};
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
    attention.run(p, nullptr);
    MI_CUDA_CHECK(cudaDeviceSynchronize());
    return cuda::to_host(out).to_f32();
}

void expect_matches_cpu(const Config& cfg, const std::vector<Seq>& seqs, std::mt19937& rng) {
    attention_testing::expect_matches_cpu(cfg, seqs, rng, run_flashinfer);
}

// Page size 24 besides fa2's: not a power of two.
std::vector<Config> all_configs() {
    return attention_testing::all_configs({16, 24, 64, 256});
}

}  // namespace

TEST(CudaAttentionFlashInfer, PrefillOnly) {
    REQUIRE_GPU();
    std::mt19937 rng(20);
    for (const Config& cfg : all_configs()) {
        expect_matches_cpu(cfg, kPrefillSeqs, rng);
        EXPECT_GT(g_last_plan.merges, 0) << "few row tiles: the key ranges should be split";
    }
}

TEST(CudaAttentionFlashInfer, DecodeOnly) {
    REQUIRE_GPU();
    std::mt19937 rng(21);
    for (const Config& cfg : all_configs()) {
        expect_matches_cpu(cfg, kDecodeSeqs, rng);
    }
}

TEST(CudaAttentionFlashInfer, MixedBatchAndChunkAfterCachedPrefix) {
    REQUIRE_GPU();
    std::mt19937 rng(22);
    for (const Config& cfg : all_configs()) {
        expect_matches_cpu(cfg, kMixedSeqs, rng);
    }
}

TEST(CudaAttentionFlashInfer, LongContexts) {
    REQUIRE_GPU();
    std::mt19937 rng(23);
    const std::vector<Config> configs = all_configs();
    for (size_t c = 0; c < configs.size(); ++c) {
        expect_matches_cpu(configs[c], kLongDecodeSeqs, rng);
        EXPECT_GT(g_last_plan.chunk, 0) << "one long decode must be split";
        // Half of the configs (both head dims, every page size and GQA ratio): the CPU
        // reference is the cost here.
        if (c % 2 == 0) expect_matches_cpu(configs[c], kLongMixedDecodeSeqs, rng);
    }
    // A long chunked prefill after a long cached prefix, next to a long decode.
    for (const Config& cfg : {Config{16, 8, 128, 24}, Config{14, 2, 64, 256}})
        expect_matches_cpu(cfg, {{150, 2500}, {1, 4000}, {64, 64}}, rng);
}

// Enough row tiles to fill the grid: no split, every item writes the output directly, and the
// blocks each run several items (the persistent loop).
TEST(CudaAttentionFlashInfer, ManySequencesNoSplit) {
    REQUIRE_GPU();
    std::mt19937 rng(24);
    for (const Config& cfg : {Config{16, 8, 128, 16}, Config{32, 4, 64, 24}}) {
        std::vector<Seq> seqs;
        for (int i = 0; i < 400; ++i) seqs.push_back({i % 5 == 0 ? 9 : 1, 9 + (i * 37) % 300});
        expect_matches_cpu(cfg, seqs, rng);
        EXPECT_EQ(g_last_plan.chunk, 0) << "the row tiles alone fill the grid";
        EXPECT_GT(g_last_plan.items, g_last_plan.ctas);
    }
}

// run() captured once in a CUDA graph, replayed after plan() for other lengths (same device
// arrays, new contents): the plan lives in the fixed device workspace, so the replay follows it.
TEST(CudaAttentionFlashInfer, GraphReplayAfterNewPlan) {
    REQUIRE_GPU();
    std::mt19937 rng(25);
    const Config cfg{16, 8, 128, 16};
    Batch b = make_batch(cfg, {{1, 3000}, {1, 50}, {1, 700}, {1, 1}}, rng);
    Tensor q = cuda::to_device(b.q), k = cuda::to_device(b.k_cache), v = cuda::to_device(b.v_cache);
    Tensor qs = cuda::to_device(b.query_start), lens = cuda::to_device(b.seq_lens),
           table = cuda::to_device(b.block_table);
    Tensor out = cuda::device_tensor({b.num_tokens, cfg.num_heads * cfg.head_dim}, DType::kBF16);
    cuda::FlashInferAttention attention(b.num_tokens, b.num_seqs, cfg.num_heads, cfg.num_kv_heads,
                                        cfg.head_dim, cfg.page_size);
    cuda::AttentionParams p{
        &q, &k, &v, &qs, &lens, &table, b.num_seqs, 1, 3000, 1.f / std::sqrt(128.f), &out};
    cuda::Stream stream;
    attention.plan(host_span(b.query_start), host_span(b.seq_lens), stream.get());
    attention.run(p, stream.get());  // eager warm-up (kernel attributes set before capture)
    MI_CUDA_CHECK(cudaStreamSynchronize(stream.get()));

    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    MI_CUDA_CHECK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal));
    attention.run(p, stream.get());
    MI_CUDA_CHECK(cudaStreamEndCapture(stream.get(), &graph));
    MI_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));

    // Shorter and longer contexts within the pages make_batch filled: a different chunking.
    for (const std::vector<int32_t>& new_lens :
         {std::vector<int32_t>{3000, 50, 700, 1}, std::vector<int32_t>{129, 2, 699, 1},
          std::vector<int32_t>{2999, 50, 1, 1}}) {
        std::copy(new_lens.begin(), new_lens.end(), b.seq_lens.data<int32_t>());
        MI_CUDA_CHECK(cudaMemcpy(lens.raw(), b.seq_lens.data<int32_t>(), lens.nbytes(),
                                 cudaMemcpyHostToDevice));
        MI_CUDA_CHECK(cudaMemset(out.raw(), 0xFF, out.nbytes()));
        MI_CUDA_CHECK(cudaDeviceSynchronize());  // legacy-stream copies vs. the non-blocking one
        attention.plan(host_span(b.query_start), host_span(b.seq_lens), stream.get());
        MI_CUDA_CHECK(cudaGraphLaunch(exec, stream.get()));
        MI_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
        const Tensor ref = run_cpu(b), got = cuda::to_host(out).to_f32();
        for (int64_t i = 0; i < ref.numel(); ++i) {
            const float r = ref.data<float>()[i];
            ASSERT_NEAR(got.data<float>()[i], r, 1e-2f + 1e-2f * std::fabs(r))
                << "lens " << new_lens[0] << " " << new_lens[1] << " " << new_lens[2] << ": " << i;
        }
    }
    MI_CUDA_CHECK(cudaGraphExecDestroy(exec));
    MI_CUDA_CHECK(cudaGraphDestroy(graph));
}

// Informative: decode HBM bandwidth at Qwen3-0.6B's shapes (16 heads, 8 KV heads, head_dim
// 128, page 16), 256 sequences x 1024 keys, as in the fa2 test: bytes of K and V / time of
// run() (plan() is host work outside the timing, as it overlaps the previous step in the
// runner). Skipped when instrumented (a sanitizer).
TEST(CudaAttentionFlashInfer, DecodeBandwidth) {
    REQUIRE_GPU();
    const int64_t num_seqs = 256, seq_len = 1024, num_heads = 16, num_kv_heads = 8, head_dim = 128,
                  page_size = 16;
    const int64_t pages_per_seq = seq_len / page_size, num_pages = num_seqs * pages_per_seq;
    Tensor k = cuda::device_tensor({num_pages, page_size, num_kv_heads, head_dim}, DType::kBF16);
    Tensor v = cuda::device_tensor({num_pages, page_size, num_kv_heads, head_dim}, DType::kBF16);
    MI_CUDA_CHECK(cudaMemset(k.raw(), 0x3c, k.nbytes()));
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
    cuda::FlashInferAttention attention(num_seqs, num_seqs, num_heads, num_kv_heads, head_dim,
                                        page_size);
    cuda::Event start(true), stop(true);
    start.record(nullptr);
    attention.plan(host_span(qs_host), host_span(lens_host), nullptr);
    stop.record(nullptr);
    stop.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 10; ++i) attention.plan(host_span(qs_host), host_span(lens_host), nullptr);
    const double plan_us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        10;
    cuda::AttentionParams p{
        &q, &k, &v, &qs, &lens, &table, num_seqs, 1, seq_len, 1.f / std::sqrt(128.f), &out};
    start.record(nullptr);
    attention.run(p, nullptr);
    stop.record(nullptr);
    stop.synchronize();
    if (cuda::Event::elapsed_ms(start, stop) > 50.f)
        GTEST_SKIP() << "one decode run took " << cuda::Event::elapsed_ms(start, stop)
                     << " ms: instrumented (sanitizer?), bandwidth not measured";
    constexpr int kIters = 20;
    start.record(nullptr);
    for (int i = 0; i < kIters; ++i) attention.run(p, nullptr);
    stop.record(nullptr);
    stop.synchronize();
    const double seconds = cuda::Event::elapsed_ms(start, stop) / 1e3 / kIters;
    const double bytes = 2.0 * double(num_seqs * seq_len * num_kv_heads * head_dim) * 2.0;
    std::printf(
        "[ BENCH    ] flashinfer decode 256 seqs x 1024 keys, 16/8 heads, head_dim 128, page 16: "
        "%.1f us, %.0f GB/s of K/V (%.0f%% of 4.8 TB/s); plan %.1f us host, %lld items on %lld "
        "blocks, chunk %lld\n",
        seconds * 1e6, bytes / seconds / 1e9, 100.0 * bytes / seconds / 4.8e12, plan_us,
        (long long)attention.planned_items(), (long long)attention.num_ctas(),
        (long long)attention.planned_chunk());
}

// Informative: causal prefill throughput at Qwen3-0.6B's shapes, 16 prompts x 1024 tokens, in
// TFLOP/s of the two matmuls (4 · head_dim FLOPs per visible (query, key, head)), as fa2's.
TEST(CudaAttentionFlashInfer, PrefillThroughput) {
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
    cuda::FlashInferAttention attention(num_tokens, num_seqs, num_heads, num_kv_heads, head_dim,
                                        page_size);
    attention.plan(host_span(qs_host), host_span(lens_host), nullptr);
    cuda::AttentionParams p{
        &q, &k, &v, &qs, &lens, &table, num_seqs, seq_len, seq_len, 1.f / std::sqrt(128.f), &out};
    cuda::Event start(true), stop(true);
    start.record(nullptr);
    attention.run(p, nullptr);
    stop.record(nullptr);
    stop.synchronize();
    if (cuda::Event::elapsed_ms(start, stop) > 50.f)
        GTEST_SKIP() << "one prefill run took " << cuda::Event::elapsed_ms(start, stop)
                     << " ms: instrumented (sanitizer?), throughput not measured";
    constexpr int kIters = 20;
    start.record(nullptr);
    for (int i = 0; i < kIters; ++i) attention.run(p, nullptr);
    stop.record(nullptr);
    stop.synchronize();
    const double seconds = cuda::Event::elapsed_ms(start, stop) / 1e3 / kIters;
    const double flops = 4.0 * head_dim * num_heads * num_seqs * (seq_len * (seq_len + 1) / 2.0);
    std::printf(
        "[ BENCH    ] flashinfer prefill 16 x 1024 tokens causal, 16/8 heads, head_dim 128, page "
        "16: %.1f us, %.0f TFLOP/s (dense bf16 peak ~989), %lld items on %lld blocks\n",
        seconds * 1e6, flops / seconds / 1e12, (long long)attention.planned_items(),
        (long long)attention.num_ctas());
}
