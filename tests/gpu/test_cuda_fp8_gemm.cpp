// The block-scaled FP8 activation quantization and GEMMs (kernels/cuda/elementwise/fp8_quantize.h,
// kernels/cuda/gemm/fp8_gemm.h) against the CPU reference (kernels/cpu/fp8_linear.h):
//   quantize      bit for bit: every e4m3 byte and every group scale, k with and without a short
//                 last group; the SiLU·mul form equals silu_mul then fp8_quantize, rows_used kept
//   GEMMs         y against cpu::fp8_block_linear on the same quantized activations: products of
//                 two e4m3 are exact, so the difference is the order of the fp32 sums, the tensor
//                 cores' narrower accumulation inside a k block (kAccumulationError of Σ|terms|)
//                 and y's bf16 rounding (2^-8 relative)
// Shapes: tails in n (multiples of 8) and k (multiples of 16), 1 to 4,096 rows, both row tiles,
// the MoE's gathered and permuted rows with padding, and Qwen3-30B-A3B's expert shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "gpu_testing.h"
#include "kernels/cpu/fp8_linear.h"
#include "kernels/cuda/elementwise/fp8_quantize.h"
#include "kernels/cuda/elementwise/silu_mul.h"
#include "kernels/cuda/gemm/fp8_gemm.h"

using namespace miniinfer;
using gpu_testing::all_close;
using gpu_testing::random_bf16;

namespace {

int64_t blocks(int64_t v) {
    return (v + 127) / 128;
}

std::vector<float> to_f32(const Tensor& host_bf16) {
    std::vector<float> out(size_t(host_bf16.numel()));
    for (int64_t i = 0; i < host_bf16.numel(); ++i)
        out[size_t(i)] = bf16_to_f32(host_bf16.data<uint16_t>()[i]);
    return out;
}

// Host e4m3 weights: codes drawn uniformly from those of magnitude below 4 (exponent field up to
// 8: 72 of each sign; four a draw, so the 30B-A3B's 400M expert weights take a second); scales
// N(c, (c / 10)²), c = 1 / sqrt(128 k).
struct Fp8Weight {
    Tensor w, scale;  // host
};
Fp8Weight random_fp8_weight(int64_t experts, int64_t n, int64_t k, std::mt19937& rng) {
    Fp8Weight f{Tensor::zeros({experts, n, k}, DType::kF8E4M3),
                Tensor::zeros({experts, blocks(n), blocks(k)}, DType::kF32)};
    auto* w = static_cast<uint8_t*>(f.w.raw());
    for (int64_t i = 0; i < f.w.numel(); i += 4) {
        const uint32_t bits = rng();
        for (int64_t j = 0; j < 4 && i + j < f.w.numel(); ++j) {
            const uint32_t b = (bits >> (8 * j)) & 0xffu;
            w[i + j] = uint8_t((b & 0x80u) | ((b & 0x7fu) % 72u));
        }
    }
    const float c = 1.f / std::sqrt(128.f * float(k));
    std::normal_distribution<float> s(c, c / 10);
    for (int64_t i = 0; i < f.scale.numel(); ++i) f.scale.data<float>()[i] = std::fabs(s(rng));
    return f;
}

// y = fp8_block_linear(x, w) and its Σ|terms| (the same with |x| and |w|: quantization is
// symmetric), for the tolerance.
struct Reference {
    std::vector<float> y, abs_sum;
};
Reference reference(const std::vector<float>& x, int64_t m, int64_t k, const uint8_t* w,
                    const float* w_scale, const float* bias, int64_t n) {
    Reference r{std::vector<float>(size_t(m * n)), std::vector<float>(size_t(m * n))};
    cpu::fp8_block_linear(x.data(), m, k, w, w_scale, bias, n, r.y.data());
    std::vector<float> ax(x.size());
    for (size_t i = 0; i < x.size(); ++i) ax[i] = std::fabs(x[i]);
    std::vector<uint8_t> aw(size_t(n * k));
    for (size_t i = 0; i < aw.size(); ++i) aw[i] = w[i] & 0x7f;
    cpu::fp8_block_linear(ax.data(), m, k, aw.data(), w_scale, nullptr, n, r.abs_sum.data());
    return r;
}

// The tensor cores sum a k block's e4m3 products in about 13 bits, truncating, so the errors add
// up one way: 2^-11 of Σ|terms| is twice the worst measured on an H100
// (bench/history/session-36.md, call 3).
const double kAccumulationError = std::ldexp(1.0, -11);

::testing::AssertionResult close_to(const Tensor& y_device, const Reference& r) {
    const std::vector<double> got = gpu_testing::to_doubles(y_device);
    std::vector<double> ref(r.y.begin(), r.y.end()), extra(r.y.size());
    for (size_t i = 0; i < extra.size(); ++i) extra[i] = r.abs_sum[i] * kAccumulationError;
    return all_close(got, ref, {.atol = 1e-30, .rtol = std::ldexp(1.0, -8)}, extra);
}

struct Quantized {
    Tensor q, scales;  // device
};
Quantized quantize(const Tensor& x_device, int64_t m, int64_t k, cudaStream_t st) {
    Quantized out{cuda::device_tensor({m, k}, DType::kF8E4M3),
                  cuda::device_tensor({m, blocks(k)}, DType::kF32)};
    cuda::fp8_quantize(x_device, out.q, out.scales, st);
    return out;
}

}  // namespace

TEST(CudaFp8Quantize, MatchesCpuBitForBit) {
    REQUIRE_GPU();
    std::mt19937 rng(1);
    for (int64_t k : {16, 128, 144, 1040, 2048}) {
        for (int64_t m : {1, 7, 33}) {
            Tensor x = random_bf16({m, k}, rng, 3.f);
            // A zero row (scale 0, zeros out) and a row of tiny values (subnormal e4m3 codes).
            for (int64_t i = 0; i < k; ++i) x.data<uint16_t>()[i] = 0;
            if (m > 1)
                for (int64_t i = 0; i < k; ++i)
                    x.data<uint16_t>()[k + i] = f32_to_bf16(float(i % 7) * 1e-3f - 3e-3f);
            const std::vector<float> xf = to_f32(x);
            std::vector<uint8_t> q(size_t(m * k));
            std::vector<float> s(size_t(m * blocks(k)));
            cpu::quantize_fp8_groups(xf.data(), m, k, q.data(), s.data());
            Quantized g = quantize(cuda::to_device(x), m, k, nullptr);
            MI_CUDA_CHECK(cudaDeviceSynchronize());
            const Tensor gq = cuda::to_host(g.q), gs = cuda::to_host(g.scales);
            EXPECT_EQ(std::memcmp(gq.raw(), q.data(), q.size()), 0) << "q, m " << m << " k " << k;
            EXPECT_EQ(std::memcmp(gs.raw(), s.data(), s.size() * 4), 0)
                << "scales, m " << m << " k " << k;
        }
    }
}

TEST(CudaFp8Quantize, SiluMulFormIsSiluMulThenQuantize) {
    REQUIRE_GPU();
    std::mt19937 rng(2);
    for (int64_t k : {128, 768, 1040}) {
        const int64_t m = 19;
        const Tensor gate_up = cuda::to_device(random_bf16({m, 2 * k}, rng, 2.f));
        Tensor act = cuda::device_tensor({m, k}, DType::kBF16);
        cuda::silu_mul(gate_up, act, nullptr);
        const Quantized want = quantize(act, m, k, nullptr);
        Quantized got{cuda::device_tensor({m, k}, DType::kF8E4M3),
                      cuda::device_tensor({m, blocks(k)}, DType::kF32)};
        MI_CUDA_CHECK(cudaMemset(got.q.raw(), 0x5a, got.q.nbytes()));
        MI_CUDA_CHECK(cudaMemset(got.scales.raw(), 0x5a, got.scales.nbytes()));
        cuda::DeviceBuffer rows_used(sizeof(int32_t));
        const int32_t used = 11;
        MI_CUDA_CHECK(cudaMemcpy(rows_used.data(), &used, 4, cudaMemcpyHostToDevice));
        cuda::silu_mul_fp8_quantize(gate_up, got.q, got.scales, nullptr,
                                    static_cast<const int32_t*>(rows_used.data()));
        MI_CUDA_CHECK(cudaDeviceSynchronize());
        const Tensor wq = cuda::to_host(want.q), ws = cuda::to_host(want.scales);
        const Tensor gq = cuda::to_host(got.q), gs = cuda::to_host(got.scales);
        EXPECT_EQ(std::memcmp(gq.raw(), wq.raw(), size_t(used * k)), 0) << "k " << k;
        EXPECT_EQ(std::memcmp(gs.raw(), ws.raw(), size_t(used * blocks(k)) * 4), 0) << "k " << k;
        const auto* tail = static_cast<const uint8_t*>(gq.raw()) + used * k;
        EXPECT_TRUE(std::all_of(tail, tail + (m - used) * k, [](uint8_t b) { return b == 0x5a; }))
            << "rows past rows_used written, k " << k;
    }
}

TEST(CudaFp8Gemm, DenseMatchesCpu) {
    REQUIRE_GPU();
    if (!cuda::fp8_gemm_supported()) GTEST_SKIP() << "fp8_gemm needs an sm_90 device";
    std::mt19937 rng(3);
    struct Case {
        int64_t m, n, k;
        bool bias;
    };
    for (const Case c :
         {Case{1, 128, 128, false}, Case{5, 200, 144, true}, Case{64, 384, 1040, false},
          Case{130, 1024, 2048, true}, Case{300, 4096, 1024, false}, Case{2000, 1536, 512, false},
          // Several tiles a block, the last row and column tiles partial.
          Case{1100, 4352, 384, true}, Case{2200, 1920, 256, false}}) {
        const Tensor x = random_bf16({c.m, c.k}, rng, 1.f);
        const Fp8Weight w = random_fp8_weight(1, c.n, c.k, rng);
        const Tensor bias = random_bf16({c.n}, rng, 0.5f);
        const std::vector<float> bias_f = to_f32(bias);
        const Reference ref =
            reference(to_f32(x), c.m, c.k, static_cast<const uint8_t*>(w.w.raw()),
                      w.scale.data<float>(), c.bias ? bias_f.data() : nullptr, c.n);
        const Quantized xq = quantize(cuda::to_device(x), c.m, c.k, nullptr);
        const Tensor wd = cuda::to_device(w.w.view({c.n, c.k}));
        const Tensor sd = cuda::to_device(w.scale.view({blocks(c.n), blocks(c.k)}));
        const Tensor bd = cuda::to_device(bias);
        Tensor y = cuda::device_tensor({c.m, c.n}, DType::kBF16);
        cuda::fp8_gemm(xq.q, xq.scales, wd, sd, c.bias ? &bd : nullptr, y, nullptr);
        MI_CUDA_CHECK(cudaDeviceSynchronize());
        EXPECT_TRUE(close_to(y, ref)) << "m " << c.m << " n " << c.n << " k " << c.k;
    }
}

// The experts: counts per expert padded to the tile, rows gathered from tokens through row_token
// (padding -1) or read permuted; every row below offsets[E] checked (padding rows zeros).
TEST(CudaFp8Gemm, GroupedMatchesCpu) {
    REQUIRE_GPU();
    if (!cuda::fp8_gemm_supported()) GTEST_SKIP() << "fp8_grouped_gemm needs an sm_90 device";
    std::mt19937 rng(4);
    struct Case {
        int64_t experts, n, k, tokens, top_k;
    };
    for (const Case c : {Case{8, 256, 384, 37, 2}, Case{16, 136, 272, 300, 4},
                         Case{128, 1536, 2048, 64, 8}, Case{128, 2048, 768, 200, 8}}) {
        // Inputs once a case (the 30B-A3B's experts are 400 MB): every tile and row mode reads
        // them.
        const Tensor x = random_bf16({c.tokens, c.k}, rng, 1.f);
        const std::vector<float> xf = to_f32(x);
        const Fp8Weight w = random_fp8_weight(c.experts, c.n, c.k, rng);
        const Tensor wd = cuda::to_device(w.w), sd = cuda::to_device(w.scale);
        for (int64_t tile : {64, 128}) {
            for (bool gather : {true, false}) {
                // Each token's top_k distinct experts; rows grouped by expert, padded.
                std::vector<std::vector<int32_t>> rows_of(size_t(c.experts));
                std::vector<int32_t> all(size_t(c.experts));
                std::iota(all.begin(), all.end(), 0);
                for (int64_t t = 0; t < c.tokens; ++t) {
                    std::shuffle(all.begin(), all.end(), rng);
                    for (int64_t j = 0; j < c.top_k; ++j)
                        rows_of[size_t(all[size_t(j)])].push_back(int32_t(t));
                }
                std::vector<int32_t> offsets{0}, row_token;
                for (const auto& r : rows_of) {
                    row_token.insert(row_token.end(), r.begin(), r.end());
                    const int64_t padded = (int64_t(r.size()) + tile - 1) / tile * tile;
                    row_token.resize(size_t(offsets.back() + padded), -1);
                    offsets.push_back(int32_t(offsets.back() + padded));
                }
                const int64_t max_rows = offsets.back() + tile;  // a spare tile: not written
                row_token.resize(size_t(max_rows), -1);

                // The permuted rows (gather == false): x's rows copied to their slots, zeros for
                // padding.
                Tensor x_perm = Tensor::zeros({max_rows, c.k}, DType::kBF16);
                for (int64_t r = 0; r < max_rows; ++r)
                    if (row_token[size_t(r)] >= 0)
                        std::memcpy(x_perm.data<uint16_t>() + r * c.k,
                                    x.data<uint16_t>() + row_token[size_t(r)] * c.k,
                                    size_t(c.k) * 2);
                const Quantized xq =
                    gather ? quantize(cuda::to_device(x), c.tokens, c.k, nullptr)
                           : quantize(cuda::to_device(x_perm), max_rows, c.k, nullptr);
                Tensor tok = Tensor::zeros({max_rows}, DType::kI32);
                std::memcpy(tok.raw(), row_token.data(), row_token.size() * 4);
                Tensor off = Tensor::zeros({c.experts + 1}, DType::kI32);
                std::memcpy(off.raw(), offsets.data(), offsets.size() * 4);
                const Tensor tok_d = cuda::to_device(tok), off_d = cuda::to_device(off);
                Tensor y = cuda::device_tensor({max_rows, c.n}, DType::kBF16);
                MI_CUDA_CHECK(cudaMemset(y.raw(), 0x7f, y.nbytes()));
                cuda::fp8_grouped_gemm(
                    xq.q, xq.scales, &tok_d, wd, sd, off_d, tile, y, nullptr,
                    gather ? cuda::GroupedGemmRows::kGather : cuda::GroupedGemmRows::kPermuted);
                MI_CUDA_CHECK(cudaDeviceSynchronize());
                const std::vector<double> got = gpu_testing::to_doubles(y);

                // The reference for a sample of every expert's rows (all of small cases), one
                // product an expert; padding rows must be zeros.
                const int64_t stride = c.tokens * c.top_k > 1000 ? 5 : 1;
                std::vector<double> g, ref, extra;
                bool padding_zero = true;
                for (int64_t e = 0; e < c.experts; ++e) {
                    const uint8_t* we = static_cast<const uint8_t*>(w.w.raw()) + e * c.n * c.k;
                    const float* se = w.scale.data<float>() + e * blocks(c.n) * blocks(c.k);
                    std::vector<int32_t> picked;
                    std::vector<float> xe;
                    for (int32_t r = offsets[size_t(e)]; r < offsets[size_t(e) + 1]; ++r) {
                        const int32_t t = row_token[size_t(r)];
                        if (t < 0) {
                            for (int64_t j = 0; j < c.n; ++j)
                                padding_zero &= got[size_t(r * c.n + j)] == 0.0;
                        } else if ((r - offsets[size_t(e)]) % stride == 0) {
                            picked.push_back(r);
                            xe.insert(xe.end(), xf.begin() + t * c.k, xf.begin() + (t + 1) * c.k);
                        }
                    }
                    if (picked.empty()) continue;
                    const Reference one =
                        reference(xe, int64_t(picked.size()), c.k, we, se, nullptr, c.n);
                    for (size_t i = 0; i < picked.size(); ++i)
                        for (int64_t j = 0; j < c.n; ++j) {
                            g.push_back(got[size_t(picked[i] * c.n + j)]);
                            ref.push_back(one.y[i * size_t(c.n) + size_t(j)]);
                            extra.push_back(one.abs_sum[i * size_t(c.n) + size_t(j)] *
                                            kAccumulationError);
                        }
                }
                EXPECT_TRUE(padding_zero) << "padding rows not zeros";
                EXPECT_TRUE(all_close(g, ref, {.atol = 1e-30, .rtol = std::ldexp(1.0, -8)}, extra))
                    << "E " << c.experts << " n " << c.n << " k " << c.k << " tile " << tile
                    << (gather ? " gather" : " permuted");
                // The spare tile past offsets[E] is not written.
                const Tensor y_host = cuda::to_host(y);
                const auto* raw = static_cast<const uint16_t*>(y_host.raw());
                bool untouched = true;
                for (int64_t i = offsets.back() * c.n; i < max_rows * c.n; ++i)
                    untouched &= raw[i] == 0x7f7f;
                EXPECT_TRUE(untouched) << "rows past offsets[E] written";
            }
        }
    }
}

// Qwen3-8B's projections at a decode batch and a prefill chunk, FP8 against the bf16 GEMM
// (cuBLASLt) and cuBLASLt's FP8 GEMM with per-tensor scales at the same shapes. Printed, never
// asserted.
TEST(CudaFp8Gemm, BenchQwen3_8BShapes) {
    REQUIRE_GPU();
    if (!cuda::fp8_gemm_supported()) GTEST_SKIP() << "fp8_gemm needs an sm_90 device";
    if (gpu_testing::instrumented()) GTEST_SKIP() << "timing means nothing when instrumented";
    std::mt19937 rng(5);
    cuda::Gemm gemm;
    gpu_testing::CublasFp8 cublas_fp8;
    struct Proj {
        const char* name;
        int64_t n, k;
    };
    for (int64_t m : {256, 4096}) {
        for (const Proj p : {Proj{"qkv", 6144, 4096}, Proj{"o", 4096, 4096},
                             Proj{"gate_up", 24576, 4096}, Proj{"down", 4096, 12288}}) {
            const Tensor x = cuda::to_device(random_bf16({m, p.k}, rng, 1.f));
            const Fp8Weight w = random_fp8_weight(1, p.n, p.k, rng);
            const Tensor wd = cuda::to_device(w.w.view({p.n, p.k}));
            const Tensor sd = cuda::to_device(w.scale.view({blocks(p.n), blocks(p.k)}));
            const Tensor wb = cuda::to_device(random_bf16({p.n, p.k}, rng, 0.02f));
            Quantized xq = quantize(x, m, p.k, nullptr);
            Tensor y = cuda::device_tensor({m, p.n}, DType::kBF16);
            const double flops = 2.0 * double(m) * double(p.n) * double(p.k);
            const std::string shape =
                std::to_string(m) + "x" + std::to_string(p.n) + "x" + std::to_string(p.k);
            const auto q = gpu_testing::time_launch(
                [&](cudaStream_t st) { cuda::fp8_quantize(x, xq.q, xq.scales, st); });
            gpu_testing::print_bench_row(std::string("fp8_quantize ") + p.name, shape, q,
                                         double(m * p.k) * 3.0);
            const auto f = gpu_testing::time_launch(
                [&](cudaStream_t st) { cuda::fp8_gemm(xq.q, xq.scales, wd, sd, nullptr, y, st); });
            gpu_testing::print_bench_row(std::string("fp8_gemm ") + p.name, shape, f,
                                         double(p.n * p.k + m * p.k + 2 * m * p.n), flops, true);
            const auto b =
                gpu_testing::time_launch([&](cudaStream_t st) { gemm.run(x, wb, nullptr, y, st); });
            gpu_testing::print_bench_row(std::string("bf16 gemm ") + p.name, shape, b,
                                         double(2 * p.n * p.k + 2 * m * p.k + 2 * m * p.n), flops);
            const auto c =
                gpu_testing::time_launch([&](cudaStream_t st) { cublas_fp8.run(xq.q, wd, y, st); });
            gpu_testing::print_bench_row(std::string("cublas fp8/tensor ") + p.name, shape, c,
                                         double(p.n * p.k + m * p.k + 2 * m * p.n), flops, true);
        }
    }
}
