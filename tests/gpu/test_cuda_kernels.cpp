// The CUDA model runner's GEMM and small fused kernels against the CPU ops or plain formulas,
// on random inputs across shapes. Tolerances are stated beside each comparison.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "gpu_testing.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/elementwise/embedding.h"
#include "kernels/cuda/elementwise/gather_rows.h"
#include "kernels/cuda/elementwise/silu_mul.h"
#include "kernels/cuda/gemm/gemm.h"
#include "kernels/cuda/norm/qk_norm_rope.h"

using namespace miniinfer;
using gpu_testing::all_close;
using gpu_testing::bitwise_equal;
using gpu_testing::CapturedGraph;
using gpu_testing::offset_view;
using gpu_testing::random_bf16;

namespace {

constexpr float kBf16HalfUlp = 1.f / 256;  // 2^-8: round-to-nearest error of bf16, relative

Tensor host_i32(const std::vector<int32_t>& values) {
    Tensor t = Tensor::zeros({int64_t(values.size())}, DType::kI32);
    std::copy(values.begin(), values.end(), t.data<int32_t>());
    return t;
}

Tensor host_f32(const std::vector<float>& values) {
    Tensor t = Tensor::zeros({int64_t(values.size())}, DType::kF32);
    std::copy(values.begin(), values.end(), t.data<float>());
    return t;
}

float bf16_at(const Tensor& host, int64_t i) {
    return bf16_to_f32(host.data<uint16_t>()[i]);
}
float round_bf16(float v) {
    return bf16_to_f32(f32_to_bf16(v));
}

void sync() {
    MI_CUDA_CHECK(cudaDeviceSynchronize());
}

// ---------------------------------------------------------------------------------------------
// GEMM

// y = x · wᵀ (+ bias) in double from the bf16 inputs, with what the tolerance needs: Σ|x·w| +
// |bias| (bounds the fp32 accumulation error) and |x·w| alone (the product before the bias).
struct GemmReference {
    std::vector<double> y, abs_sum, abs_product;
};

GemmReference gemm_reference(const Tensor& x, const Tensor& w, const Tensor* bias, int64_t m,
                             int64_t n, int64_t k) {
    std::vector<float> xf(size_t(m * k)), wf(size_t(n * k));
    copy_to_f32(x, xf.data());
    copy_to_f32(w, wf.data());
    GemmReference ref;
    for (auto* v : {&ref.y, &ref.abs_sum, &ref.abs_product}) v->assign(size_t(m * n), 0.0);
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            const float* xr = &xf[size_t(i * k)];
            const float* wr = &wf[size_t(j * k)];
            double s = 0, a = 0;
            for (int64_t p = 0; p < k; ++p) {
                const double prod = double(xr[p]) * double(wr[p]);
                s += prod;
                a += std::fabs(prod);
            }
            const double b = bias ? bf16_at(*bias, j) : 0.0;
            ref.y[size_t(i * n + j)] = s + b;
            ref.abs_sum[size_t(i * n + j)] = a + std::fabs(b);
            ref.abs_product[size_t(i * n + j)] = std::fabs(s);
        }
    }
    return ref;
}

// Tolerance: the result is rounded once to bf16 (≤ 2^-8 relative) after an fp32 sum of k
// products, whose rounding error is at most about k · 2^-24 · Σ|x·w| (the classical bound; the
// products of bf16 values are exact in fp32); twice that, for the order in which tensor cores
// and split-K add partial sums. With a bias, cuBLASLt's BIAS epilogue (as PyTorch's addmm uses
// it) measurably rounds x·w to bf16 before adding the bias and rounding again, so a bias case
// also allows 2^-8 · |x·w|: one more bf16 rounding of the product.
void expect_gemm_close(const Tensor& y_host, const GemmReference& ref, int64_t k, bool with_bias,
                       const char* what) {
    const double accumulation = 2.0 * double(k + 1) * std::ldexp(1.0, -24);
    std::vector<double> bound(ref.y.size());
    for (size_t i = 0; i < ref.y.size(); ++i)
        bound[i] =
            (with_bias ? kBf16HalfUlp * ref.abs_product[i] : 0.0) + accumulation * ref.abs_sum[i];
    const std::vector<double> got = gpu_testing::to_doubles(y_host);
    const gpu_testing::Tolerance tol{.atol = 1e-30, .rtol = kBf16HalfUlp};
    ASSERT_TRUE(all_close(got, ref.y, tol, bound)) << what;
    std::printf("  %s: worst error %.2f of tolerance\n", what,
                gpu_testing::error_stats(got, ref.y, tol, bound).worst_of_allowed);
}

TEST(CudaGemm, MatchesDoubleReference) {
    REQUIRE_GPU();
    std::mt19937 rng(11);
    {
        cuda::Gemm gemm;
        struct NK {
            int64_t n, k;
        };
        for (int64_t m : {1, 7, 64, 300}) {
            for (NK nk : {NK{64, 64}, NK{33, 17}, NK{1000, 515}, NK{2048, 1024}, NK{151, 4096}}) {
                for (bool with_bias : {false, true}) {
                    const int64_t n = nk.n, k = nk.k;
                    Tensor x = random_bf16({m, k}, rng, 1.f);
                    Tensor w = random_bf16({n, k}, rng, 1.f / std::sqrt(float(k)));
                    Tensor bias = random_bf16({n}, rng, 1.f);
                    Tensor dx = cuda::to_device(x), dw = cuda::to_device(w),
                           dbias = cuda::to_device(bias);
                    Tensor dy = cuda::device_tensor({m, n}, DType::kBF16);
                    // NaN-fill y: beta = 0 must not read it.
                    MI_CUDA_CHECK(cudaMemset(dy.raw(), 0xff, dy.nbytes()));
                    gemm.run(dx, dw, with_bias ? &dbias : nullptr, dy, nullptr);
                    sync();
                    char what[96];
                    std::snprintf(what, sizeof what, "m=%ld n=%ld k=%ld bias=%d", long(m), long(n),
                                  long(k), int(with_bias));
                    expect_gemm_close(cuda::to_host(dy),
                                      gemm_reference(x, w, with_bias ? &bias : nullptr, m, n, k), k,
                                      with_bias, what);
                }
            }
        }
    }
}

// Views at 2-byte offsets (x, w, y all misaligned for 16-byte loads) pick a kernel that copes;
// a second call reuses the cached plan and is bitwise identical; a CUDA graph captured after the
// plan is cached replays to the same bits.
TEST(CudaGemm, UnalignedViewsCacheAndGraphReplay) {
    REQUIRE_GPU();
    std::mt19937 rng(12);
    cuda::Gemm gemm;
    const int64_t m = 9, n = 200, k = 96;
    Tensor x = random_bf16({m, k}, rng, 1.f), w = random_bf16({n, k}, rng, 0.1f),
           bias = random_bf16({n}, rng, 1.f);
    Tensor x_buf = cuda::device_tensor({m * k + 1}, DType::kBF16);
    Tensor w_buf = cuda::device_tensor({n * k + 1}, DType::kBF16);
    Tensor y_buf = cuda::device_tensor({m * n + 1}, DType::kBF16);
    Tensor dx = offset_view(x_buf, 1, {m, k}), dw = offset_view(w_buf, 1, {n, k}),
           dy = offset_view(y_buf, 1, {m, n});
    MI_CUDA_CHECK(cudaMemcpy(dx.raw(), x.raw(), x.nbytes(), cudaMemcpyHostToDevice));
    MI_CUDA_CHECK(cudaMemcpy(dw.raw(), w.raw(), w.nbytes(), cudaMemcpyHostToDevice));
    Tensor dbias = cuda::to_device(bias);

    auto download = [&] {
        Tensor out = Tensor::zeros({m, n}, DType::kBF16);
        MI_CUDA_CHECK(cudaMemcpy(out.raw(), dy.raw(), out.nbytes(), cudaMemcpyDeviceToHost));
        return out;
    };

    cuda::Stream stream;
    gemm.run(dx, dw, &dbias, dy, stream.get());
    stream.synchronize();
    const Tensor first = download();
    expect_gemm_close(first, gemm_reference(x, w, &bias, m, n, k), k, true, "unaligned views");
    MI_CUDA_CHECK(cudaMemset(dy.raw(), 0, dy.nbytes()));
    gemm.run(dx, dw, &dbias, dy, stream.get());
    stream.synchronize();
    EXPECT_TRUE(bitwise_equal(download(), first)) << "second (cached) call differs";

    MI_CUDA_CHECK(cudaMemset(dy.raw(), 0, dy.nbytes()));
    const CapturedGraph graph(stream.get(), [&] { gemm.run(dx, dw, &dbias, dy, stream.get()); });
    Tensor before_replay = download();
    EXPECT_TRUE(std::all_of(before_replay.data<uint16_t>(), before_replay.data<uint16_t>() + m * n,
                            [](uint16_t v) { return v == 0; }))
        << "capture must not execute the GEMM";
    graph.replay(stream.get());
    stream.synchronize();
    EXPECT_TRUE(bitwise_equal(download(), first)) << "graph replay differs from eager";
}

// Informative only: never asserted (bench_cuda_ops has the model's GEMM shapes). Against the
// device's measured bf16 GEMM rate, so 100% means "as fast as cuBLASLt at 8192³ here".
TEST(CudaGemm, Benchmark4096) {
    REQUIRE_GPU();
    if (gpu_testing::instrumented()) GTEST_SKIP() << "instrumented run: timing means nothing";
    const int64_t size = 4096;
    std::mt19937 rng(13);
    cuda::Gemm gemm;
    Tensor dx = cuda::to_device(random_bf16({size, size}, rng, 1.f));
    Tensor dw = cuda::to_device(random_bf16({size, size}, rng, 0.02f));
    Tensor dy = cuda::device_tensor({size, size}, DType::kBF16);
    const gpu_testing::LaunchTiming t =
        gpu_testing::time_launch([&](cudaStream_t s) { gemm.run(dx, dw, nullptr, dy, s); });
    gpu_testing::print_bench_header();
    gpu_testing::print_bench_row("gemm bf16", "4096x4096x4096", t, 3.0 * size * size * 2,
                                 2.0 * double(size) * double(size) * double(size));
}

// ---------------------------------------------------------------------------------------------
// embedding and gather_rows: pure copies, compared bit for bit.

TEST(CudaKernels, EmbeddingMatchesCpu) {
    REQUIRE_GPU();
    std::mt19937 rng(21);
    const int64_t vocab = 5003;
    for (int64_t hidden : {8, 1001, 896, 4096}) {  // 1001: the scalar path
        Tensor table = random_bf16({vocab, hidden}, rng, 1.f);
        Tensor dtable = cuda::to_device(table);
        for (int64_t n : {1, 7, 300}) {
            std::vector<int32_t> ids(static_cast<size_t>(n));
            std::uniform_int_distribution<int32_t> pick(0, int32_t(vocab - 1));
            for (auto& id : ids) id = pick(rng);
            ids.front() = int32_t(vocab - 1);
            ids.back() = 0;
            Tensor dout = cuda::device_tensor({n, hidden}, DType::kBF16);
            cuda::embedding(cuda::to_device(host_i32(ids)), dtable, dout, nullptr);
            sync();
            Tensor ref = Tensor::zeros({n, hidden}, DType::kF32);
            Tensor table_f32 = table.to_f32();
            cpu::embedding(ids.data(), n, table_f32.data<float>(), hidden, ref.data<float>());
            ASSERT_TRUE(bitwise_equal(cuda::to_host(dout).to_f32(), ref))
                << "n " << n << " hidden " << hidden;
        }
    }
}

TEST(CudaKernels, GatherRowsMatchesFormula) {
    REQUIRE_GPU();
    std::mt19937 rng(22);
    for (int64_t d : {8, 13, 151936 / 64, 4096}) {
        for (int64_t n : {1, 5, 300}) {
            for (int64_t m : {0, 1, 7, 64}) {
                for (int64_t offset : {0, 1}) {  // 1: a base address that forbids 16-byte copies
                    Tensor x = random_bf16({n, d}, rng, 1.f);
                    Tensor x_buf = cuda::device_tensor({n * d + offset}, DType::kBF16);
                    Tensor dx = offset_view(x_buf, offset, {n, d});
                    MI_CUDA_CHECK(
                        cudaMemcpy(dx.raw(), x.raw(), x.nbytes(), cudaMemcpyHostToDevice));
                    std::vector<int32_t> rows(static_cast<size_t>(m));
                    std::uniform_int_distribution<int32_t> pick(0, int32_t(n - 1));
                    for (auto& r : rows) r = pick(rng);
                    // m = 0: views of no memory (a launcher must not touch them).
                    Tensor drows = m ? cuda::to_device(host_i32(rows))
                                     : Tensor(nullptr, DType::kI32, {0}, Device::kCUDA);
                    Tensor dout = m ? cuda::device_tensor({m, d}, DType::kBF16)
                                    : Tensor(nullptr, DType::kBF16, {0, d}, Device::kCUDA);
                    cuda::gather_rows(dx, drows, dout, nullptr);
                    sync();
                    if (m == 0) continue;
                    Tensor want = Tensor::zeros({m, d}, DType::kBF16);
                    for (int64_t i = 0; i < m; ++i)
                        std::memcpy(want.data<uint16_t>() + i * d,
                                    x.data<uint16_t>() + rows[size_t(i)] * d, size_t(d) * 2);
                    ASSERT_TRUE(bitwise_equal(dout, want))
                        << "m " << m << " d " << d << " n " << n << " offset " << offset;
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// silu_mul. Both sides compute silu(g) · u in fp32 and the GPU rounds once to bf16: the error
// is the rounding (≤ 2^-8 relative) plus a few fp32 ulps from expf, so 2^-8 · 1.01.

TEST(CudaKernels, SiluMulMatchesCpu) {
    REQUIRE_GPU();
    std::mt19937 rng(31);
    for (int64_t n : {1, 7, 300}) {
        for (int64_t inter : {8, 13, 3072, 9728}) {
            Tensor gate_up = random_bf16({n, 2 * inter}, rng, 3.f);
            Tensor dout = cuda::device_tensor({n, inter}, DType::kBF16);
            cuda::silu_mul(cuda::to_device(gate_up), dout, nullptr);
            sync();
            Tensor in_f32 = gate_up.to_f32(), ref = Tensor::zeros({n, inter}, DType::kF32);
            cpu::silu_mul(in_f32.data<float>(), n, inter, ref.data<float>());
            ASSERT_TRUE(all_close(dout, ref, {.atol = 1e-30, .rtol = kBf16HalfUlp * 1.01}))
                << "n " << n << " inter " << inter;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// qk_norm_rope_store

struct QkCase {
    int64_t num_heads, num_kv_heads, head_dim, page_size, n;
    bool with_norm;
    float rope_scale = 1.f;  // YaRN's cos/sin multiplier
};

// inv_freq as Hugging Face computes it: 1 / theta^(2i / head_dim), in fp32.
std::vector<float> rope_inv_freq(int64_t head_dim, double theta) {
    std::vector<float> inv_freq(size_t(head_dim / 2));
    for (size_t i = 0; i < inv_freq.size(); ++i)
        inv_freq[i] = float(1.0 / std::pow(theta, double(2 * i) / double(head_dim)));
    return inv_freq;
}

// The n tokens are split into a few sequences, each a run of consecutive positions starting at
// a random point (often just before a page end), over its own shuffled pages: slots cross page
// boundaries and are distinct, as the scheduler makes them.
void make_batch(const QkCase& c, int64_t num_pages, std::mt19937& rng,
                std::vector<int32_t>& positions, std::vector<int32_t>& slots) {
    std::vector<int32_t> pages(static_cast<size_t>(num_pages));
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), rng);
    size_t next_page = 0;
    positions.clear();
    slots.clear();
    while (int64_t(positions.size()) < c.n) {
        const int64_t len =
            std::min<int64_t>(c.n - int64_t(positions.size()), 1 + int64_t(rng() % 97));
        const int64_t start = int64_t(rng() % 3) == 0 ? int64_t(rng() % 40000) : c.page_size - 2;
        // This sequence's pages: enough for its last position (pages before its window are unused).
        const int64_t first_page = start / c.page_size, last_page = (start + len - 1) / c.page_size;
        std::vector<int32_t> table(size_t(last_page + 1), -1);
        for (int64_t p = first_page; p <= last_page; ++p) table[size_t(p)] = pages.at(next_page++);
        for (int64_t i = 0; i < len; ++i) {
            const int64_t pos = start + i;
            positions.push_back(int32_t(pos));
            slots.push_back(
                int32_t(table[size_t(pos / c.page_size)] * c.page_size + pos % c.page_size));
        }
    }
}

// Hugging Face's per-head RMSNorm on bf16 values: fp32 math, normalised value rounded to bf16,
// times the weight rounded to bf16.
void norm_head_reference(float* x, const float* w, int64_t head_dim, float eps) {
    double sum_sq = 0;
    for (int64_t i = 0; i < head_dim; ++i) sum_sq += double(x[i]) * double(x[i]);
    const float inv_rms = float(1.0 / std::sqrt(sum_sq / double(head_dim) + double(eps)));
    for (int64_t i = 0; i < head_dim; ++i) x[i] = round_bf16(round_bf16(x[i] * inv_rms) * w[i]);
}

TEST(CudaKernels, QkNormRopeStoreMatchesCpu) {
    REQUIRE_GPU();
    std::mt19937 rng(41);
    const float eps = 1e-6f;
    const std::vector<QkCase> cases = {
        {16, 8, 128, 16, 1, true},    // Qwen3-0.6B shape, one decode token
        {16, 8, 128, 16, 300, true},  // a prefill chunk across many pages
        {2, 2, 64, 32, 7, true},      // GQA ratio 1
        {4, 2, 128, 256, 33, false},  // ratio 2, large pages
        {14, 2, 64, 16, 45, false},   // ratio 7 (Qwen2-0.5B: no per-head norm)
        {14, 2, 64, 64, 1, true},     // ratio 7
        {16, 2, 128, 32, 129, true},  // ratio 8
        {32, 4, 128, 16, 5, false},   // ratio 8, Qwen2-7B-like
        {8, 1, 256, 16, 11, true},    // head_dim 256
        // YaRN's cos/sin multiplier (its attention factor at factor 4, and another)
        {16, 8, 128, 16, 300, true, 1.1386f},
        {14, 2, 64, 16, 45, false, 1.25f},
    };
    for (const QkCase& c : cases) {
        SCOPED_TRACE(testing::Message()
                     << "heads " << c.num_heads << " kv " << c.num_kv_heads << " head_dim "
                     << c.head_dim << " page " << c.page_size << " n " << c.n << " norm "
                     << c.with_norm << " rope_scale " << c.rope_scale);
        const int64_t H = c.num_heads, KV = c.num_kv_heads, D = c.head_dim, total = H + 2 * KV;
        const int64_t num_pages = c.n + 16;  // each sequence uses at most len / page_size + 2 pages
        std::vector<int32_t> positions, slots;
        make_batch(c, num_pages, rng, positions, slots);
        const std::vector<float> inv_freq = rope_inv_freq(D, 1e6);

        Tensor qkv = random_bf16({c.n, total * D}, rng, 2.f);
        Tensor q_norm = random_bf16({D}, rng, 1.f), k_norm = random_bf16({D}, rng, 1.f);
        Tensor k_cache = random_bf16({num_pages, c.page_size, KV, D}, rng, 1.f);
        Tensor v_cache = random_bf16({num_pages, c.page_size, KV, D}, rng, 1.f);
        Tensor dq_norm = cuda::to_device(q_norm), dk_norm = cuda::to_device(k_norm);
        Tensor dk_cache = cuda::to_device(k_cache), dv_cache = cuda::to_device(v_cache);
        Tensor dq_out = cuda::device_tensor({c.n, H, D}, DType::kBF16);
        cuda::qk_norm_rope_store(
            cuda::to_device(qkv), c.with_norm ? &dq_norm : nullptr,
            c.with_norm ? &dk_norm : nullptr, eps, cuda::to_device(host_i32(positions)),
            cuda::to_device(host_f32(inv_freq)), cuda::to_device(host_i32(slots)), H, KV, D, dq_out,
            dk_cache, dv_cache, nullptr, 1.f, 1.f, c.rope_scale);
        sync();
        Tensor q_got = cuda::to_host(dq_out), k_got = cuda::to_host(dk_cache),
               v_got = cuda::to_host(dv_cache);

        // Reference: the norm as above, then the CPU rotary in fp32. Tolerance per element of a
        // rotated pair (a, b): the final bf16 rounding (2^-8 of the result) plus, with the norm,
        // up to 2 bf16 ulps (2^-6 relative) on each of a and b where the GPU's rsqrtf and the
        // reference's inv_rms land on different sides of a bf16 rounding boundary.
        // Compared as one list, element (t * (H + KV) + h) * D + dim for token t, head h (q heads
        // first, then k heads).
        Tensor qkv_f32 = qkv.to_f32(), q_norm_f32 = q_norm.to_f32(), k_norm_f32 = k_norm.to_f32();
        std::vector<double> got_qk, want_qk, bound_qk;
        int64_t exact = 0;
        for (int64_t t = 0; t < c.n; ++t) {
            for (int64_t h = 0; h < H + KV; ++h) {
                const bool is_q = h < H;
                std::vector<float> head(qkv_f32.data<float>() + (t * total + h) * D,
                                        qkv_f32.data<float>() + (t * total + h + 1) * D);
                if (c.with_norm)
                    norm_head_reference(head.data(), (is_q ? q_norm_f32 : k_norm_f32).data<float>(),
                                        D, eps);
                const std::vector<float> rope_in = head;
                cpu::rope_neox(head.data(), 1, 1, D, &positions[size_t(t)], inv_freq.data(),
                               c.rope_scale);
                const int64_t out_base =
                    is_q ? (t * H + h) * D : (int64_t(slots[size_t(t)]) * KV + h - H) * D;
                const Tensor& got = is_q ? q_got : k_got;
                for (int64_t i = 0; i < D; ++i) {
                    const float a = rope_in[size_t(i)], b = rope_in[size_t((i + D / 2) % D)];
                    const float g = bf16_at(got, out_base + i);
                    got_qk.push_back(g);
                    want_qk.push_back(head[size_t(i)]);
                    bound_qk.push_back((c.with_norm ? 1.0 / 64 : 1e-6) * c.rope_scale *
                                       (std::fabs(a) + std::fabs(b)));
                    exact += g == round_bf16(head[size_t(i)]);
                }
            }
        }
        ASSERT_TRUE(all_close(got_qk, want_qk, {.atol = 1e-30, .rtol = kBf16HalfUlp}, bound_qk));
        const int64_t compared = int64_t(got_qk.size());
        std::printf(
            "  heads %ld/%ld d %ld n %ld norm %d: %.2f%% of q/k values bitwise equal to the "
            "reference\n",
            long(H), long(KV), long(D), long(c.n), int(c.with_norm),
            100.0 * double(exact) / double(compared));

        // V: copied bit for bit. Every slot not written keeps its old K and V.
        auto kv_row = [&](const Tensor& t, int64_t row) {
            return std::span<const uint16_t>(t.data<uint16_t>() + row * KV * D, size_t(KV * D));
        };
        std::vector<bool> written(size_t(num_pages * c.page_size), false);
        for (int64_t t = 0; t < c.n; ++t) {
            const int64_t slot = slots[size_t(t)];
            written[size_t(slot)] = true;
            const std::span<const uint16_t> v_in(qkv.data<uint16_t>() + (t * total + H + KV) * D,
                                                 size_t(KV * D));
            ASSERT_TRUE(bitwise_equal(kv_row(v_got, slot), v_in)) << "v of token " << t;
        }
        for (int64_t slot = 0; slot < num_pages * c.page_size; ++slot) {
            if (written[size_t(slot)]) continue;
            ASSERT_TRUE(bitwise_equal(kv_row(k_got, slot), kv_row(k_cache, slot)))
                << "k slot " << slot << " was not to be written";
            ASSERT_TRUE(bitwise_equal(kv_row(v_got, slot), kv_row(v_cache, slot)))
                << "v slot " << slot << " was not to be written";
        }
    }
}

// An FP8 cache (--kv-cache-dtype fp8): the same kernel writing e4m3 bytes at scales k_scale,
// v_scale. Against the bf16 store of the same inputs (checked above): q_out bit for bit; V, which
// arrives as bf16, exactly CPU's f32_to_e4m3(v / v_scale); K (rounded from fp32 on the GPU,
// from the bf16-rounded K here) the same code or a neighbour, most of them the same; slots not
// written keep their bytes.
TEST(CudaKernels, QkNormRopeStoreFp8MatchesBf16Store) {
    REQUIRE_GPU();
    std::mt19937 rng(42);
    for (const QkCase& c : {QkCase{16, 8, 128, 16, 300, true}, QkCase{14, 2, 64, 16, 45, false},
                            QkCase{8, 1, 256, 16, 11, true}}) {
        for (const auto& [k_scale, v_scale] : {std::pair{1.f, 1.f}, std::pair{0.25f, 4.f}}) {
            SCOPED_TRACE(testing::Message() << "heads " << c.num_heads << " d " << c.head_dim
                                            << " scales " << k_scale << "/" << v_scale);
            const int64_t H = c.num_heads, KV = c.num_kv_heads, D = c.head_dim;
            const int64_t total = H + 2 * KV, num_pages = c.n + 16;
            std::vector<int32_t> positions, slots;
            make_batch(c, num_pages, rng, positions, slots);
            const Tensor qkv = cuda::to_device(random_bf16({c.n, total * D}, rng, 2.f));
            const Tensor q_norm = cuda::to_device(random_bf16({D}, rng, 1.f));
            const Tensor k_norm = cuda::to_device(random_bf16({D}, rng, 1.f));
            const Tensor pos = cuda::to_device(host_i32(positions));
            const Tensor freq = cuda::to_device(host_f32(rope_inv_freq(D, 1e6)));
            const Tensor slot_map = cuda::to_device(host_i32(slots));
            const Shape cache_shape{num_pages, c.page_size, KV, D};
            Tensor k16 = cuda::device_tensor(cache_shape, DType::kBF16);
            Tensor v16 = cuda::device_tensor(cache_shape, DType::kBF16);
            Tensor k8 = cuda::device_tensor(cache_shape, DType::kU8);
            Tensor v8 = cuda::device_tensor(cache_shape, DType::kU8);
            MI_CUDA_CHECK(cudaMemset(k8.raw(), 0x5a, k8.nbytes()));
            MI_CUDA_CHECK(cudaMemset(v8.raw(), 0x5a, v8.nbytes()));
            Tensor q16 = cuda::device_tensor({c.n, H, D}, DType::kBF16);
            Tensor q8 = cuda::device_tensor({c.n, H, D}, DType::kBF16);
            const Tensor* qn = c.with_norm ? &q_norm : nullptr;
            const Tensor* kn = c.with_norm ? &k_norm : nullptr;
            cuda::qk_norm_rope_store(qkv, qn, kn, 1e-6f, pos, freq, slot_map, H, KV, D, q16, k16,
                                     v16, nullptr);
            cuda::qk_norm_rope_store(qkv, qn, kn, 1e-6f, pos, freq, slot_map, H, KV, D, q8, k8, v8,
                                     nullptr, k_scale, v_scale);
            sync();
            ASSERT_TRUE(bitwise_equal(q8, q16));
            const Tensor kb = cuda::to_host(k16), vb = cuda::to_host(v16);
            const Tensor k_bytes = cuda::to_host(k8), v_bytes = cuda::to_host(v8);
            std::vector<bool> written(size_t(num_pages * c.page_size), false);
            int64_t k_same = 0, k_count = 0;
            for (int64_t t = 0; t < c.n; ++t) {
                const int64_t slot = slots[size_t(t)];
                written[size_t(slot)] = true;
                for (int64_t e = slot * KV * D; e < (slot + 1) * KV * D; ++e) {
                    const uint8_t want_v = f32_to_e4m3(bf16_at(vb, e) / v_scale);
                    ASSERT_EQ(v_bytes.data<uint8_t>()[e], want_v) << "v of token " << t;
                    const uint8_t got_k = k_bytes.data<uint8_t>()[e];
                    const uint8_t near_k = f32_to_e4m3(bf16_at(kb, e) / k_scale);
                    const int step = std::abs(int(got_k & 0x7f) - int(near_k & 0x7f));
                    ASSERT_TRUE(got_k == near_k || ((got_k ^ near_k) < 0x80 && step == 1) ||
                                (got_k & 0x7f) + (near_k & 0x7f) <= 1)  // ±0 and the smallest
                        << "k of token " << t << " element " << e << ": " << int(got_k) << " vs "
                        << int(near_k);
                    k_same += got_k == near_k;
                    ++k_count;
                }
            }
            EXPECT_GE(double(k_same), 0.95 * double(k_count));
            for (int64_t slot = 0; slot < num_pages * c.page_size; ++slot) {
                if (written[size_t(slot)]) continue;
                for (int64_t e = slot * KV * D; e < (slot + 1) * KV * D; ++e) {
                    ASSERT_EQ(k_bytes.data<uint8_t>()[e], 0x5a) << "k slot " << slot;
                    ASSERT_EQ(v_bytes.data<uint8_t>()[e], 0x5a) << "v slot " << slot;
                }
            }
        }
    }
}

}  // namespace
