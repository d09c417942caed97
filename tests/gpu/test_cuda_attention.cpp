// Paged attention on the GPU against cpu::paged_attention, every backend through the one
// interface (layers/cuda/attention_backend.h: make_attention_backend, plan on the host, run on
// the device), from one case table (paged_attention_testing.h, which also holds the
// tolerances), plus informative decode bandwidth / prefill throughput lines per backend.
//
//   CudaAttention (value-parameterised, Backend/CudaAttention.<Case>/<backend>): the same
//     batches, the same seeds, for "fa2" and "flashinfer".
//   CudaAttentionFa2 / CudaAttentionFlashInferPlan: what only one backend has (fa2's workspace
//     argument; the flashinfer planner's decisions), through that backend's own API.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "gpu_testing.h"
#include "kernels/cuda/attention/attention.h"
#include "kernels/cuda/attention/attention_flashinfer.h"
#include "kernels/cuda/elementwise/fill_random.h"
#include "kernels/cuda/norm/qk_norm_rope.h"
#include "layers/cuda/attention_backend.h"
#include "paged_attention_testing.h"

using namespace miniinfer;
using namespace miniinfer::attention_testing;

namespace {

std::span<const int32_t> host_span(const Tensor& t) {
    return {t.data<int32_t>(), size_t(t.numel())};
}

cuda::AttentionShape shape_of(const Config& c, int64_t max_tokens, int64_t max_seqs) {
    return {max_tokens, max_seqs, c.num_heads, c.num_kv_heads, c.head_dim, c.page_size};
}

// A host Batch copied to the device, with its output buffer.
struct DeviceBatch {
    explicit DeviceBatch(const Batch& b)
        : q(cuda::to_device(b.q)),
          k(cuda::to_device(b.k_cache)),
          v(cuda::to_device(b.v_cache)),
          query_start(cuda::to_device(b.query_start)),
          seq_lens(cuda::to_device(b.seq_lens)),
          block_table(cuda::to_device(b.block_table)),
          out(cuda::device_tensor({b.num_tokens, b.cfg.num_heads * b.cfg.head_dim}, DType::kBF16)) {
    }
    DeviceBatch(const DeviceBatch&) = delete;
    DeviceBatch& operator=(const DeviceBatch&) = delete;

    cuda::AttentionParams params(const Batch& b) {
        return {&q,
                &k,
                &v,
                &query_start,
                &seq_lens,
                &block_table,
                b.num_seqs,
                b.max_query_len,
                b.max_seq_len,
                1.f / std::sqrt(float(b.cfg.head_dim)),
                &out};
    }
    // NaN (0xFFFF) everywhere: a row the kernels forget to write fails the comparison.
    void poison_out() { MI_CUDA_CHECK(cudaMemset(out.raw(), 0xFF, out.nbytes())); }
    Tensor out_host() {
        MI_CUDA_CHECK(cudaDeviceSynchronize());
        return cuda::to_host(out).to_f32();
    }

    Tensor q, k, v, query_start, seq_lens, block_table, out;
};

// One batch through the interface: a backend sized for it, plan, run.
Tensor run_backend(const std::string& name, const Batch& b) {
    DeviceBatch d(b);
    d.poison_out();
    auto backend = cuda::make_attention_backend(name, shape_of(b.cfg, b.num_tokens, b.num_seqs));
    backend->plan(host_span(b.query_start), host_span(b.seq_lens), nullptr);
    backend->run(d.params(b), nullptr);
    return d.out_host();
}

// An FP8 cache (--kv-cache-dtype fp8) for the fa2 backend: b's bf16 caches rounded to e4m3 at
// the given scales (NaN poison stays NaN), and b with those caches' values in bf16 for the CPU
// reference (exact: an e4m3 value times a power of two fits bf16).
struct Fp8Batch {
    Batch dequantized;
    Tensor k_bytes, v_bytes;  // host u8, b's cache shape
};

Fp8Batch to_fp8(const Batch& b, float k_scale, float v_scale) {
    Fp8Batch f{b, Tensor::zeros(b.k_cache.shape(), DType::kU8),
               Tensor::zeros(b.v_cache.shape(), DType::kU8)};
    f.dequantized.k_cache = Tensor::zeros(b.k_cache.shape(), DType::kBF16);
    f.dequantized.v_cache = Tensor::zeros(b.v_cache.shape(), DType::kBF16);
    f.dequantized.q = b.q;
    auto convert = [](const Tensor& in, float scale, Tensor& bytes, Tensor& back) {
        for (int64_t i = 0; i < in.numel(); ++i) {
            const float x = bf16_to_f32(in.data<uint16_t>()[i]);
            const uint8_t code = f32_to_e4m3(x / scale);
            bytes.data<uint8_t>()[i] = code;
            back.data<uint16_t>()[i] = f32_to_bf16(e4m3_to_f32(code) * scale);
        }
    };
    convert(b.k_cache, k_scale, f.k_bytes, f.dequantized.k_cache);
    convert(b.v_cache, v_scale, f.v_bytes, f.dequantized.v_cache);
    return f;
}

// e4m3 bytes (host u8) as the bf16 values they stand for at scale (exact; NaN codes stay NaN).
Tensor to_fp8_values(const Tensor& bytes, float scale) {
    Tensor values = Tensor::zeros(bytes.shape(), DType::kBF16);
    for (int64_t i = 0; i < bytes.numel(); ++i)
        values.data<uint16_t>()[i] = f32_to_bf16(e4m3_to_f32(bytes.data<uint8_t>()[i]) * scale);
    return values;
}

// A backend on an FP8 cache against the CPU on the same values; the scales are powers of two
// (1, as vLLM without checkpoint scales, and others that a checkpoint could carry).
void expect_fp8_matches_cpu(const std::string& name, const Config& cfg,
                            const std::vector<Seq>& seqs, std::mt19937& rng, float k_scale,
                            float v_scale) {
    const Fp8Batch f = to_fp8(make_batch(cfg, seqs, rng), k_scale, v_scale);
    const Batch& b = f.dequantized;
    DeviceBatch d(b);
    d.k = cuda::to_device(f.k_bytes);
    d.v = cuda::to_device(f.v_bytes);
    d.poison_out();
    auto backend = cuda::make_attention_backend(name, shape_of(b.cfg, b.num_tokens, b.num_seqs));
    backend->plan(host_span(b.query_start), host_span(b.seq_lens), nullptr);
    cuda::AttentionParams p = d.params(b);
    p.k_scale = k_scale;
    p.v_scale = v_scale;
    backend->run(p, nullptr);
    expect_close(b, d.out_host(),
                 name + " " + describe(cfg, seqs) + " fp8 scales " + std::to_string(k_scale) + "/" +
                     std::to_string(v_scale));
}

// The inputs of the informative benchmarks: sequences of seq_len keys, each with q_len query rows
// (1: decode; seq_len: a whole prompt), each sequence's pages after the previous one's or
// shuffled, constant bf16 data (0x3c3c ≈ 0.0115) until fill_normal() replaces it.
struct BenchBatch {
    BenchBatch(const std::vector<Seq>& seqs, const Config& c, bool shuffle_pages)
        : num_seqs(int64_t(seqs.size())),
          qs_host(Tensor::zeros({num_seqs + 1}, DType::kI32)),
          lens_host(Tensor::zeros({num_seqs}, DType::kI32)) {
        int64_t max_q = 0, max_len = 0, max_pages = 1;
        for (const Seq& s : seqs) {
            max_q = std::max<int64_t>(max_q, s.q_len);
            max_len = std::max<int64_t>(max_len, s.seq_len);
            max_pages = std::max<int64_t>(max_pages, (s.seq_len + c.page_size - 1) / c.page_size);
        }
        const int64_t num_pages = num_seqs * max_pages;
        for (int64_t i = 0; i < num_seqs; ++i) {
            qs_host.data<int32_t>()[i + 1] = qs_host.data<int32_t>()[i] + seqs[size_t(i)].q_len;
            lens_host.data<int32_t>()[i] = seqs[size_t(i)].seq_len;
        }
        num_tokens = qs_host.data<int32_t>()[num_seqs];
        k = cuda::device_tensor({num_pages, c.page_size, c.num_kv_heads, c.head_dim}, DType::kBF16);
        v = cuda::device_tensor({num_pages, c.page_size, c.num_kv_heads, c.head_dim}, DType::kBF16);
        q = cuda::device_tensor({num_tokens, c.num_heads, c.head_dim}, DType::kBF16);
        for (Tensor* t : {&k, &v, &q}) MI_CUDA_CHECK(cudaMemset(t->raw(), 0x3c, t->nbytes()));
        Tensor table_host = Tensor::zeros({num_seqs, max_pages}, DType::kI32);
        std::iota(table_host.data<int32_t>(), table_host.data<int32_t>() + num_pages, 0);
        if (shuffle_pages) {
            std::mt19937 rng(16);
            std::shuffle(table_host.data<int32_t>(), table_host.data<int32_t>() + num_pages, rng);
        }
        qs = cuda::to_device(qs_host);
        lens = cuda::to_device(lens_host);
        table = cuda::to_device(table_host);
        out = cuda::device_tensor({num_tokens, c.num_heads * c.head_dim}, DType::kBF16);
        p = {&q,     &k,       &v,    &qs,     &lens,
             &table, num_seqs, max_q, max_len, 1.f / std::sqrt(float(c.head_dim)),
             &out};
    }
    BenchBatch(int64_t n, int64_t q_len, int64_t seq_len, const Config& c, bool shuffle_pages)
        : BenchBatch(std::vector<Seq>(size_t(n), Seq{int32_t(q_len), int32_t(seq_len)}), c,
                     shuffle_pages) {}
    BenchBatch(const BenchBatch&) = delete;
    BenchBatch& operator=(const BenchBatch&) = delete;

    // Normal random q, k and v, so that the softmax's running max moves as it does in a model
    // (the constant data never moves it).
    void fill_normal() {
        uint64_t key = 1;
        for (Tensor* t : {&q, &k, &v}) {
            const int64_t cols = t->numel() / t->size(0);
            cuda::fill_normal(*t, {.cols = cols, .row_end = t->size(0), .col_end = cols}, key++,
                              1.f, 0.f, nullptr);
        }
    }

    int64_t num_seqs, num_tokens = 0;
    Tensor qs_host, lens_host;
    Tensor q, k, v, qs, lens, table, out;
    cuda::AttentionParams p{};
};

// Milliseconds of one run(), or a negative value after skipping: a first run above 50 ms means
// a sanitizer or profiler is instrumenting the kernels, and the number would mean nothing.
double ms_per_run(cuda::AttentionBackend& backend, const cuda::AttentionParams& p) {
    cuda::Event start(true), stop(true);
    start.record(nullptr);
    backend.run(p, nullptr);
    stop.record(nullptr);
    stop.synchronize();
    if (cuda::Event::elapsed_ms(start, stop) > 50.f) return -cuda::Event::elapsed_ms(start, stop);
    constexpr int kIters = 20;
    start.record(nullptr);
    for (int i = 0; i < kIters; ++i) backend.run(p, nullptr);
    stop.record(nullptr);
    stop.synchronize();
    return cuda::Event::elapsed_ms(start, stop) / kIters;
}

// Qwen3-0.6B's attention shapes, for the informative lines.
const Config kQwen3Config{16, 8, 128, 16};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Every backend, through the interface only.

class CudaAttention : public ::testing::TestWithParam<std::string> {
  protected:
    void expect_matches_cpu(const Config& cfg, const std::vector<Seq>& seqs, std::mt19937& rng) {
        const std::string name = GetParam();
        attention_testing::expect_matches_cpu(cfg, seqs, rng,
                                              [&](const Batch& b) { return run_backend(name, b); });
    }
};

INSTANTIATE_TEST_SUITE_P(Backend, CudaAttention,
                         ::testing::Values(std::string("fa2"), std::string("flashinfer")),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                             return info.param;
                         });

TEST_P(CudaAttention, PrefillOnly) {
    REQUIRE_GPU();
    std::mt19937 rng(10);
    for (const Config& cfg : all_configs()) expect_matches_cpu(cfg, kPrefillSeqs, rng);
}

TEST_P(CudaAttention, DecodeOnly) {
    REQUIRE_GPU();
    std::mt19937 rng(11);
    for (const Config& cfg : all_configs()) expect_matches_cpu(cfg, kDecodeSeqs, rng);
}

TEST_P(CudaAttention, MixedBatchAndChunkAfterCachedPrefix) {
    REQUIRE_GPU();
    std::mt19937 rng(12);
    for (const Config& cfg : all_configs()) expect_matches_cpu(cfg, kMixedSeqs, rng);
}

// Long contexts: one or a few sequences, so the keys of a sequence are split across blocks
// (fa2's split-KV decode, flashinfer's chunked items and merge); long chunked prefills.
TEST_P(CudaAttention, LongContextsSplitKv) {
    REQUIRE_GPU();
    std::mt19937 rng(13);
    for (const Config& cfg : all_configs()) {
        expect_matches_cpu(cfg, kLongDecodeSeqs, rng);
        expect_matches_cpu(cfg, kLongMixedDecodeSeqs, rng);
    }
    for (const Config& cfg : kLongChunkConfigs)
        for (const std::vector<Seq>& seqs : kLongChunkBatches) expect_matches_cpu(cfg, seqs, rng);
}

// Every sequence prefilling, enough row tiles to fill the GPU: flashinfer hands it to the wgmma
// prefill kernel on an H100 / H200
// (CudaAttentionFlashInferPlan.PrefillAndMixedBatchesTakeTheHopperKernel).
TEST_P(CudaAttention, AllPrefillBatch) {
    REQUIRE_GPU();
    std::mt19937 rng(18);
    for (const Config& cfg : kManySeqsConfigs) expect_matches_cpu(cfg, all_prefill_seqs(), rng);
}

// More work than the GPU holds at once: no split, and flashinfer's persistent blocks each run
// several items (CudaAttentionFlashInferPlan checks that the plan is indeed that).
TEST_P(CudaAttention, ManySequences) {
    REQUIRE_GPU();
    std::mt19937 rng(14);
    for (const Config& cfg : kManySeqsConfigs) expect_matches_cpu(cfg, many_seqs(), rng);
}

// An FP8 cache (--kv-cache-dtype fp8): prefill (tiles widened to bf16 as they are gathered),
// decode (fa2: 8-byte loads; flashinfer: its narrow items), mixed batches, long split decodes
// and chunked prefills after long prefixes, at several power-of-two scales.
TEST_P(CudaAttention, Fp8CacheMatchesCpuOnTheSameValues) {
    REQUIRE_GPU();
    const std::string name = GetParam();
    std::mt19937 rng(17);
    for (const Config& cfg : all_configs()) {
        expect_fp8_matches_cpu(name, cfg, kPrefillSeqs, rng, 1.f, 1.f);
        expect_fp8_matches_cpu(name, cfg, kDecodeSeqs, rng, 1.f, 1.f);
        expect_fp8_matches_cpu(name, cfg, kMixedSeqs, rng, 0.25f, 2.f);
        expect_fp8_matches_cpu(name, cfg, kLongMixedDecodeSeqs, rng, 2.f, 0.5f);
    }
    for (const Config& cfg : kLongChunkConfigs)
        expect_fp8_matches_cpu(name, cfg, kLongChunkBatches[0], rng, 1.f, 1.f);
    // Pages of fewer keys than a decode lane's step (fa2's FP8 decode looks each key's page up).
    for (const Config& cfg : {Config{16, 8, 128, 2}, Config{8, 8, 128, 1}})
        expect_fp8_matches_cpu(name, cfg, kDecodeSeqs, rng, 0.5f, 2.f);
}

// run() captured once in a CUDA graph, replayed after plan() for other lengths (same device
// arrays, new contents, same AttentionShape). The capture sees short lengths (fa2 sizes its
// decode grid and splits from p.max_seq_len = 699); the replays go up to 3000 keys, which fa2
// promises stay correct (longer splits) and flashinfer follows through the plan it keeps in its
// fixed device workspace.
TEST_P(CudaAttention, GraphReplayAfterNewPlan) {
    REQUIRE_GPU();
    std::mt19937 rng(15);
    const Config cfg{16, 8, 128, 16};
    // The pages hold the longest lengths replayed; seq_lens starts at the captured ones.
    Batch b = make_batch(cfg, {{1, 3000}, {1, 50}, {1, 700}, {1, 1}}, rng);
    const std::vector<int32_t> captured_lens{129, 2, 699, 1};
    std::copy(captured_lens.begin(), captured_lens.end(), b.seq_lens.data<int32_t>());
    b.max_seq_len = 699;
    DeviceBatch d(b);
    auto backend =
        cuda::make_attention_backend(GetParam(), shape_of(cfg, b.num_tokens, b.num_seqs));
    const cuda::AttentionParams p = d.params(b);
    cuda::Stream stream;
    backend->plan(host_span(b.query_start), host_span(b.seq_lens), stream.get());
    backend->run(p, stream.get());  // eager warm-up: kernel attributes set before the capture
    MI_CUDA_CHECK(cudaStreamSynchronize(stream.get()));

    const gpu_testing::CapturedGraph graph(stream.get(), [&] { backend->run(p, stream.get()); });

    for (const std::vector<int32_t>& lens : {std::vector<int32_t>{3000, 50, 700, 1},
                                             std::vector<int32_t>{2999, 50, 1, 1}, captured_lens}) {
        std::copy(lens.begin(), lens.end(), b.seq_lens.data<int32_t>());
        MI_CUDA_CHECK(cudaMemcpy(d.seq_lens.raw(), b.seq_lens.data<int32_t>(), d.seq_lens.nbytes(),
                                 cudaMemcpyHostToDevice));
        d.poison_out();
        MI_CUDA_CHECK(cudaDeviceSynchronize());  // legacy-stream copies vs. the non-blocking one
        backend->plan(host_span(b.query_start), host_span(b.seq_lens), stream.get());
        graph.replay(stream.get());
        MI_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
        std::vector<Seq> seqs;
        for (int32_t len : lens) seqs.push_back({1, len});
        expect_close(b, d.out_host(), "graph replay, " + describe(cfg, seqs));
    }
}

// Decode under bounds far above the lengths, as a captured graph's (p.max_seq_len 4096): fa2's
// grid then has many splits per sequence, and each sequence uses as many as the plan's lengths
// ask (decode_plan.h) while the rest write an empty log-sum-exp and leave. At 30B-A3B's heads
// (group 8, the tensor-core decode) and 0.6B's (group 2), lengths 1 .. 1,149.
TEST_P(CudaAttention, DecodeUnderBoundsFarAboveTheLengths) {
    REQUIRE_GPU();
    std::mt19937 rng(16);
    for (const Config cfg : {Config{32, 4, 128, 16}, Config{16, 8, 128, 16}}) {
        for (int num_seqs : {1, 3, 96}) {
            std::vector<Seq> seqs;
            for (int i = 0; i < num_seqs; ++i)
                seqs.push_back({1, num_seqs == 1 ? 384 : 1 + (i * 12 + 1) % 1149});
            Batch b = make_batch(cfg, seqs, rng);
            b.max_seq_len = 4096;
            DeviceBatch d(b);
            auto backend =
                cuda::make_attention_backend(GetParam(), shape_of(cfg, b.num_tokens, b.num_seqs));
            backend->plan(host_span(b.query_start), host_span(b.seq_lens), nullptr);
            d.poison_out();
            backend->run(d.params(b), nullptr);
            MI_CUDA_CHECK(cudaDeviceSynchronize());
            expect_close(b, d.out_host(), "bound 4096, " + describe(cfg, seqs));
        }
    }
}

// Informative: decode HBM bandwidth at Qwen3-0.6B's shapes (16 heads, 8 KV heads, head_dim
// 128, page 16), 256 sequences x 1024 keys: bytes of K and V read / time of run(), against
// ~4.8 TB/s. plan() is host work outside the timing (the runner overlaps it with the previous
// step); its time is printed apart.
TEST_P(CudaAttention, DecodeBandwidth) {
    REQUIRE_GPU();
    const Config& c = kQwen3Config;
    const int64_t num_seqs = 256, seq_len = 1024;
    BenchBatch u(num_seqs, 1, seq_len, c, /*shuffle_pages=*/true);
    auto backend = cuda::make_attention_backend(GetParam(), shape_of(c, num_seqs, num_seqs));
    backend->plan(host_span(u.qs_host), host_span(u.lens_host), nullptr);
    MI_CUDA_CHECK(cudaDeviceSynchronize());
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 10; ++i)
        backend->plan(host_span(u.qs_host), host_span(u.lens_host), nullptr);
    const double plan_us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        10;
    const double ms = ms_per_run(*backend, u.p);
    if (ms < 0)
        GTEST_SKIP() << "one decode run took " << -ms
                     << " ms: instrumented (sanitizer?), bandwidth not measured";
    const double seconds = ms / 1e3;
    const double bytes = 2.0 * double(num_seqs * seq_len * c.num_kv_heads * c.head_dim) * 2.0;
    std::printf(
        "[ BENCH    ] %s decode 256 seqs x 1024 keys, 16/8 heads, head_dim 128, page 16: %.1f us, "
        "%.0f GB/s of K/V (%.0f%% of 4.8 TB/s); plan %.1f us host\n",
        backend->name(), seconds * 1e6, bytes / seconds / 1e9, 100.0 * bytes / seconds / 4.8e12,
        plan_us);
}

// Informative: causal prefill throughput at Qwen3-0.6B's shapes, 16 prompts x 1024 tokens, in
// TFLOP/s of the two matmuls (4 · head_dim FLOPs per visible (query, key, head)).
TEST_P(CudaAttention, PrefillThroughput) {
    REQUIRE_GPU();
    const Config& c = kQwen3Config;
    const int64_t num_seqs = 16, seq_len = 1024;
    BenchBatch u(num_seqs, seq_len, seq_len, c, /*shuffle_pages=*/false);
    auto backend = cuda::make_attention_backend(GetParam(), shape_of(c, u.num_tokens, u.num_seqs));
    backend->plan(host_span(u.qs_host), host_span(u.lens_host), nullptr);
    const double ms = ms_per_run(*backend, u.p);
    if (ms < 0)
        GTEST_SKIP() << "one prefill run took " << -ms
                     << " ms: instrumented (sanitizer?), throughput not measured";
    const double seconds = ms / 1e3;
    const double flops =
        4.0 * c.head_dim * c.num_heads * num_seqs * (seq_len * (seq_len + 1) / 2.0);
    std::printf(
        "[ BENCH    ] %s prefill 16 x 1024 tokens causal, 16/8 heads, head_dim 128, page 16: "
        "%.1f us, %.0f TFLOP/s (dense bf16 peak ~989)\n",
        backend->name(), seconds * 1e6, flops / seconds / 1e12);
}

namespace {

// Microseconds of one run of `seqs` on random data through the backend, or negative (skipped).
double prefill_us(const std::string& name, const Config& c, const std::vector<Seq>& seqs) {
    BenchBatch u(seqs, c, /*shuffle_pages=*/true);
    u.fill_normal();
    auto backend = cuda::make_attention_backend(name, shape_of(c, u.num_tokens, u.num_seqs));
    backend->plan(host_span(u.qs_host), host_span(u.lens_host), nullptr);
    return ms_per_run(*backend, u.p) * 1e3;
}

}  // namespace

// Informative: the steps of the prefill256 workload (2,048-token prompts, 16 output tokens, an
// 8,192-token step budget) on random data at Qwen3-0.6B's heads (16/8) and Qwen3-30B-A3B's
// (32/4): a step of 8 whole prompts, and one of 4 prompts beside 64 sequences decoding at 2,048
// keys (those that finished their prompts in the steps before), with the decode rows' share.
TEST_P(CudaAttention, PrefillThroughputAtPrefill256Shape) {
    REQUIRE_GPU();
    for (const Config& c : {kQwen3Config, Config{32, 4, 128, 16}}) {
        const std::vector<Seq> prompts(8, Seq{2048, 2048});
        std::vector<Seq> mixed(4, Seq{2048, 2048});
        mixed.insert(mixed.end(), 64, Seq{1, 2048});
        const double prompts_us = prefill_us(GetParam(), c, prompts);
        const double half_us = prefill_us(GetParam(), c, {prompts.begin(), prompts.begin() + 4});
        const double mixed_us = prefill_us(GetParam(), c, mixed);
        if (prompts_us < 0 || half_us < 0 || mixed_us < 0)
            GTEST_SKIP() << "instrumented (sanitizer?): throughput not measured";
        const double flops = 4.0 * c.head_dim * c.num_heads * 8 * (2048 * 2049 / 2.0);
        std::printf(
            "[ BENCH    ] %s prefill, random data, %lld/%lld heads: 8 x 2048 tokens causal %.1f "
            "us (%.0f TFLOP/s); 4 x 2048 %.1f us; 4 x 2048 + 64 decode rows at 2048 keys %.1f "
            "us (the decode rows +%.1f us)\n",
            GetParam().c_str(), (long long)c.num_heads, (long long)c.num_kv_heads, prompts_us,
            flops / prompts_us / 1e6, half_us, mixed_us, mixed_us - half_us);
    }
}

// ---------------------------------------------------------------------------------------------
// fa2 only: the workspace argument of cuda::paged_attention.

// A smaller workspace than attention_workspace_bytes asks for: fewer splits (none at 0 bytes),
// the same answer.
TEST(CudaAttentionFa2, DecodeWithSmallerOrNoWorkspace) {
    REQUIRE_GPU();
    std::mt19937 rng(20);
    const Config cfg{16, 8, 128, 16};
    const std::vector<Seq> seqs{{1, 3000}, {1, 999}};
    const Batch b = make_batch(cfg, seqs, rng);
    DeviceBatch d(b);
    const size_t full = cuda::attention_workspace_bytes(b.num_tokens, cfg.num_heads, cfg.head_dim);
    cuda::DeviceBuffer workspace(full);
    for (size_t bytes : {full / 2, full / 5, size_t(0)}) {
        d.poison_out();
        cuda::paged_attention(d.params(b), bytes > 0 ? workspace.data() : nullptr, bytes, nullptr);
        expect_close(b, d.out_host(),
                     "workspace " + std::to_string(bytes) + " of " + std::to_string(full) +
                         " bytes, " + describe(cfg, seqs));
    }
}

namespace {

// A decode batch through paged_attention itself (no backend), split by its own lengths as the
// fa2 backend splits it (AttentionParams::decode_lengths: Σ seq_len, longest seq_len, on the
// device); run(adjust) lets a test set the other plan fields first.
struct PlannedDecode {
    explicit PlannedDecode(const Batch& batch)
        : b(batch),
          d(batch),
          bytes(cuda::attention_workspace_bytes(batch.num_tokens, batch.cfg.num_heads,
                                                batch.cfg.head_dim)),
          workspace(bytes) {
        Tensor host = Tensor::zeros({2}, DType::kI32);
        for (const int32_t len : host_span(batch.seq_lens)) {
            host.data<int32_t>()[0] += len;
            host.data<int32_t>()[1] = std::max(host.data<int32_t>()[1], len);
        }
        lengths = cuda::to_device(host);
    }
    // The output (host f32) after adjust(params) and one launch.
    template <typename Adjust>
    Tensor run(const Adjust& adjust) {
        cuda::AttentionParams p = d.params(b);
        p.decode_lengths = lengths.data<int32_t>();
        adjust(p);
        d.poison_out();
        cuda::paged_attention(p, workspace.data(), bytes, nullptr);
        return d.out_host();
    }

    const Batch& b;
    DeviceBatch d;
    size_t bytes;
    cuda::DeviceBuffer workspace;
    Tensor lengths;
};

}  // namespace

// The order in which the decode takes the sequences (AttentionParams::decode_order; the fa2
// backend's plan lists them longest first) changes which block runs which sequence, never an
// output bit: with and without splits (a long and a short batch), the tensor-core decode (group
// 8) and the CUDA-core one (group 2), the outputs under a reversed and a shuffled order equal
// those in batch order bit for bit, and the long batch's match the CPU.
TEST(CudaAttentionFa2, DecodeOrderDoesNotChangeTheOutput) {
    REQUIRE_GPU();
    std::mt19937 rng(22);
    for (const Config cfg : {Config{32, 4, 128, 16}, Config{16, 8, 128, 16}}) {
        for (int num_seqs : {24, 300}) {
            // 24 long sequences (split) and 300 short ones (mostly one split each); the cache's
            // random values are most of the test's time, so the long ones are few.
            std::vector<Seq> seqs;
            for (int i = 0; i < num_seqs; ++i)
                seqs.push_back({1, 1 + (i * 37 + 5) % (num_seqs == 24 ? 1500 : 400)});
            const Batch b = make_batch(cfg, seqs, rng);
            PlannedDecode decode(b);
            const auto run = [&](const std::vector<int32_t>* order) {
                Tensor order_dev;
                if (order) {
                    Tensor host = Tensor::zeros({int64_t(order->size())}, DType::kI32);
                    std::copy(order->begin(), order->end(), host.data<int32_t>());
                    order_dev = cuda::to_device(host);
                }
                return decode.run([&](cuda::AttentionParams& p) {
                    if (order) p.decode_order = order_dev.data<int32_t>();
                });
            };
            const Tensor plain = run(nullptr);
            if (num_seqs == 24) expect_close(b, plain, "batch order, " + describe(cfg, seqs));
            std::vector<int32_t> reversed(static_cast<size_t>(num_seqs));
            std::iota(reversed.rbegin(), reversed.rend(), 0);
            std::vector<int32_t> shuffled = reversed;
            std::shuffle(shuffled.begin(), shuffled.end(), rng);
            for (const auto* order : {&reversed, &shuffled})
                EXPECT_TRUE(gpu_testing::bitwise_equal(run(order), plain))
                    << (order == &reversed ? "reversed" : "shuffled") << " order, "
                    << describe(cfg, seqs);
        }
    }
}

// The cluster form of the split decode (attention_decode.cu: a small batch's splits merge inside
// the decode launch, through their blocks' shared memory, instead of the workspace and the
// combine kernel) against the CPU, at cluster bounds 2, 3, 8 and 16 and with it off: both decode
// kernels (GQA groups 2 and 8), head dims 64 and 128, splits by the device lengths (a graph
// replay's) and by the host bounds, one to three sequences whose lengths leave some of a
// cluster's blocks without keys.
TEST(CudaAttentionFa2, DecodeClusterFormMatchesCpu) {
    REQUIRE_GPU();
    std::mt19937 rng(23);
    for (const Config cfg : {Config{16, 8, 128, 16}, Config{32, 4, 128, 16}, Config{16, 8, 64, 24},
                             Config{32, 4, 64, 16}}) {
        for (const std::vector<Seq>& seqs :
             {std::vector<Seq>{{1, 700}}, std::vector<Seq>{{1, 65}, {1, 1000}, {1, 3}},
              std::vector<Seq>{{1, 4096}, {1, 129}}}) {
            const Batch b = make_batch(cfg, seqs, rng);
            PlannedDecode decode(b);
            for (const bool by_lengths : {true, false}) {
                for (const int bound : {0, 2, 3, 8, 16}) {
                    const Tensor got = decode.run([&](cuda::AttentionParams& p) {
                        p.decode_cluster_splits = bound;
                        if (!by_lengths) p.decode_lengths = nullptr;
                    });
                    expect_close(b, got,
                                 "cluster bound " + std::to_string(bound) +
                                     (by_lengths ? ", split by lengths, " : ", split by bounds, ") +
                                     describe(cfg, seqs));
                }
            }
        }
    }
}

// Tuning::decode_min_keys, the least keys of a split: any bound splits the same keys into more or
// fewer parts, each output still matching the CPU reference (by the step's lengths and by the
// bounds; plain and cluster forms).
TEST(CudaAttentionFa2, DecodeMinKeysMatchesCpu) {
    REQUIRE_GPU();
    std::mt19937 rng(29);
    for (const Config cfg : {Config{16, 8, 128, 16}, Config{32, 4, 64, 16}}) {
        for (const std::vector<Seq>& seqs :
             {std::vector<Seq>{{1, 700}}, std::vector<Seq>{{1, 65}, {1, 1000}, {1, 3}}}) {
            const Batch b = make_batch(cfg, seqs, rng);
            PlannedDecode decode(b);
            for (const int min_keys : {1, 16, 64, 256, 4096}) {
                for (const int cluster : {0, -1}) {
                    const Tensor got = decode.run([&](cuda::AttentionParams& p) {
                        p.decode_min_keys = min_keys;
                        p.decode_cluster_splits = cluster;
                    });
                    expect_close(b, got,
                                 "min keys " + std::to_string(min_keys) + ", cluster bound " +
                                     std::to_string(cluster) + ", " + describe(cfg, seqs));
                }
            }
        }
    }
}

// The decode doing the QKV step itself (AttentionParams::qkv_step) against the separate step
// (qk_norm_rope_store, then the decode on its q and cache): the cache gets the same bits, and the
// output matches the CPU reference on the separate step's q and cache. The q argument holds NaN,
// so a decode that read it fails. Every decode_kernel instance that takes it (GQA groups 1, 2
// and 3; the tensor-core decode of groups 4 to 16 does not: decode_supports_qkv_step); head_dim 64
// and 128; bf16 and FP8 caches; with and without the per-head norm (Qwen2); lengths where the new
// key is alone in its block (1, 65, 129: a split of 64 keys starting at it), just past a page,
// and long enough to split.
TEST(CudaAttentionFa2, DecodeQkvStepMatchesTheSeparateStep) {
    REQUIRE_GPU();
    EXPECT_TRUE(cuda::decode_supports_qkv_step(16, 8));
    EXPECT_TRUE(cuda::decode_supports_qkv_step(12, 4));
    EXPECT_FALSE(cuda::decode_supports_qkv_step(32, 4)) << "group 8: the tensor-core decode";
    std::mt19937 rng(23);
    const std::vector<Seq> seqs = {{1, 1},   {1, 2},   {1, 17},   {1, 65},  {1, 129},
                                   {1, 300}, {1, 999}, {1, 3000}, {1, 4033}};
    const float eps = 1e-6f;
    for (const Config cfg : {Config{16, 8, 128, 16}, Config{12, 4, 128, 64}, Config{8, 8, 128, 16},
                             Config{24, 8, 64, 24}, Config{8, 8, 64, 16}}) {
        const Batch plain = make_batch(cfg, seqs, rng);
        const int64_t H = cfg.num_heads, KV = cfg.num_kv_heads, D = cfg.head_dim;
        const int64_t T = plain.num_tokens;  // one a sequence
        Tensor positions = Tensor::zeros({T}, DType::kI32), slots = Tensor::zeros({T}, DType::kI32);
        for (int64_t t = 0; t < T; ++t) {
            const int32_t last = plain.seq_lens.data<int32_t>()[t] - 1;
            const int32_t page =
                plain.block_table
                    .data<int32_t>()[t * plain.block_table.size(1) + last / cfg.page_size];
            positions.data<int32_t>()[t] = last;
            slots.data<int32_t>()[t] = page * int32_t(cfg.page_size) + last % cfg.page_size;
        }
        Tensor inv_freq = Tensor::zeros({D / 2}, DType::kF32);
        for (int64_t i = 0; i < D / 2; ++i)
            inv_freq.data<float>()[i] = float(1.0 / std::pow(1e6, double(2 * i) / double(D)));
        const Tensor qkv =
            cuda::to_device(gpu_testing::random_bf16({T, (H + 2 * KV) * D}, rng, 2.f));
        const Tensor q_norm = cuda::to_device(gpu_testing::random_bf16({D}, rng, 1.f));
        const Tensor k_norm = cuda::to_device(gpu_testing::random_bf16({D}, rng, 1.f));
        const Tensor d_positions = cuda::to_device(positions), d_slots = cuda::to_device(slots);
        const Tensor d_inv_freq = cuda::to_device(inv_freq);
        // YaRN's cos/sin multiplier on the configs with 12 and 24 heads (one of each head_dim).
        const float rope_scale = H % 3 == 0 ? 1.25f : 1.f;
        for (const bool fp8 : {false, true}) {
            const bool norm = D == 128;  // head_dim 64: Qwen2's rotary alone
            const float k_scale = fp8 ? 0.5f : 1.f, v_scale = fp8 ? 2.f : 1.f;
            const Fp8Batch quantized = to_fp8(plain, k_scale, v_scale);
            const Tensor& k_host = fp8 ? quantized.k_bytes : plain.k_cache;
            const Tensor& v_host = fp8 ? quantized.v_bytes : plain.v_cache;
            const std::string what = describe(cfg, seqs) + (fp8 ? " fp8" : " bf16") +
                                     " rope_scale " + std::to_string(rope_scale);
            PlannedDecode decode(plain);
            const auto run = [&](bool qkv_in_decode, Tensor& q, Tensor& k, Tensor& v) {
                const cuda::DecodeQkvStep step{.qkv = &qkv,
                                               .q_norm = norm ? &q_norm : nullptr,
                                               .k_norm = norm ? &k_norm : nullptr,
                                               .eps = eps,
                                               .positions = &d_positions,
                                               .inv_freq = &d_inv_freq,
                                               .slot_mapping = &d_slots,
                                               .rope_scale = rope_scale};
                if (!qkv_in_decode)
                    cuda::qk_norm_rope_store(qkv, step.q_norm, step.k_norm, eps, d_positions,
                                             d_inv_freq, d_slots, H, KV, D, q, k, v, nullptr,
                                             k_scale, v_scale, rope_scale);
                decode.d.q = std::move(q);
                decode.d.k = std::move(k);
                decode.d.v = std::move(v);
                Tensor out = decode.run([&](cuda::AttentionParams& p) {
                    p.k_scale = k_scale;
                    p.v_scale = v_scale;
                    if (qkv_in_decode) p.qkv_step = &step;
                });
                q = std::move(decode.d.q);
                k = std::move(decode.d.k);
                v = std::move(decode.d.v);
                return out;
            };
            Tensor q_sep = cuda::device_tensor({T, H, D}, DType::kBF16);
            Tensor k_sep = cuda::to_device(k_host), v_sep = cuda::to_device(v_host);
            const Tensor out_sep = run(false, q_sep, k_sep, v_sep);
            Tensor q_nan = cuda::device_tensor({T, H, D}, DType::kBF16);
            MI_CUDA_CHECK(cudaMemset(q_nan.raw(), 0xFF, q_nan.nbytes()));
            Tensor k_own = cuda::to_device(k_host), v_own = cuda::to_device(v_host);
            const Tensor out_own = run(true, q_nan, k_own, v_own);
            EXPECT_TRUE(gpu_testing::bitwise_equal(cuda::to_host(k_own), cuda::to_host(k_sep)))
                << "K cache, " << what;
            EXPECT_TRUE(gpu_testing::bitwise_equal(cuda::to_host(v_own), cuda::to_host(v_sep)))
                << "V cache, " << what;
            // The CPU reference on the separate step's q and cache (an FP8 cache's values in bf16).
            Batch ref = plain;
            ref.q = cuda::to_host(q_sep);
            if (fp8) {
                ref.k_cache = to_fp8_values(cuda::to_host(k_sep), k_scale);
                ref.v_cache = to_fp8_values(cuda::to_host(v_sep), v_scale);
            } else {
                ref.k_cache = cuda::to_host(k_sep);
                ref.v_cache = cuda::to_host(v_sep);
            }
            expect_close(ref, out_sep, "separate step, " + what);
            expect_close(ref, out_own, "qkv_step, " + what);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// flashinfer only: what the planner decides (FlashInferAttention's introspection). The plan
// depends on the lengths and the shape only; CudaAttention/flashinfer runs these same lengths
// and shapes against the CPU reference, so here plan() alone is checked.

namespace {

struct PlanStats {
    int64_t items = 0, merges = 0, chunk = 0, ctas = 0;
    bool hopper_prefill = false;
};

PlanStats plan_flashinfer(const Config& c, const std::vector<Seq>& seqs) {
    std::vector<int32_t> query_start{0}, seq_lens;
    for (const Seq& s : seqs) {
        query_start.push_back(query_start.back() + s.q_len);
        seq_lens.push_back(s.seq_len);
    }
    cuda::FlashInferAttention attention(query_start.back(), int64_t(seqs.size()), c.num_heads,
                                        c.num_kv_heads, c.head_dim, c.page_size);
    attention.plan(query_start, seq_lens, nullptr);
    MI_CUDA_CHECK(cudaDeviceSynchronize());
    return {attention.planned_items(), attention.planned_merges(), attention.planned_chunk(),
            attention.num_ctas(), attention.planned_hopper_prefill()};
}

}  // namespace

// Few row tiles: the key ranges are cut into chunks so that the grid fills, then merged.
TEST(CudaAttentionFlashInferPlan, PrefillSplitsKeyRanges) {
    REQUIRE_GPU();
    for (const Config& cfg : all_configs())
        EXPECT_GT(plan_flashinfer(cfg, kPrefillSeqs).merges, 0)
            << "few row tiles: the key ranges should be split; " << describe(cfg, kPrefillSeqs);
}

TEST(CudaAttentionFlashInferPlan, LongDecodeIsChunked) {
    REQUIRE_GPU();
    for (const Config& cfg : all_configs())
        EXPECT_GT(plan_flashinfer(cfg, kLongDecodeSeqs).chunk, 0)
            << "one long decode must be split; " << describe(cfg, kLongDecodeSeqs);
}

// A batch with prefill rows (every sequence's, or some beside decode rows) and row tiles enough to
// fill the grid: on an H100 / H200 at head_dim 128 it goes to the wgmma prefill kernel (never a
// decode-only batch or a split); whichever kernel runs it, it matches the CPU (both backends,
// CudaAttention.AllPrefillBatch and ManySequences).
TEST(CudaAttentionFlashInferPlan, PrefillAndMixedBatchesTakeTheHopperKernel) {
    REQUIRE_GPU();
    int device = 0, major = 0, minor = 0;
    MI_CUDA_CHECK(cudaGetDevice(&device));
    MI_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    MI_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    const bool hopper = major == 9 && minor == 0;
    for (const Config& cfg : kManySeqsConfigs) {
        const PlanStats plan = plan_flashinfer(cfg, all_prefill_seqs());
        EXPECT_EQ(plan.hopper_prefill, hopper && cfg.head_dim == 128) << describe(cfg);
        // Prompts beside decode rows too, when their row tiles fill the grid.
        EXPECT_EQ(plan_flashinfer(cfg, many_seqs()).hopper_prefill, hopper && cfg.head_dim == 128)
            << "mixed; " << describe(cfg);
        EXPECT_FALSE(plan_flashinfer(cfg, kLongChunkBatches[0]).hopper_prefill) << "split";
        EXPECT_FALSE(plan_flashinfer(cfg, kDecodeSeqs).hopper_prefill) << "decode only";
    }
}

// Enough row tiles to fill the grid: no split, every item writes the output directly, and the
// blocks each run several items (the persistent loop).
TEST(CudaAttentionFlashInferPlan, ManySequencesFillTheGridWithoutSplit) {
    REQUIRE_GPU();
    const std::vector<Seq> seqs = many_seqs();
    for (const Config& cfg : kManySeqsConfigs) {
        const PlanStats plan = plan_flashinfer(cfg, seqs);
        EXPECT_EQ(plan.chunk, 0) << "the row tiles alone fill the grid; " << describe(cfg);
        EXPECT_EQ(plan.merges, 0) << describe(cfg);
        EXPECT_GT(plan.items, plan.ctas) << describe(cfg);
    }
}

// head_dim 256 (Qwen3.5: groups of 8 and 6; and 4), fa2 only: prefill (the mma.sync kernel),
// decode (the tensor-core kernel), mixed batches, long split decodes, an FP8 cache.
TEST(CudaAttentionHeadDim256, Fa2MatchesCpu) {
    REQUIRE_GPU();
    std::mt19937 rng(256);
    const auto fa2 = [](const Batch& b) { return run_backend("fa2", b); };
    for (const Config& cfg :
         {Config{16, 2, 256, 16}, Config{24, 4, 256, 24}, Config{8, 2, 256, 64}}) {
        for (const std::vector<Seq>* seqs :
             {&kPrefillSeqs, &kDecodeSeqs, &kMixedSeqs, &kLongMixedDecodeSeqs})
            attention_testing::expect_matches_cpu(cfg, *seqs, rng, fa2);
        expect_fp8_matches_cpu("fa2", cfg, kMixedSeqs, rng, 0.25f, 2.f);
        expect_fp8_matches_cpu("fa2", cfg, kLongMixedDecodeSeqs, rng, 2.f, 0.5f);
    }
}
