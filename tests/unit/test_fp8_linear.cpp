// The block-scaled FP8 linear (kernels/cpu/fp8_linear.h) against plain formulas: activation
// quantization per 128-group, the product in double from the same e4m3 values and scales, the
// weight-only dequantization, and the e4m3 conversions the loader uses (convert_elements).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/cpu/fp8_linear.h"
#include "layers/layers.h"

using namespace miniinfer;

namespace {

constexpr int64_t kBlock = cpu::kFp8Block;

int64_t blocks(int64_t n) {
    return (n + kBlock - 1) / kBlock;
}

std::vector<float> randn(size_t n, std::mt19937& rng, float scale = 1.f) {
    std::normal_distribution<float> d(0.f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

// Random e4m3 weights (codes of N(0, 1) values) and positive block scales.
struct Fp8Weight {
    std::vector<uint8_t> w;
    std::vector<float> scale;
};
Fp8Weight random_weight(int64_t out, int64_t in, std::mt19937& rng) {
    Fp8Weight f;
    for (float v : randn(size_t(out * in), rng)) f.w.push_back(f32_to_e4m3(v));
    std::uniform_real_distribution<float> u(0.5f, 2.f);
    for (int64_t i = 0; i < blocks(out) * blocks(in); ++i)
        f.scale.push_back(u(rng) / std::sqrt(float(in)));
    return f;
}

}  // namespace

// The loader's conversions: e4m3 -> e4m3 is a copy, e4m3 -> f32 exact, f32 -> e4m3 the nearest
// code (f32_to_e4m3, tested against a search in test_dtype.cpp).
TEST(Fp8, ConvertElementsRoundTrips) {
    std::vector<uint8_t> codes;
    for (int c = 0; c < 256; ++c)
        if ((c & 0x7f) != 0x7f) codes.push_back(uint8_t(c));  // NaN has no round trip to compare
    const int64_t n = int64_t(codes.size());
    std::vector<float> wide(codes.size());
    std::vector<uint8_t> back(codes.size()), copy(codes.size());
    convert_elements(codes.data(), DType::kF8E4M3, wide.data(), DType::kF32, n);
    convert_elements(wide.data(), DType::kF32, back.data(), DType::kF8E4M3, n);
    convert_elements(codes.data(), DType::kF8E4M3, copy.data(), DType::kF8E4M3, n);
    for (size_t i = 0; i < codes.size(); ++i) {
        EXPECT_EQ(wide[i], e4m3_to_f32(codes[i])) << int(codes[i]);
        EXPECT_EQ(back[i], codes[i]) << int(codes[i]);
        EXPECT_EQ(copy[i], codes[i]);
    }
    EXPECT_EQ(dtype_size(DType::kF8E4M3), 1u);
    EXPECT_EQ(dtype_name(DType::kF8E4M3), "f8e4m3");
}

// Per token and 128-group: s = amax / 448 and q = e4m3(x / s); the group's largest value becomes
// +-448, an all-zero group zeros with scale 0, a short last group its own amax.
TEST(Fp8, ActivationGroupsQuantizeByTheirAmax) {
    std::mt19937 rng(5);
    const int64_t n = 3, in = 300;  // groups of 128, 128, 44
    std::vector<float> x = randn(size_t(n * in), rng, 3.f);
    std::fill(x.begin() + in + 128, x.begin() + in + 256, 0.f);  // token 1, group 1: zeros
    std::vector<uint8_t> q(size_t(n * in));
    std::vector<float> s(size_t(n * blocks(in)));
    cpu::quantize_fp8_groups(x.data(), n, in, q.data(), s.data());
    for (int64_t t = 0; t < n; ++t)
        for (int64_t g = 0; g < blocks(in); ++g) {
            const int64_t lo = g * kBlock, hi = std::min(in, lo + kBlock);
            float amax = 0.f;
            for (int64_t i = lo; i < hi; ++i)
                amax = std::max(amax, std::fabs(x[size_t(t * in + i)]));
            const float want_s = amax / 448.f;
            ASSERT_EQ(s[size_t(t * blocks(in) + g)], want_s) << t << " " << g;
            float qmax = 0.f;
            for (int64_t i = lo; i < hi; ++i) {
                const float v = x[size_t(t * in + i)];
                const uint8_t want = want_s > 0.f ? f32_to_e4m3(v / want_s) : uint8_t(0);
                ASSERT_EQ(q[size_t(t * in + i)] & 0x7f, want & 0x7f) << t << " " << i;
                qmax = std::max(qmax, std::fabs(e4m3_to_f32(q[size_t(t * in + i)])));
            }
            EXPECT_EQ(qmax, amax > 0.f ? 448.f : 0.f) << t << " " << g;
        }
}

// y = sum over inner blocks of s_x s_w (sum of e4m3 products): against the same sum in double
// over the same quantized values, at shapes with short last blocks in both dimensions, with a
// bias, and through Linear (an e4m3 weight with its scales picks this path).
TEST(Fp8, BlockLinearMatchesDoubleReference) {
    std::mt19937 rng(7);
    for (auto [n, in, out] : {std::tuple{1, 128, 128}, {5, 300, 200}, {7, 256, 384}, {2, 40, 9}}) {
        const std::vector<float> x = randn(size_t(n * in), rng, 2.f),
                                 bias = randn(size_t(out), rng);
        const Fp8Weight w = random_weight(out, in, rng);
        std::vector<float> y(size_t(n * out));
        cpu::fp8_block_linear(x.data(), n, in, w.w.data(), w.scale.data(), bias.data(), out,
                              y.data());
        std::vector<uint8_t> q(size_t(n * in));
        std::vector<float> s(size_t(n * blocks(in)));
        cpu::quantize_fp8_groups(x.data(), n, in, q.data(), s.data());
        double worst = 0;
        for (int64_t t = 0; t < n; ++t)
            for (int64_t o = 0; o < out; ++o) {
                double want = bias[size_t(o)], magnitude = std::fabs(want);
                for (int64_t i = 0; i < in; ++i) {
                    const double term =
                        double(e4m3_to_f32(q[size_t(t * in + i)])) *
                        double(e4m3_to_f32(w.w[size_t(o * in + i)])) *
                        double(s[size_t(t * blocks(in) + i / kBlock)]) *
                        double(w.scale[size_t((o / kBlock) * blocks(in) + i / kBlock)]);
                    want += term;
                    magnitude += std::fabs(term);
                }
                const double err = std::fabs(double(y[size_t(t * out + o)]) - want);
                worst = std::max(worst, err / magnitude);
                ASSERT_LE(err, 1e-5 * magnitude)
                    << n << "x" << in << "x" << out << " t " << t << " o " << o;
            }
        // The same through the layer.
        Tensor weight = Tensor::zeros({out, in}, DType::kF8E4M3);
        std::copy(w.w.begin(), w.w.end(), weight.data<uint8_t>());
        Tensor scale = Tensor::zeros({blocks(out), blocks(in)}, DType::kF32);
        std::copy(w.scale.begin(), w.scale.end(), scale.data<float>());
        Tensor xt = Tensor::zeros({n, in}, DType::kF32), bt = Tensor::zeros({out}, DType::kF32);
        std::copy(x.begin(), x.end(), xt.data<float>());
        std::copy(bias.begin(), bias.end(), bt.data<float>());
        const Tensor yl = Linear{weight, bt, scale}.forward(xt);
        for (int64_t i = 0; i < n * out; ++i) ASSERT_EQ(yl.data<float>()[i], y[size_t(i)]);
        std::printf("[ fp8 linear %dx%dx%d: worst error %.1e of the sum of |terms| ]\n", n, in, out,
                    worst);
    }
}

// Weight-only: every element is its e4m3 value times its block's scale, exactly; a linear on
// those weights differs from the W8A8 one only by the activations' rounding (e4m3: 3 mantissa
// bits, a relative step of 1/16 at most).
TEST(Fp8, DequantizedWeightsAreValueTimesScale) {
    std::mt19937 rng(11);
    const int64_t n = 4, in = 300, out = 200;
    const Fp8Weight w = random_weight(out, in, rng);
    std::vector<float> deq(size_t(out * in));
    cpu::dequantize_fp8_blocks(w.w.data(), w.scale.data(), out, in, deq.data());
    for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i)
            ASSERT_EQ(deq[size_t(o * in + i)],
                      e4m3_to_f32(w.w[size_t(o * in + i)]) *
                          w.scale[size_t((o / kBlock) * blocks(in) + i / kBlock)]);
    const std::vector<float> x = randn(size_t(n * in), rng);
    std::vector<float> exact(size_t(n * out)), w8a8(size_t(n * out));
    Tensor wt = Tensor::zeros({out, in}, DType::kF32), xt = Tensor::zeros({n, in}, DType::kF32);
    std::copy(deq.begin(), deq.end(), wt.data<float>());
    std::copy(x.begin(), x.end(), xt.data<float>());
    const Tensor y = Linear{wt, Tensor()}.forward(xt);
    cpu::fp8_block_linear(x.data(), n, in, w.w.data(), w.scale.data(), nullptr, out, w8a8.data());
    for (int64_t t = 0; t < n; ++t)
        for (int64_t o = 0; o < out; ++o) {
            double bound = 0;
            for (int64_t i = 0; i < in; ++i)
                bound += std::fabs(double(x[size_t(t * in + i)]) * deq[size_t(o * in + i)]);
            EXPECT_LE(std::fabs(y.data<float>()[t * out + o] - w8a8[size_t(t * out + o)]),
                      bound / 16)
                << t << " " << o;
        }
}

// A weight quantized per 128 × 128 block: each block's scale is its amax / 448, and every value
// comes back within e4m3's half step (2^-4 relative, or 2^-9 of the scale among subnormals).
TEST(Fp8, BlockQuantizationInvertsDequantization) {
    std::mt19937 rng(12);
    const int64_t out = 200, in = 300;
    std::vector<float> w = randn(size_t(out * in), rng, 0.05f);
    for (int64_t i = 0; i < in; ++i) w[size_t(150 * in + i)] = 0.f;  // zeros come back zeros
    std::vector<uint8_t> q(w.size());
    std::vector<float> scales(size_t(blocks(out) * blocks(in))), back(w.size());
    cpu::quantize_fp8_blocks(w.data(), out, in, q.data(), scales.data());
    cpu::dequantize_fp8_blocks(q.data(), scales.data(), out, in, back.data());
    for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i) {
            const float s = scales[size_t((o / kBlock) * blocks(in) + i / kBlock)];
            const float v = w[size_t(o * in + i)];
            EXPECT_LE(std::fabs(back[size_t(o * in + i)] - v), std::max(std::fabs(v) / 16, s / 512))
                << o << " " << i;
        }
    for (size_t b = 0; b < scales.size(); ++b) {
        const int64_t r0 = int64_t(b) / blocks(in) * kBlock, c0 = int64_t(b) % blocks(in) * kBlock;
        float amax = 0.f;
        for (int64_t r = r0; r < std::min(out, r0 + kBlock); ++r)
            for (int64_t c = c0; c < std::min(in, c0 + kBlock); ++c)
                amax = std::max(amax, std::fabs(w[size_t(r * in + c)]));
        EXPECT_EQ(scales[b], amax / 448.f) << b;
    }
}
