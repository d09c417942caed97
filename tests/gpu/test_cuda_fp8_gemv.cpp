// The FP8 (block-scaled e4m3, W8A8) small-batch kernels against cpu::fp8_block_linear on random
// e4m3 weights (every byte but the NaN codes 0x7f / 0xff) and positive block scales:
//   fp8_gemv          m = 1..8, k from one block to 4096 with a short last group (1040), n with a
//                     last block of idle warps, bias or not, bf16 or f32 y; the quantization bit
//                     for bit (an identity weight makes y[t, i] = q[t, i] · s[t, i / 128] exactly)
//   fused forms       fp8_gemv_rms_norm against add_rms_norm then the CPU product of the rows the
//                     kernel normed (and bitwise against add_rms_norm + fp8_gemv where the normed
//                     bits agree); fp8_gemv_silu_mul bitwise against silu_mul + fp8_gemv
//   MoE               moe_gemv_gate_up_silu_fp8 / moe_gemv_down_combine_fp8 against a host
//                     composition of cpu::fp8_block_linear per choice (test_cuda_moe_gemv's cases
//                     and allowances), including Qwen3-30B-A3B's E 128, top-8, hidden 2048, inter
//                     768
// Tolerance: products of two e4m3 values are exact in fp32, so the GPU's sums differ from the
// CPU's only in order (and where the block scales multiply in): each result may be off by the
// summation error of both, bounded by (2^-13 + 2 (groups + 3) 2^-24) Σ|terms| (the tensor cores
// sum a block's FP8 products in fewer bits than fp32); a bf16 y adds
// one rounding (2^-8 relative). A second run gives the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "gpu_testing.h"
#include "kernels/cpu/fp8_linear.h"
#include "kernels/cuda/elementwise/silu_mul.h"
#include "kernels/cuda/gemm/fp8_gemv.h"
#include "kernels/cuda/moe/moe_gemv.h"
#include "kernels/cuda/norm/rms_norm.h"
#include "moe_gemv_testing.h"

using namespace miniinfer;
using gpu_testing::all_close;
using gpu_testing::bitwise_equal;
using gpu_testing::CapturedGraph;
using gpu_testing::random_bf16;

namespace {

constexpr double kBf16HalfUlp = 1.0 / 256;

int64_t groups_of(int64_t len) {
    return (len + cpu::kFp8Block - 1) / cpu::kFp8Block;
}

void sync_device() {
    MI_CUDA_CHECK(cudaDeviceSynchronize());
}

// e4m3 weights [rows, cols] (random bytes but the NaN codes) with their f32 block scales
// [ceil(rows / 128), ceil(cols / 128)] around 1 / sqrt(128 · cols), as host vectors and on the GPU.
struct Fp8Weights {
    std::vector<uint8_t> bytes;
    std::vector<float> scales;
    Tensor w, w_scale;  // device: kF8E4M3 [.., rows, cols], f32 [.., row blocks, col blocks]
};

Fp8Weights random_fp8(int64_t batch, int64_t rows, int64_t cols, std::mt19937& rng) {
    Fp8Weights f;
    f.bytes.resize(size_t(batch * rows * cols));
    for (size_t i = 0; i < f.bytes.size(); i += 4) {
        const uint32_t r = rng();
        for (size_t b = 0; b < 4 && i + b < f.bytes.size(); ++b) {
            const auto v = uint8_t(r >> (8 * b));
            f.bytes[i + b] = (v & 0x7f) == 0x7f ? uint8_t(v - 1) : v;  // no NaN
        }
    }
    f.scales.resize(size_t(batch * groups_of(rows) * groups_of(cols)));
    std::uniform_real_distribution<float> around(0.5f, 1.5f);
    const float base = 1.f / std::sqrt(128.f * float(cols));
    for (float& s : f.scales) s = around(rng) * base;
    // batch 1: a plain [rows, cols] weight
    Tensor w =
        Tensor::zeros(batch == 1 ? Shape{rows, cols} : Shape{batch, rows, cols}, DType::kF8E4M3);
    std::memcpy(w.raw(), f.bytes.data(), f.bytes.size());
    Tensor s = Tensor::zeros(batch == 1 ? Shape{groups_of(rows), groups_of(cols)}
                                        : Shape{batch, groups_of(rows), groups_of(cols)},
                             DType::kF32);
    std::memcpy(s.raw(), f.scales.data(), s.nbytes());
    f.w = cuda::to_device(w);
    f.w_scale = cuda::to_device(s);
    return f;
}

// y[m, n] = cpu::fp8_block_linear of x (f32), w and its scales (no bias), and for each element
// the allowed difference (2^-13 + 2 (groups + 3) 2^-24) Σ_i |q_i w_i| s_x s_w.
struct Fp8Reference {
    std::vector<float> y;
    std::vector<double> bound;
};

Fp8Reference fp8_reference(const float* x, int64_t m, int64_t k, const uint8_t* w,
                           const float* w_scale, int64_t n) {
    Fp8Reference ref;
    ref.y.resize(size_t(m * n));
    cpu::fp8_block_linear(x, m, k, w, w_scale, nullptr, n, ref.y.data());
    const int64_t groups = groups_of(k);
    std::vector<uint8_t> q(size_t(m * k));
    std::vector<float> s(size_t(m * groups));
    cpu::quantize_fp8_groups(x, m, k, q.data(), s.data());
    float widen[256];
    for (int v = 0; v < 256; ++v) widen[v] = e4m3_to_f32(uint8_t(v));
    // The tensor cores add a k block's FP8 products in fewer bits than fp32 (2^-13 of their
    // magnitude allowed, as test_cuda_fp8_gemm does), then fp32 across blocks.
    const double per_term = std::ldexp(1.0, -13) + 2.0 * double(groups + 3) * std::ldexp(1.0, -24);
    ref.bound.resize(ref.y.size());
    for (int64_t t = 0; t < m; ++t) {
        for (int64_t o = 0; o < n; ++o) {
            double total = 0;
            for (int64_t g = 0; g < groups; ++g) {
                double block = 0;
                for (int64_t i = g * cpu::kFp8Block; i < std::min(k, (g + 1) * cpu::kFp8Block); ++i)
                    block += std::fabs(double(widen[q[size_t(t * k + i)]]) * widen[w[o * k + i]]);
                total +=
                    block * s[size_t(t * groups + g)] * w_scale[(o / cpu::kFp8Block) * groups + g];
            }
            ref.bound[size_t(t * n + o)] = per_term * total;
        }
    }
    return ref;
}

std::vector<float> to_f32(const Tensor& bf16_host) {
    std::vector<float> out(size_t(bf16_host.numel()));
    copy_to_f32(bf16_host, out.data());
    return out;
}

// The GPU's y (bf16 or f32) against the reference plus bias (bf16 host tensor or null).
::testing::AssertionResult matches(const Tensor& dy, const Fp8Reference& ref, const Tensor* bias,
                                   int64_t n) {
    const bool bf16 = dy.dtype() == DType::kBF16;
    std::vector<double> want(ref.y.size()), bound = ref.bound;
    for (size_t i = 0; i < want.size(); ++i) {
        const double b = bias ? bf16_to_f32(bias->data<uint16_t>()[i % size_t(n)]) : 0.0;
        want[i] = double(ref.y[i]) + b;
        bound[i] += std::ldexp(std::fabs(want[i]), -24);  // the bias's own fp32 addition
    }
    return all_close(gpu_testing::to_doubles(dy), want,
                     {.atol = 1e-30, .rtol = bf16 ? kBf16HalfUlp : 0.0}, bound);
}

}  // namespace

// Every row count, k with one block, two, a short last group (1040 = 8 · 128 + 16) and up to
// 4096, n small (one block of idle warps) to wide, bias or not, bf16 and f32 y.
TEST(CudaFp8Gemv, MatchesCpuBlockLinear) {
    REQUIRE_GPU();
    std::mt19937 rng(51);
    for (int64_t k : {128, 256, 1040, 2048, 4096}) {
        for (int64_t n : {64, 200, 1024, 3072}) {
            const Fp8Weights w = random_fp8(1, n, k, rng);
            const Tensor bias = random_bf16({n}, rng, 1.f);
            const Tensor dbias = cuda::to_device(bias);
            for (int64_t m = 1; m <= cuda::kFp8GemvMaxRows; ++m) {
                const Tensor x = random_bf16({m, k}, rng, 1.f);
                const Tensor dx = cuda::to_device(x);
                const std::vector<float> xf = to_f32(x);
                const Fp8Reference ref =
                    fp8_reference(xf.data(), m, k, w.bytes.data(), w.scales.data(), n);
                for (DType out : {DType::kBF16, DType::kF32}) {
                    for (bool with_bias : {false, true}) {
                        SCOPED_TRACE(::testing::Message()
                                     << "m " << m << " k " << k << " n " << n << " bias "
                                     << with_bias << " y " << dtype_name(out));
                        Tensor dy = cuda::device_tensor({m, n}, out);
                        MI_CUDA_CHECK(cudaMemset(dy.raw(), 0xff, dy.nbytes()));  // NaN
                        const Tensor* b = with_bias ? &dbias : nullptr;
                        ASSERT_TRUE(cuda::fp8_gemv_supported(dx, w.w, w.w_scale, b, dy));
                        cuda::fp8_gemv(dx, w.w, w.w_scale, b, dy, nullptr);
                        sync_device();
                        EXPECT_TRUE(matches(dy, ref, with_bias ? &bias : nullptr, n));
                        if (m == 3 && with_bias) {  // a second run: the same bits
                            Tensor again = cuda::device_tensor({m, n}, out);
                            cuda::fp8_gemv(dx, w.w, w.w_scale, b, again, nullptr);
                            sync_device();
                            EXPECT_TRUE(bitwise_equal(again, dy));
                        }
                    }
                }
                if (::testing::Test::HasFatalFailure()) return;
            }
        }
    }
}

// The quantization bit for bit: with w the identity (e4m3 1.0 = 0x38 on the diagonal, scales 1)
// every y[t, i] is the single product q[t, i] · s[t, i / 128], rounded once on both sides, so an
// f32 y equals the CPU's exactly. x spans 2^-14 .. 2^6 (values that quantize to e4m3 subnormals,
// to zero, and ties), with an all-zero group, a lone outlier and a short last group.
TEST(CudaFp8Gemv, QuantizationMatchesCpuBits) {
    REQUIRE_GPU();
    std::mt19937 rng(52);
    for (int64_t k : {1040, 256}) {
        const int64_t m = 8, n = k;
        std::vector<uint8_t> eye(size_t(n * k), 0);
        for (int64_t i = 0; i < k; ++i) eye[size_t(i * k + i)] = 0x38;
        const std::vector<float> ones(size_t(groups_of(n) * groups_of(k)), 1.f);
        Tensor w = Tensor::zeros({n, k}, DType::kF8E4M3);
        std::memcpy(w.raw(), eye.data(), eye.size());
        Tensor s = Tensor::zeros({groups_of(n), groups_of(k)}, DType::kF32);
        std::memcpy(s.raw(), ones.data(), s.nbytes());
        const Tensor dw = cuda::to_device(w), ds = cuda::to_device(s);

        Tensor x = Tensor::zeros({m, k}, DType::kBF16);
        std::normal_distribution<float> normal(0.f, 1.f);
        std::uniform_int_distribution<int> exponent(-14, 6);
        for (int64_t i = 0; i < m * k; ++i)
            x.data<uint16_t>()[i] = f32_to_bf16(std::ldexp(normal(rng), exponent(rng)));
        for (int64_t i = 128; i < 256; ++i) x.data<uint16_t>()[i] = f32_to_bf16(0.f);  // row 0
        x.data<uint16_t>()[k + 5] = f32_to_bf16(-3.0e4f);                              // row 1
        const Tensor dx = cuda::to_device(x);
        const std::vector<float> xf = to_f32(x);
        std::vector<float> want(size_t(m * n));
        cpu::fp8_block_linear(xf.data(), m, k, eye.data(), ones.data(), nullptr, n, want.data());

        Tensor dy = cuda::device_tensor({m, n}, DType::kF32);
        cuda::fp8_gemv(dx, dw, ds, nullptr, dy, nullptr);
        sync_device();
        const Tensor y = cuda::to_host(dy);
        EXPECT_TRUE(bitwise_equal(std::span<const float>(y.data<float>(), size_t(m * n)),
                                  std::span<const float>(want)))
            << "k " << k;
    }
}

// fp8_gemv_rms_norm: residual_out bitwise as add_rms_norm's, normed within two bf16 ulps of
// add_rms_norm's (only the order of the fp32 sum of squares differs: 1 / rms may round apart, then
// two roundings), y against the CPU product
// of the kernel's own normed rows, and the bits of add_rms_norm + fp8_gemv where the normed rows
// agree bitwise.
TEST(CudaFp8Gemv, RmsNormInsideMatchesNormThenGemv) {
    REQUIRE_GPU();
    std::mt19937 rng(53);
    for (int64_t m : {1, 2, 3, 5, 8}) {
        for (int64_t k : {1024, 1040}) {
            for (int64_t n : {5, 130, 1029}) {
                for (bool with_delta : {true, false}) {
                    SCOPED_TRACE(::testing::Message() << "m " << m << " k " << k << " n " << n
                                                      << " delta " << with_delta);
                    const Tensor res = random_bf16({m, k}, rng, 2.f);
                    const Tensor delta = random_bf16({m, k}, rng, 1.f);
                    const Tensor nw = random_bf16({k}, rng, 1.f);
                    const Fp8Weights w = random_fp8(1, n, k, rng);
                    const Tensor bias = random_bf16({n}, rng, 1.f);
                    const bool with_bias = n == 130;
                    const Tensor dres = cuda::to_device(res), ddelta = cuda::to_device(delta);
                    const Tensor dnw = cuda::to_device(nw), dbias = cuda::to_device(bias);
                    Tensor dres_out = cuda::device_tensor({m, k}, DType::kBF16);
                    Tensor dnormed = cuda::device_tensor({m, k}, DType::kBF16);
                    Tensor dy = cuda::device_tensor({m, n}, DType::kBF16);
                    const cuda::AddRmsNorm in{.delta = with_delta ? &ddelta : nullptr,
                                              .residual = &dres,
                                              .residual_out = &dres_out,
                                              .weight = &dnw,
                                              .eps = 1e-6f,
                                              .normed = &dnormed};
                    const Tensor* b = with_bias ? &dbias : nullptr;
                    ASSERT_TRUE(cuda::fp8_gemv_rms_norm_supported(in, w.w, w.w_scale, b, dy));
                    cuda::fp8_gemv_rms_norm(in, w.w, w.w_scale, b, dy, nullptr);

                    Tensor dres_out2 = cuda::device_tensor({m, k}, DType::kBF16);
                    Tensor dnormed2 = cuda::device_tensor({m, k}, DType::kBF16);
                    cuda::AddRmsNorm two = in;
                    two.residual_out = &dres_out2;
                    two.normed = &dnormed2;
                    cuda::add_rms_norm(two, nullptr);
                    Tensor dy2 = cuda::device_tensor({m, n}, DType::kBF16);
                    cuda::fp8_gemv(dnormed2, w.w, w.w_scale, b, dy2, nullptr);
                    sync_device();
                    if (with_delta) {
                        EXPECT_TRUE(bitwise_equal(dres_out, dres_out2));
                    }
                    const Tensor normed = cuda::to_host(dnormed), normed2 = cuda::to_host(dnormed2);
                    EXPECT_TRUE(all_close(normed, normed2, {.atol = 1e-30, .rtol = 1.0 / 64}));
                    const std::vector<float> xf = to_f32(normed);
                    const Fp8Reference ref =
                        fp8_reference(xf.data(), m, k, w.bytes.data(), w.scales.data(), n);
                    EXPECT_TRUE(matches(dy, ref, with_bias ? &bias : nullptr, n));
                    if (std::memcmp(normed.raw(), normed2.raw(), normed.nbytes()) == 0) {
                        EXPECT_TRUE(bitwise_equal(dy, dy2));
                    }
                }
            }
        }
    }
}

// fp8_gemv_silu_mul gives the bits of silu_mul then fp8_gemv (the same x bits, quantized and
// multiplied the same way), for bf16 and f32 y.
TEST(CudaFp8Gemv, SiluMulInsideGivesTheBitsOfTwoKernels) {
    REQUIRE_GPU();
    std::mt19937 rng(54);
    for (int64_t m : {1, 2, 4, 7, 8}) {
        for (int64_t k : {1024, 3072, 1040}) {
            const int64_t n = k == 3072 ? 1024 : 257;
            SCOPED_TRACE(::testing::Message() << "m " << m << " k " << k);
            const Tensor gate_up = cuda::to_device(random_bf16({m, 2 * k}, rng, 2.f));
            const Fp8Weights w = random_fp8(1, n, k, rng);
            const Tensor bias = cuda::to_device(random_bf16({n}, rng, 1.f));
            Tensor act = cuda::device_tensor({m, k}, DType::kBF16);
            cuda::silu_mul(gate_up, act, nullptr);
            for (DType out : {DType::kBF16, DType::kF32}) {
                Tensor y_two = cuda::device_tensor({m, n}, out);
                Tensor y_fused = cuda::device_tensor({m, n}, out);
                cuda::fp8_gemv(act, w.w, w.w_scale, &bias, y_two, nullptr);
                ASSERT_TRUE(
                    cuda::fp8_gemv_silu_mul_supported(gate_up, w.w, w.w_scale, &bias, y_fused));
                cuda::fp8_gemv_silu_mul(gate_up, w.w, w.w_scale, &bias, y_fused, nullptr);
                sync_device();
                EXPECT_TRUE(bitwise_equal(y_fused, y_two)) << dtype_name(out);
            }
        }
    }
}

// What the callers rely on to fall back to the grouped FP8 GEMM.
TEST(CudaFp8Gemv, SupportedOperands) {
    REQUIRE_GPU();
    auto check = [](int64_t m, int64_t n, int64_t k, DType w_type, int64_t scale_rows) {
        const Tensor x = cuda::device_tensor({m, k}, DType::kBF16);
        const Tensor w = cuda::device_tensor({n, k}, w_type);
        const Tensor s = cuda::device_tensor({scale_rows, groups_of(k)}, DType::kF32);
        const Tensor y = cuda::device_tensor({m, n}, DType::kBF16);
        return cuda::fp8_gemv_supported(x, w, s, nullptr, y);
    };
    EXPECT_TRUE(check(1, 256, 1024, DType::kF8E4M3, 2));
    EXPECT_FALSE(check(1, 256, 1024, DType::kBF16, 2)) << "bf16 weights";
    EXPECT_FALSE(check(1, 256, 1024, DType::kF8E4M3, 3)) << "scale rows";
    EXPECT_FALSE(check(1, 256, 1032, DType::kF8E4M3, 2)) << "k % 16";
    EXPECT_FALSE(check(9, 256, 1024, DType::kF8E4M3, 2)) << "9 rows";
    EXPECT_TRUE(check(8, 256, 12288, DType::kF8E4M3, 2)) << "Qwen3-8B down, 8 rows";
    EXPECT_TRUE(check(4, 256, 25600, DType::kF8E4M3, 2)) << "Qwen3-32B down, 4 rows";
    EXPECT_FALSE(check(5, 256, 25600, DType::kF8E4M3, 2)) << "past shared memory";

    const Tensor gu = cuda::device_tensor({4, 2 * 16, 64}, DType::kF8E4M3);
    const Tensor down = cuda::device_tensor({4, 64, 16}, DType::kF8E4M3);
    EXPECT_TRUE(cuda::moe_gemv_fp8_supported(gu, down));
    const Tensor gu8 = cuda::device_tensor({4, 2 * 8, 64}, DType::kF8E4M3);
    const Tensor down8 = cuda::device_tensor({4, 64, 8}, DType::kF8E4M3);  // inter % 16
    EXPECT_FALSE(cuda::moe_gemv_fp8_supported(gu8, down8));
    const Tensor gu_bf16 = cuda::device_tensor({4, 2 * 16, 64}, DType::kBF16);
    EXPECT_FALSE(cuda::moe_gemv_fp8_supported(gu_bf16, down));
}

// Captured into a CUDA graph, fp8_gemv records without running and replays to the eager bits.
TEST(CudaFp8Gemv, GraphCaptureReplays) {
    REQUIRE_GPU();
    std::mt19937 rng(55);
    const int64_t m = 3, n = 777, k = 2048;
    const Fp8Weights w = random_fp8(1, n, k, rng);
    const Tensor dx = cuda::to_device(random_bf16({m, k}, rng, 1.f));
    Tensor dy = cuda::device_tensor({m, n}, DType::kBF16);
    cuda::Stream stream;
    cuda::fp8_gemv(dx, w.w, w.w_scale, nullptr, dy, stream.get());
    stream.synchronize();
    const Tensor eager = cuda::to_host(dy);
    MI_CUDA_CHECK(cudaMemset(dy.raw(), 0, dy.nbytes()));
    sync_device();
    const CapturedGraph graph(
        stream.get(), [&] { cuda::fp8_gemv(dx, w.w, w.w_scale, nullptr, dy, stream.get()); });
    const Tensor before = cuda::to_host(dy);
    EXPECT_TRUE(std::all_of(before.data<uint16_t>(), before.data<uint16_t>() + m * n,
                            [](uint16_t v) { return v == 0; }))
        << "capture must not run the kernel";
    graph.replay(stream.get());
    stream.synchronize();
    EXPECT_TRUE(bitwise_equal(dy, eager));
}

// ---------------------------------------------------------------------------------------------
// MoE

namespace {

using namespace moe_gemv_testing;

struct Experts {
    int64_t num_experts, hidden, inter;
    Fp8Weights gate_up, down;  // [E, 2 · inter, hidden], [E, hidden, inter]
};

Experts random_experts(int64_t num_experts, int64_t hidden, int64_t inter, std::mt19937& rng) {
    return {num_experts, hidden, inter, random_fp8(num_experts, 2 * inter, hidden, rng),
            random_fp8(num_experts, hidden, inter, rng)};
}

void run_moe_case(const Experts& ex, int64_t top_k, int64_t n, int kind, std::mt19937& rng) {
    const int64_t H = ex.hidden, I = ex.inter, pairs = n * top_k;
    SCOPED_TRACE(::testing::Message() << "E " << ex.num_experts << " k " << top_k << " n " << n
                                      << " hidden " << H << " inter " << I << " kind " << kind);
    const Tensor x = random_bf16({n, H}, rng, 1.f);
    const std::vector<int32_t> ids = choose_experts(kind, n, top_k, ex.num_experts, rng);
    std::vector<float> weights(static_cast<size_t>(pairs));
    std::uniform_real_distribution<float> unit(0.f, 1.f);
    for (float& w : weights) w = unit(rng);

    const Tensor dx = cuda::to_device(x);
    Tensor dids = cuda::device_tensor({n, top_k}, DType::kI32);
    Tensor dweights = cuda::device_tensor({n, top_k}, DType::kF32);
    MI_CUDA_CHECK(cudaMemcpy(dids.raw(), ids.data(), dids.nbytes(), cudaMemcpyHostToDevice));
    MI_CUDA_CHECK(
        cudaMemcpy(dweights.raw(), weights.data(), dweights.nbytes(), cudaMemcpyHostToDevice));
    const int64_t act_rows = pairs + 3;  // rows past n · k must stay as they were
    Tensor act = cuda::device_tensor({act_rows, I}, DType::kBF16);
    MI_CUDA_CHECK(cudaMemset(act.raw(), 0xab, act.nbytes()));
    Tensor out = cuda::device_tensor({n, H}, DType::kBF16);
    Tensor again = cuda::device_tensor({n, H}, DType::kBF16);
    ASSERT_TRUE(cuda::moe_gemv_fp8_supported(ex.gate_up.w, ex.down.w));
    cuda::moe_gemv_gate_up_silu_fp8(dx, dids, ex.gate_up.w, ex.gate_up.w_scale, act, nullptr);
    cuda::moe_gemv_down_combine_fp8(act, dids, dweights, ex.down.w, ex.down.w_scale, out, nullptr);
    cuda::moe_gemv_down_combine_fp8(act, dids, dweights, ex.down.w, ex.down.w_scale, again,
                                    nullptr);
    sync_device();
    ASSERT_TRUE(bitwise_equal(again, out)) << "a second run differs";

    const Tensor act_host = gpu_testing::download(act);
    const auto* act_bits = act_host.data<uint16_t>();
    for (int64_t i = pairs * I; i < act_rows * I; ++i)
        ASSERT_EQ(act_bits[i], kPoison) << "act written past n * k rows at element " << i;

    // gate_up: g and u from the CPU's FP8 product of the token's row with the expert's rows, each
    // within the fp32 difference plus one bf16 ulp (the GPU's sum may round to the neighbour).
    const std::vector<float> xf = to_f32(x);
    const int64_t gu_scales = groups_of(2 * I) * groups_of(H);
    std::vector<double> act_ref(size_t(pairs * I)), act_extra(act_ref.size());
    for (int64_t p = 0; p < pairs; ++p) {
        const int64_t t = p / top_k, e = ids[size_t(p)];
        const Fp8Reference r =
            fp8_reference(xf.data() + t * H, 1, H, ex.gate_up.bytes.data() + e * 2 * I * H,
                          ex.gate_up.scales.data() + e * gu_scales, 2 * I);
        for (int64_t i = 0; i < I; ++i) {
            const double g = bf16_round(r.y[size_t(i)]), u = bf16_round(r.y[size_t(I + i)]);
            const double dg = std::ldexp(std::fabs(g), -7) + r.bound[size_t(i)];
            const double du = std::ldexp(std::fabs(u), -7) + r.bound[size_t(I + i)];
            act_ref[size_t(p * I + i)] = bf16_round(silu(g) * u);
            act_extra[size_t(p * I + i)] =  // silu' is at most 1.1 in magnitude
                1.1 * std::fabs(u) * dg + std::fabs(silu(g)) * du + 1.1 * dg * du;
        }
    }
    std::vector<double> act_got = gpu_testing::to_doubles(act);
    act_got.resize(act_ref.size());
    ASSERT_TRUE(all_close(act_got, act_ref, {.atol = 0, .rtol = kBf16HalfUlp}, act_extra));

    // down + combine, from the GPU's act: each choice's bf16 within one ulp and the fp32
    // difference, weighted, plus the fp32 sum's error.
    std::vector<float> act_f(size_t(pairs * I));
    for (int64_t i = 0; i < pairs * I; ++i) act_f[size_t(i)] = bf16_to_f32(act_bits[i]);
    const int64_t down_scales = groups_of(H) * groups_of(I);
    std::vector<double> out_ref(size_t(n * H), 0.0), out_extra(out_ref.size(), 0.0),
        magnitude(out_ref.size(), 0.0);
    for (int64_t p = 0; p < pairs; ++p) {
        const int64_t t = p / top_k, e = ids[size_t(p)];
        const Fp8Reference r =
            fp8_reference(act_f.data() + p * I, 1, I, ex.down.bytes.data() + e * H * I,
                          ex.down.scales.data() + e * down_scales, H);
        const double w = weights[size_t(p)];
        for (int64_t col = 0; col < H; ++col) {
            const double d = bf16_round(r.y[size_t(col)]);
            out_ref[size_t(t * H + col)] += w * d;
            magnitude[size_t(t * H + col)] += std::fabs(w * d);
            out_extra[size_t(t * H + col)] +=
                w * (std::ldexp(std::fabs(d), -7) + r.bound[size_t(col)]);
        }
    }
    for (size_t i = 0; i < out_extra.size(); ++i)
        out_extra[i] += double(top_k) * std::ldexp(magnitude[i], -24);
    ASSERT_TRUE(all_close(gpu_testing::to_doubles(out), out_ref, {.atol = 0, .rtol = kBf16HalfUlp},
                          out_extra));
}

}  // namespace

TEST(CudaMoeGemvFp8, MatchesReferenceAcrossExpertsChoicesAndTokens) {
    REQUIRE_GPU();
    std::mt19937 rng(56);
    for (int64_t num_experts : {8, 16, 64, 128}) {
        const Experts ex = random_experts(num_experts, 64, 32, rng);
        for (int64_t top_k : {1, 2, 4, 8}) {
            for (int64_t n : {1, 2, 3, 4, 9}) {
                for (int kind : {0, 1}) {
                    run_moe_case(ex, top_k, n, kind, rng);
                    if (::testing::Test::HasFatalFailure()) return;
                }
            }
        }
    }
}

// Sizes that are odd multiples of 16 (a short last group in both projections), k not a power of
// two, and Qwen3-30B-A3B's experts (E 128, top-8, hidden 2048, inter 768) at 1 to 4 tokens.
TEST(CudaMoeGemvFp8, OddSizesAndTheQwen3MoE30BShapes) {
    REQUIRE_GPU();
    std::mt19937 rng(57);
    {
        const Experts ex = random_experts(16, 1040, 272, rng);
        for (int kind : {0, 1}) run_moe_case(ex, 4, 3, kind, rng);
    }
    run_moe_case(random_experts(128, 272, 48, rng), 1, 5, 1, rng);
    run_moe_case(random_experts(16, 144, 32, rng), 3, 2, 0, rng);
    if (::testing::Test::HasFatalFailure()) return;
    const Experts qwen = random_experts(128, 2048, 768, rng);
    for (int64_t n : {1, 2, 3, 4}) {
        run_moe_case(qwen, 8, n, 0, rng);
        if (::testing::Test::HasFatalFailure()) return;
    }
}
