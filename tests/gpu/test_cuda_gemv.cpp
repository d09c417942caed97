// The gemv kernel (y = x · wᵀ (+ bias) for few rows) against a double reference on random shapes,
// its use by the Gemm wrapper (dispatch, fallback, graph capture), and a benchmark against
// cuBLASLt on Qwen3-0.6B's decode shapes that sets Gemm::kGemvMaxRows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "gpu_testing.h"
#include "kernels/cuda/elementwise/silu_mul.h"
#include "kernels/cuda/gemm/gemm.h"
#include "kernels/cuda/gemm/gemv.h"
#include "kernels/cuda/norm/rms_norm.h"
#include "kernels/cuda/primitives/launch.h"

using namespace miniinfer;
using gpu_testing::all_close;
using gpu_testing::bitwise_equal;
using gpu_testing::CapturedGraph;
using gpu_testing::download;
using gpu_testing::offset_view;
using gpu_testing::random_bf16;

namespace {

constexpr double kBf16HalfUlp = 1.0 / 256;  // 2^-8: round-to-nearest error of bf16, relative

// y = x · wᵀ + bias in double from the bf16 inputs, and Σ|x·w| + |bias| for the tolerance.
struct Reference {
    std::vector<double> y, abs_sum;
};

Reference reference(const Tensor& x, const Tensor& w, const Tensor* bias, int64_t m, int64_t n,
                    int64_t k) {
    std::vector<float> xf(size_t(m * k)), wf(size_t(n * k));
    copy_to_f32(x, xf.data());
    copy_to_f32(w, wf.data());
    Reference ref;
    ref.y.assign(size_t(m * n), 0.0);
    ref.abs_sum.assign(size_t(m * n), 0.0);
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            double s = 0, a = 0;
            for (int64_t p = 0; p < k; ++p) {
                const double prod = double(xf[size_t(i * k + p)]) * double(wf[size_t(j * k + p)]);
                s += prod;
                a += std::fabs(prod);
            }
            const double b = bias ? bf16_to_f32(bias->data<uint16_t>()[j]) : 0.0;
            ref.y[size_t(i * n + j)] = s + b;
            ref.abs_sum[size_t(i * n + j)] = a + std::fabs(b);
        }
    }
    return ref;
}

// Tolerance: one bf16 rounding of the result (≤ 2^-8 relative) plus the fp32 summation error of
// k products and the bias, at most about (k + 1) · 2^-24 · Σ|x·w| (products of bf16 values are
// exact in fp32); doubled for the order in which lanes and shuffles add. gemv adds the bias in
// fp32 before its single rounding, so unlike cuBLASLt's BIAS epilogue there is no extra term.
double worst_error(const Tensor& y_host, const Reference& ref, int64_t k, const char* what) {
    const double accumulation = 2.0 * double(k + 1) * std::ldexp(1.0, -24);
    std::vector<double> bound(ref.abs_sum.size());
    for (size_t i = 0; i < bound.size(); ++i) bound[i] = accumulation * ref.abs_sum[i];
    const std::vector<double> got = gpu_testing::to_doubles(y_host);
    const gpu_testing::Tolerance tol{.atol = 1e-30, .rtol = kBf16HalfUlp};
    EXPECT_TRUE(all_close(got, ref.y, tol, bound)) << what;
    return gpu_testing::error_stats(got, ref.y, tol, bound).worst_of_allowed;
}

void sync_device() {
    MI_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace

// Every row count of one launch and of two (11, 16), odd n (a warp's last columns past n), k from
// one vector to 4096 including k / 8 not a multiple of 32 lanes, with and without bias, every
// cols_per_block variant. y sits one element into its buffer (gemv accepts any y alignment) with
// guard elements either side that must survive.
TEST(CudaGemv, MatchesDoubleReference) {
    REQUIRE_GPU();
    std::mt19937 rng(31);
    struct NK {
        int64_t n, k;
    };
    double worst = 0;
    for (int64_t m : {1, 2, 3, 5, 8, 11, 16}) {
        for (NK nk : {NK{1, 8}, NK{33, 64}, NK{257, 1032}, NK{1001, 1024}, NK{7, 4096}}) {
            const int64_t n = nk.n, k = nk.k;
            Tensor x = random_bf16({m, k}, rng, 1.f);
            Tensor w = random_bf16({n, k}, rng, 1.f / std::sqrt(float(k)));
            Tensor bias = random_bf16({n}, rng, 1.f);
            Tensor dx = cuda::to_device(x), dw = cuda::to_device(w), dbias = cuda::to_device(bias);
            const int64_t guard = 8;
            Tensor y_buf = cuda::device_tensor({m * n + 2 * guard}, DType::kBF16);
            Tensor dy = offset_view(y_buf, guard + 1, {m, n});
            for (bool with_bias : {false, true}) {
                const Reference ref = reference(x, w, with_bias ? &bias : nullptr, m, n, k);
                for (int cols : {0, 1, 2, 4}) {
                    MI_CUDA_CHECK(cudaMemset(y_buf.raw(), 0xff, y_buf.nbytes()));  // NaN
                    cuda::gemv(dx, dw, with_bias ? &dbias : nullptr, dy, nullptr, cols);
                    sync_device();
                    char what[96];
                    std::snprintf(what, sizeof what, "m=%ld n=%ld k=%ld bias=%d cols=%d", long(m),
                                  long(n), long(k), int(with_bias), cols);
                    worst = std::max(worst, worst_error(download(dy), ref, k, what));
                    const Tensor all = cuda::to_host(y_buf);
                    const auto* bits = all.data<uint16_t>();
                    for (int64_t i = 0; i < all.numel(); ++i) {
                        if (i < guard + 1 || i >= guard + 1 + m * n) {
                            ASSERT_EQ(bits[i], 0xffff) << what << ": wrote outside y at " << i;
                        }
                    }
                }
            }
        }
    }
    std::printf("  gemv: worst error %.2f of tolerance\n", worst);
}

// What the Gemm wrapper relies on to fall back to cuBLASLt: k % 8 != 0 and misaligned x or w are
// refused; a misaligned y is fine (gemv stores scalars).
TEST(CudaGemv, SupportedOperands) {
    REQUIRE_GPU();
    const int64_t m = 2, n = 5, k = 16;
    Tensor x_buf = cuda::device_tensor({m * k + 8}, DType::kBF16);
    Tensor w_buf = cuda::device_tensor({n * k + 8}, DType::kBF16);
    Tensor y_buf = cuda::device_tensor({m * n + 8}, DType::kBF16);
    Tensor bias = cuda::device_tensor({n}, DType::kBF16);
    Tensor x = offset_view(x_buf, 0, {m, k}), w = offset_view(w_buf, 0, {n, k}),
           y = offset_view(y_buf, 0, {m, n});
    EXPECT_TRUE(cuda::gemv_supported(x, w, &bias, y));
    EXPECT_TRUE(cuda::gemv_supported(offset_view(x_buf, 0, {1, m, k}), w, nullptr,
                                     offset_view(y_buf, 0, {1, m, n})));
    EXPECT_TRUE(cuda::gemv_supported(x, w, nullptr, offset_view(y_buf, 1, {m, n})));
    EXPECT_FALSE(cuda::gemv_supported(offset_view(x_buf, 1, {m, k}), w, nullptr, y));
    EXPECT_FALSE(cuda::gemv_supported(x, offset_view(w_buf, 4, {n, k}), nullptr, y));
    EXPECT_FALSE(cuda::gemv_supported(offset_view(x_buf, 0, {m * 4, 4}),
                                      offset_view(w_buf, 0, {n, 4}), nullptr, y));  // k = 4
    EXPECT_FALSE(cuda::gemv_supported(x, w, nullptr, offset_view(y_buf, 0, {m, n + 1})));
    Tensor short_bias = cuda::device_tensor({n - 1}, DType::kBF16);
    EXPECT_FALSE(cuda::gemv_supported(x, w, &short_bias, y));
    Tensor host_x = Tensor::zeros({m, k}, DType::kBF16);
    EXPECT_FALSE(cuda::gemv_supported(host_x, w, nullptr, y));
}

// The wrapper sends m ≤ its gemv_max_rows to gemv (bit-identical to calling gemv) and the rest,
// or operands gemv refuses, to cuBLASLt; all of them are correct.
TEST(CudaGemv, GemmDispatch) {
    REQUIRE_GPU();
    std::mt19937 rng(32);
    cuda::Gemm gemm;  // default crossover
    cuda::Gemm cublas_only(0);
    for (int64_t m : {1, 4, 8, 9, 24}) {
        for (int64_t k : {1024, 17}) {  // 17: gemv refuses, cuBLASLt runs even at m = 1
            const int64_t n = 515;
            Tensor x = random_bf16({m, k}, rng, 1.f);
            Tensor w = random_bf16({n, k}, rng, 1.f / std::sqrt(float(k)));
            Tensor dx = cuda::to_device(x), dw = cuda::to_device(w);
            Tensor dy = cuda::device_tensor({m, n}, DType::kBF16);
            Tensor dy_ref = cuda::device_tensor({m, n}, DType::kBF16);
            const Reference ref = reference(x, w, nullptr, m, n, k);
            char what[64];
            std::snprintf(what, sizeof what, "gemm m=%ld k=%ld", long(m), long(k));
            gemm.run(dx, dw, nullptr, dy, nullptr);
            sync_device();
            const Tensor got = cuda::to_host(dy);
            // cuBLASLt's tolerance is gemv's: no bias here, so one rounding either way.
            worst_error(got, ref, k, what);
            cublas_only.run(dx, dw, nullptr, dy_ref, nullptr);
            sync_device();
            worst_error(cuda::to_host(dy_ref), ref, k, what);
            if (m <= cuda::Gemm::kGemvMaxRows && k % 8 == 0) {
                cuda::gemv(dx, dw, nullptr, dy_ref, nullptr);
                sync_device();
                EXPECT_TRUE(bitwise_equal(dy_ref, got)) << what << ": the wrapper did not run gemv";
            }
        }
    }
}

// gemv_rms_norm (the residual add + RMSNorm inside the GEMV): block 0's residual_out is the
// bf16 sum bit for bit (add_rms_norm's), its normed rows are within two bf16 roundings of the
// norm computed in double from that sum (the fp32 sum of squares adds in another order than
// add_rms_norm's, which is held to the same bound), and y is the GEMV of exactly those normed
// rows (the double reference of the rows block 0 wrote, at gemv's tolerance: every block
// normalises the same way). Every row count of one launch, n with a last block of idle warps, k
// with k / 8 not a multiple of the block's threads, with and without delta and bias; through
// Gemm::run_normed at m <= kGemvMaxRows the bits are the direct call's.
TEST(CudaGemv, RmsNormInsideMatchesNormThenGemv) {
    REQUIRE_GPU();
    std::mt19937 rng(34);
    cuda::Gemm gemm;
    for (int64_t m : {1, 2, 3, 4}) {
        for (int64_t k : {1024, 2056}) {
            for (int64_t n : {5, 130, 1029}) {
                for (bool with_delta : {true, false}) {
                    const bool with_bias = n == 130;
                    Tensor res = random_bf16({m, k}, rng, 2.f),
                           delta = random_bf16({m, k}, rng, 1.f);
                    Tensor nw = random_bf16({k}, rng, 1.f);
                    Tensor w = random_bf16({n, k}, rng, 1.f / std::sqrt(float(k)));
                    Tensor bias = random_bf16({n}, rng, 1.f);
                    Tensor dres = cuda::to_device(res), ddelta = cuda::to_device(delta);
                    Tensor dnw = cuda::to_device(nw), dw = cuda::to_device(w);
                    Tensor dbias = cuda::to_device(bias);
                    Tensor dres_out = cuda::device_tensor({m, k}, DType::kBF16);
                    Tensor dnormed = cuda::device_tensor({m, k}, DType::kBF16);
                    Tensor dy = cuda::device_tensor({m, n}, DType::kBF16);
                    const cuda::AddRmsNorm in{.delta = with_delta ? &ddelta : nullptr,
                                              .residual = &dres,
                                              .residual_out = &dres_out,
                                              .weight = &dnw,
                                              .eps = 1e-6f,
                                              .normed = &dnormed};
                    char what[96];
                    std::snprintf(what, sizeof what, "m=%ld k=%ld n=%ld delta=%d", long(m), long(k),
                                  long(n), int(with_delta));
                    ASSERT_TRUE(cuda::gemv_rms_norm_supported(in, dw, &dbias, dy)) << what;
                    cuda::gemv_rms_norm(in, dw, with_bias ? &dbias : nullptr, dy, nullptr);
                    sync_device();
                    const Tensor normed = cuda::to_host(dnormed), y = cuda::to_host(dy);

                    // The two-kernel form on the same inputs.
                    Tensor dres_out2 = cuda::device_tensor({m, k}, DType::kBF16);
                    Tensor dnormed2 = cuda::device_tensor({m, k}, DType::kBF16);
                    cuda::AddRmsNorm two = in;
                    two.residual_out = &dres_out2;
                    two.normed = &dnormed2;
                    cuda::add_rms_norm(two, nullptr);
                    sync_device();
                    if (with_delta) {
                        EXPECT_TRUE(bitwise_equal(dres_out, dres_out2)) << what;
                    }

                    // The norm in double from the bf16 stream, against both kernels' rows.
                    std::vector<float> sum(static_cast<size_t>(m * k)), nwf(static_cast<size_t>(k));
                    copy_to_f32(with_delta ? cuda::to_host(dres_out2) : res, sum.data());
                    copy_to_f32(nw, nwf.data());
                    std::vector<double> normed_ref(size_t(m * k));
                    for (int64_t r = 0; r < m; ++r) {
                        double sq = 0;
                        for (int64_t i = 0; i < k; ++i)
                            sq += double(sum[size_t(r * k + i)]) * sum[size_t(r * k + i)];
                        const double inv = 1.0 / std::sqrt(sq / double(k) + 1e-6);
                        for (int64_t i = 0; i < k; ++i)
                            normed_ref[size_t(r * k + i)] =
                                sum[size_t(r * k + i)] * inv * nwf[size_t(i)];
                    }
                    // Two roundings (the normed value, then its product with the weight).
                    const gpu_testing::Tolerance one_rounding{.atol = 1e-30,
                                                              .rtol = 3 * kBf16HalfUlp};
                    EXPECT_TRUE(
                        all_close(gpu_testing::to_doubles(normed), normed_ref, one_rounding))
                        << what << " (fused)";
                    EXPECT_TRUE(all_close(gpu_testing::to_doubles(cuda::to_host(dnormed2)),
                                          normed_ref, one_rounding))
                        << what << " (add_rms_norm)";
                    worst_error(y, reference(normed, w, with_bias ? &bias : nullptr, m, n, k), k,
                                what);

                    if (m <= cuda::Gemm::kGemvMaxRows) {  // the wrapper takes the fused kernel
                        Tensor dy2 = cuda::device_tensor({m, n}, DType::kBF16);
                        gemm.run_normed(in, dw, with_bias ? &dbias : nullptr, dy2, nullptr);
                        sync_device();
                        EXPECT_TRUE(bitwise_equal(dy2, y)) << what << ": run_normed did not fuse";
                    }
                }
            }
        }
    }
    // What run_normed relies on to fall back to two kernels.
    Tensor r = cuda::device_tensor({1, 1024}, DType::kBF16),
           d = cuda::device_tensor({1, 1024}, DType::kBF16);
    Tensor nw = cuda::device_tensor({1024}, DType::kBF16),
           out = cuda::device_tensor({1, 1024}, DType::kBF16);
    Tensor w = cuda::device_tensor({8, 1024}, DType::kBF16),
           y = cuda::device_tensor({1, 8}, DType::kBF16);
    cuda::AddRmsNorm in{
        .delta = &d, .residual = &r, .residual_out = &r, .weight = &nw, .normed = &out};
    EXPECT_FALSE(cuda::gemv_rms_norm_supported(in, w, nullptr, y)) << "in place";
    Tensor r2 = cuda::device_tensor({1, 1024}, DType::kBF16);
    in.residual_out = &r2;
    EXPECT_TRUE(cuda::gemv_rms_norm_supported(in, w, nullptr, y));
    Tensor y32 = cuda::device_tensor({1, 8}, DType::kF32);
    // f32 y: the MoE router's logits, fused too.
    EXPECT_TRUE(cuda::gemv_rms_norm_supported(in, w, nullptr, y32)) << "f32 y";
    Tensor big_r = cuda::device_tensor({4, 8200}, DType::kBF16);
    Tensor big_w = cuda::device_tensor({8, 8200}, DType::kBF16);
    Tensor big_nw = cuda::device_tensor({8200}, DType::kBF16);
    Tensor big_y = cuda::device_tensor({4, 8}, DType::kBF16);
    EXPECT_FALSE(cuda::gemv_rms_norm_supported(
        {.residual = &big_r, .weight = &big_nw, .normed = nullptr}, big_w, nullptr, big_y))
        << "rows past 64 KB";
    Tensor five_r = cuda::device_tensor({5, 1024}, DType::kBF16);
    Tensor five_y = cuda::device_tensor({5, 8}, DType::kBF16);
    EXPECT_FALSE(cuda::gemv_rms_norm_supported(
        {.residual = &five_r, .weight = &nw, .normed = nullptr}, w, nullptr, five_y))
        << "5 rows";
}

// gemv_silu_mul (SiLU·mul inside the GEMV) gives the bits of silu_mul then gemv: the same
// arithmetic on the same values, x read from shared memory instead of global. Through
// Gemm::run_silu_mul at m <= kGemvMaxRows (act untouched) and above it (act written, cuBLASLt).
TEST(CudaGemv, SiluMulInsideGivesTheBitsOfTwoKernels) {
    REQUIRE_GPU();
    std::mt19937 rng(35);
    cuda::Gemm gemm;
    for (int64_t m : {1, 2, 3, 4, 9}) {
        for (int64_t k : {1024, 3072, 1032}) {
            const int64_t n = k == 3072 ? 1024 : 257;
            Tensor gate_up = cuda::to_device(random_bf16({m, 2 * k}, rng, 2.f));
            Tensor w = cuda::to_device(random_bf16({n, k}, rng, 1.f / std::sqrt(float(k))));
            Tensor bias = cuda::to_device(random_bf16({n}, rng, 1.f));
            Tensor act = cuda::device_tensor({m, k}, DType::kBF16);
            Tensor y_two = cuda::device_tensor({m, n}, DType::kBF16);
            Tensor y_fused = cuda::device_tensor({m, n}, DType::kBF16);
            char what[64];
            std::snprintf(what, sizeof what, "m=%ld k=%ld", long(m), long(k));
            cuda::silu_mul(gate_up, act, nullptr);
            if (m <= cuda::kGemvFusedMaxRows) {
                cuda::gemv(act, w, &bias, y_two, nullptr);
                ASSERT_TRUE(cuda::gemv_silu_mul_supported(gate_up, w, &bias, y_fused)) << what;
                cuda::gemv_silu_mul(gate_up, w, &bias, y_fused, nullptr);
                sync_device();
                EXPECT_TRUE(bitwise_equal(y_fused, y_two)) << what;
            } else {
                EXPECT_FALSE(cuda::gemv_silu_mul_supported(gate_up, w, &bias, y_fused)) << what;
            }
            // The wrapper: fused at m <= kGemvMaxRows (act left alone), else silu_mul + run().
            cuda::Gemm reference_gemm;
            reference_gemm.run(act, w, &bias, y_two, nullptr);
            Tensor act2 = cuda::device_tensor({m, k}, DType::kBF16);
            MI_CUDA_CHECK(cudaMemset(act2.raw(), 0, act2.nbytes()));
            gemm.run_silu_mul(gate_up, act2, w, &bias, y_fused, nullptr);
            sync_device();
            EXPECT_TRUE(bitwise_equal(y_fused, y_two)) << what << " (run_silu_mul)";
            if (m <= cuda::Gemm::kGemvMaxRows) {
                const Tensor a = cuda::to_host(act2);
                EXPECT_TRUE(std::all_of(a.data<uint16_t>(), a.data<uint16_t>() + m * k,
                                        [](uint16_t v) { return v == 0; }))
                    << what << ": run_silu_mul did not fuse";
            } else {
                EXPECT_TRUE(bitwise_equal(act2, act)) << what << ": act";
            }
        }
    }
}

// f32 output (the LM head's logits): through gemv (m <= 2) and cuBLASLt (m > 2, or k % 8 != 0),
// within the fp32 summation error alone — no bf16 rounding term, so a bf16 result would fail
// (its rounding is ~2^-8 relative, far above the 2(k + 1) · 2^-24 · Σ|x·w| allowed here).
TEST(CudaGemv, Fp32OutputHasNoBf16Rounding) {
    REQUIRE_GPU();
    std::mt19937 rng(33);
    cuda::Gemm gemm;
    for (int64_t m : {1, 2, 3, 17}) {
        for (int64_t k : {1024, 17}) {
            const int64_t n = 1001;
            Tensor x = random_bf16({m, k}, rng, 1.f);
            Tensor w = random_bf16({n, k}, rng, 1.f / std::sqrt(float(k)));
            Tensor dx = cuda::to_device(x), dw = cuda::to_device(w);
            Tensor dy = cuda::device_tensor({m, n}, DType::kF32);
            const Reference ref = reference(x, w, nullptr, m, n, k);
            gemm.run(dx, dw, nullptr, dy, nullptr);
            sync_device();
            std::vector<double> bound(ref.abs_sum.size());
            for (size_t i = 0; i < bound.size(); ++i)
                bound[i] = 2.0 * double(k + 1) * std::ldexp(ref.abs_sum[i], -24);
            EXPECT_TRUE(
                all_close(gpu_testing::to_doubles(dy), ref.y, {.atol = 1e-30, .rtol = 0}, bound))
                << "m " << m << " k " << k;
            if (m <= cuda::Gemm::kGemvMaxRows && k % 8 == 0) {  // the wrapper ran gemv
                Tensor direct = cuda::device_tensor({m, n}, DType::kF32);
                cuda::gemv(dx, dw, nullptr, direct, nullptr);
                sync_device();
                EXPECT_TRUE(bitwise_equal(direct, dy)) << "m " << m;
            }
        }
    }
}

// Captured into a CUDA graph, the gemv path records a kernel without running it and replays to
// the eager bits (the runner captures its decode steps).
TEST(CudaGemv, GraphCaptureReplays) {
    REQUIRE_GPU();
    std::mt19937 rng(33);
    const int64_t m = 3, n = 777, k = 2048;
    cuda::Gemm gemm;
    Tensor dx = cuda::to_device(random_bf16({m, k}, rng, 1.f));
    Tensor dw = cuda::to_device(random_bf16({n, k}, rng, 0.02f));
    Tensor dbias = cuda::to_device(random_bf16({n}, rng, 1.f));
    Tensor dy = cuda::device_tensor({m, n}, DType::kBF16);
    cuda::Stream stream;
    gemm.run(dx, dw, &dbias, dy, stream.get());
    stream.synchronize();
    const Tensor eager = cuda::to_host(dy);
    MI_CUDA_CHECK(cudaMemset(dy.raw(), 0, dy.nbytes()));
    sync_device();

    const CapturedGraph graph(stream.get(), [&] { gemm.run(dx, dw, &dbias, dy, stream.get()); });
    const Tensor before = cuda::to_host(dy);
    EXPECT_TRUE(std::all_of(before.data<uint16_t>(), before.data<uint16_t>() + m * n,
                            [](uint16_t v) { return v == 0; }))
        << "capture must not execute the GEMM";
    graph.replay(stream.get());
    stream.synchronize();
    EXPECT_TRUE(bitwise_equal(dy, eager)) << "graph replay differs from eager";
}

// Programmatic dependent launch (kernels/cuda/primitives/launch.cuh): a chain of dependent kernels
// as a decode layer's MLP runs them at batch 1 — gemv (which loads its weights before it waits),
// SiLU·mul, gemv, add+RMSNorm — 16 rounds over the same buffers, launched with PDL eagerly and
// from a captured graph, gives the bits of the same chain launched plainly. A kernel that read its
// input before pdl_wait() (or wrote before it) would mix rounds.
TEST(CudaGemv, DependentLaunchChainMatchesPlainLaunches) {
    REQUIRE_GPU();
    std::mt19937 rng(44);
    constexpr int64_t kHidden = 1024, kInter = 3072, kRounds = 16;
    const Tensor w_up = cuda::to_device(random_bf16({2 * kInter, kHidden}, rng, 0.03f));
    const Tensor w_down = cuda::to_device(random_bf16({kHidden, kInter}, rng, 0.02f));
    const Tensor norm_w = cuda::to_device(random_bf16({kHidden}, rng, 1.f));
    const Tensor x0 = random_bf16({1, kHidden}, rng, 1.f);
    Tensor x = cuda::device_tensor({1, kHidden}, DType::kBF16);
    Tensor residual = cuda::device_tensor({1, kHidden}, DType::kBF16);
    Tensor gate_up = cuda::device_tensor({1, 2 * kInter}, DType::kBF16);
    Tensor act = cuda::device_tensor({1, kInter}, DType::kBF16);
    Tensor y = cuda::device_tensor({1, kHidden}, DType::kBF16);
    cuda::Stream stream;
    auto chain = [&] {
        for (int64_t r = 0; r < kRounds; ++r) {
            cuda::gemv(x, w_up, nullptr, gate_up, stream.get());
            cuda::silu_mul(gate_up, act, stream.get());
            cuda::gemv(act, w_down, nullptr, y, stream.get());
            cuda::add_rms_norm(y, &residual, norm_w, 1e-6f, x, stream.get());
        }
    };
    // The chain from x0 and a zero residual: x and residual after the last round.
    auto run = [&](bool pdl, bool graph) {
        cuda::set_pdl_enabled(pdl);
        MI_CUDA_CHECK(cudaMemcpy(x.raw(), x0.raw(), x0.nbytes(), cudaMemcpyHostToDevice));
        MI_CUDA_CHECK(cudaMemset(residual.raw(), 0, residual.nbytes()));
        if (graph) {
            const CapturedGraph captured(stream.get(), chain);
            captured.replay(stream.get());
            stream.synchronize();
        } else {
            chain();
            stream.synchronize();
        }
        return std::pair{cuda::to_host(x), cuda::to_host(residual)};
    };
    const bool initially = cuda::pdl_enabled();
    const auto [plain_x, plain_residual] = run(false, false);
    const std::vector<double> values = gpu_testing::to_doubles(plain_residual);
    ASSERT_TRUE(std::any_of(values.begin(), values.end(), [](double v) { return v != 0.0; }))
        << "the chain computed nothing";
    for (bool graph : {false, true}) {
        SCOPED_TRACE(graph ? "PDL, graph" : "PDL, eager");
        const auto [pdl_x, pdl_residual] = run(true, graph);
        EXPECT_EQ(std::memcmp(pdl_x.raw(), plain_x.raw(), plain_x.nbytes()), 0);
        EXPECT_EQ(std::memcmp(pdl_residual.raw(), plain_residual.raw(), plain_residual.nbytes()),
                  0);
    }
    cuda::set_pdl_enabled(initially);
}

// Informative only, never asserted: µs per call and achieved GB/s (w + x + y bytes over time, so
// m > 8 is charged once for w although gemv reads it once per 8 rows) for gemv (auto and each
// cols_per_block) and cuBLASLt on Qwen3-0.6B's decode GEMMs. Each call reads a different copy of
// w, with ≥ 256 MiB of copies in all, so w comes from HBM as in a real step, not from the 50 MiB
// L2. Calls are replayed from a CUDA graph so that launch overhead does not hide kernel time.
// Skipped when instrumented (compute-sanitizer): one call taking > 1 ms means nothing.
TEST(CudaGemv, BenchQwen3Shapes) {
    REQUIRE_GPU();
    struct BenchShape {
        const char* name;
        int64_t n, k;
    };
    const BenchShape shapes[] = {{"gate_up", 6144, 1024},
                                 {"qkv", 4096, 1024},
                                 {"o_proj", 1024, 2048},
                                 {"down", 1024, 3072},
                                 {"lm_head", 151936, 1024}};
    const int64_t max_m = 16;
    std::mt19937 rng(34);
    cuda::Gemm cublas(0);
    cuda::Stream stream;
    cuda::Event start(true), end(true);
    std::printf("gemv bench (measured copy peak %.0f GB/s); us per call, GB/s\n",
                gpu_testing::device_peaks().copy_gb_s);
    std::printf("%-8s %3s | %16s | %16s %9s %9s %9s | %s\n", "shape", "m", "cuBLASLt", "gemv auto",
                "cols=1", "cols=2", "cols=4", "speedup");
    double layer_us[2][4] = {};  // [cublas, gemv][m index]: the four layer GEMMs summed
    for (const BenchShape& shape : shapes) {
        const int64_t w_bytes = shape.n * shape.k * 2;
        const int64_t copies = std::max<int64_t>(1, (int64_t(256) << 20) / w_bytes);
        std::vector<Tensor> ws;
        for (int64_t c = 0; c < copies; ++c) {
            ws.push_back(cuda::device_tensor({shape.n, shape.k}, DType::kBF16));
            if (c == 0) {
                ws[0] = cuda::to_device(random_bf16({shape.n, shape.k}, rng, 0.02f));
            } else {
                MI_CUDA_CHECK(cudaMemcpy(ws[c].raw(), ws[0].raw(), size_t(w_bytes),
                                         cudaMemcpyDeviceToDevice));
            }
        }
        const int64_t calls = std::max<int64_t>(copies, 16);
        Tensor x_all = cuda::to_device(random_bf16({max_m, shape.k}, rng, 1.f));
        Tensor y_all = cuda::device_tensor({max_m, shape.n}, DType::kBF16);
        int m_idx = 0;
        for (int64_t m : {1, 4, 8, 16}) {
            Tensor x = offset_view(x_all, 0, {m, shape.k});
            Tensor y = offset_view(y_all, 0, {m, shape.n});
            // variant -1: cuBLASLt; 0: gemv auto; 1, 2, 4: gemv cols_per_block.
            auto call = [&](int variant, const Tensor& w) {
                if (variant < 0)
                    cublas.run(x, w, nullptr, y, stream.get());
                else
                    cuda::gemv(x, w, nullptr, y, stream.get(), variant);
            };
            auto time_us = [&](int variant) -> double {
                call(variant, ws[0]);  // cuBLASLt picks and caches its algorithm here
                stream.synchronize();
                start.record(stream.get());
                call(variant, ws[0]);
                end.record(stream.get());
                end.synchronize();
                if (cuda::Event::elapsed_ms(start, end) > 1.f) return -1;  // instrumented
                const CapturedGraph graph(stream.get(), [&] {
                    for (int64_t i = 0; i < calls; ++i) call(variant, ws[size_t(i % copies)]);
                });
                graph.replay(stream.get());  // warm clocks and code
                const int replays = 5;
                start.record(stream.get());
                for (int r = 0; r < replays; ++r) graph.replay(stream.get());
                end.record(stream.get());
                end.synchronize();
                return 1e3 * cuda::Event::elapsed_ms(start, end) / double(replays * calls);
            };
            const double bytes = double(w_bytes) + double(m * (shape.k + shape.n) * 2);
            const double cublas_us = time_us(-1), auto_us = time_us(0);
            if (cublas_us < 0 || auto_us < 0) {
                std::printf("gemv bench skipped: one call took over 1 ms (instrumented run?)\n");
                return;
            }
            const double c1 = time_us(1), c2 = time_us(2), c4 = time_us(4);
            std::printf(
                "%-8s %3ld | %7.2f %5.0f GB/s | %7.2f %5.0f GB/s %9.2f %9.2f %9.2f | %.2fx\n",
                shape.name, long(m), cublas_us, bytes / cublas_us * 1e-3, auto_us,
                bytes / auto_us * 1e-3, c1, c2, c4, cublas_us / auto_us);
            if (shape.n != 151936) {
                layer_us[0][m_idx] += cublas_us;
                layer_us[1][m_idx] += auto_us;
            }
            ++m_idx;
        }
    }
    int m_idx = 0;
    for (int64_t m : {1, 4, 8, 16}) {
        std::printf("one layer's 4 GEMMs, m=%2ld: cuBLASLt %.2f us, gemv %.2f us\n", long(m),
                    layer_us[0][m_idx], layer_us[1][m_idx]);
        ++m_idx;
    }
}
