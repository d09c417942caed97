// The small-batch MoE kernels (kernels/cuda/moe/moe_gemv.h) against a host reference on random
// inputs: E = 8, 16, 64, 128; k = 1, 2, 4, 8; 1 to 9 tokens; random choices, every token on the
// same experts, and (k = 1) every token on one expert; the tiny fixtures' sizes, sizes that are
// odd multiples of 8, and Qwen3-30B-A3B's (hidden 2048, inter 768).
//   gate_up  act = bf16(silu(g) · u), g and u the bf16-rounded dots: the reference takes fp64 dots;
//            a GPU fp32 dot can round to the neighbouring bf16 value, so each element may differ by
//            what one ulp of g or u changes, plus half an ulp for the final rounding
//   down     out = bf16(Σ_j w_j · bf16(act_j · down_e)): the reference starts from the GPU's act
//            (so the two checks are independent), with the same one-ulp allowance per term and
//            the fp32 sum's error
// Rows of act past n · k stay untouched; a second run gives the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "gpu_testing.h"
#include "kernels/cuda/moe/moe_gemv.h"
#include "moe_gemv_testing.h"

using namespace miniinfer;
using gpu_testing::all_close;
using gpu_testing::bitwise_equal;
using gpu_testing::random_bf16;

namespace {

using namespace moe_gemv_testing;

struct Case {
    int64_t num_experts, top_k, n, hidden, inter;
    int kind;
};

void run_case(const Case& c, std::mt19937& rng) {
    SCOPED_TRACE(::testing::Message()
                 << "E " << c.num_experts << " k " << c.top_k << " n " << c.n << " hidden "
                 << c.hidden << " inter " << c.inter << " kind " << c.kind);
    const int64_t pairs = c.n * c.top_k, H = c.hidden, I = c.inter;
    const Tensor x = random_bf16({c.n, H}, rng, 1.f);
    const Tensor w_gate_up = random_bf16({c.num_experts, 2 * I, H}, rng, 0.05f);
    const Tensor w_down = random_bf16({c.num_experts, H, I}, rng, 0.05f);
    const std::vector<int32_t> ids = choose_experts(c.kind, c.n, c.top_k, c.num_experts, rng);
    std::vector<float> weights(static_cast<size_t>(pairs));
    std::uniform_real_distribution<float> unit(0.f, 1.f);
    for (float& w : weights) w = unit(rng);

    const Tensor dx = cuda::to_device(x), dgu = cuda::to_device(w_gate_up);
    const Tensor ddown = cuda::to_device(w_down);
    Tensor dids = cuda::device_tensor({c.n, c.top_k}, DType::kI32);
    Tensor dweights = cuda::device_tensor({c.n, c.top_k}, DType::kF32);
    MI_CUDA_CHECK(cudaMemcpy(dids.raw(), ids.data(), dids.nbytes(), cudaMemcpyHostToDevice));
    MI_CUDA_CHECK(
        cudaMemcpy(dweights.raw(), weights.data(), dweights.nbytes(), cudaMemcpyHostToDevice));
    const int64_t act_rows = pairs + 3;  // rows past n · k must stay as they were
    Tensor act = cuda::device_tensor({act_rows, I}, DType::kBF16);
    MI_CUDA_CHECK(cudaMemset(act.raw(), 0xab, act.nbytes()));
    Tensor out = cuda::device_tensor({c.n, H}, DType::kBF16);
    Tensor again = cuda::device_tensor({c.n, H}, DType::kBF16);
    ASSERT_TRUE(cuda::moe_gemv_supported(dgu, ddown));
    cuda::moe_gemv_gate_up_silu(dx, dids, dgu, act, nullptr);
    cuda::moe_gemv_down_combine(act, dids, dweights, ddown, out, nullptr);
    cuda::moe_gemv_down_combine(act, dids, dweights, ddown, again, nullptr);
    MI_CUDA_CHECK(cudaDeviceSynchronize());
    ASSERT_TRUE(bitwise_equal(again, out)) << "a second run differs";

    const Tensor act_host = gpu_testing::download(act);
    const auto* act_bits = act_host.data<uint16_t>();
    for (int64_t i = pairs * I; i < act_rows * I; ++i)
        ASSERT_EQ(act_bits[i], kPoison) << "act written past n * k rows at element " << i;

    const auto* xb = x.data<uint16_t>();
    const auto* gub = w_gate_up.data<uint16_t>();
    const auto* db = w_down.data<uint16_t>();
    // dot of bf16 row a (length len) with bf16 row b: fp64 value and Σ|a·b|.
    auto dot = [](const uint16_t* a, const uint16_t* b, int64_t len, double& magnitude) {
        double s = 0;
        magnitude = 0;
        for (int64_t q = 0; q < len; ++q) {
            const double v = double(bf16_to_f32(a[q])) * bf16_to_f32(b[q]);
            s += v;
            magnitude += std::fabs(v);
        }
        return s;
    };

    // gate_up: act against fp64 dots.
    std::vector<double> act_ref(size_t(pairs * I)), act_extra(act_ref.size());
    for (int64_t p = 0; p < pairs; ++p) {
        const int64_t t = p / c.top_k, e = ids[size_t(p)];
        for (int64_t i = 0; i < I; ++i) {
            double mg = 0, mu = 0;
            const double g = bf16_round(dot(xb + t * H, gub + (e * 2 * I + i) * H, H, mg));
            const double u = bf16_round(dot(xb + t * H, gub + (e * 2 * I + I + i) * H, H, mu));
            const double dg = std::ldexp(std::fabs(g), -7) + double(H) * std::ldexp(mg, -24);
            const double du = std::ldexp(std::fabs(u), -7) + double(H) * std::ldexp(mu, -24);
            act_ref[size_t(p * I + i)] = bf16_round(silu(g) * u);
            // silu' is at most 1.1 in magnitude
            act_extra[size_t(p * I + i)] =
                1.1 * std::fabs(u) * dg + std::fabs(silu(g)) * du + 1.1 * dg * du;
        }
    }
    std::vector<double> act_got = gpu_testing::to_doubles(act);
    act_got.resize(act_ref.size());
    ASSERT_TRUE(all_close(act_got, act_ref, {.atol = 0, .rtol = 1.0 / 256}, act_extra));

    // down + combine, from the GPU's act.
    std::vector<double> out_ref(size_t(c.n * H)), out_extra(out_ref.size());
    for (int64_t t = 0; t < c.n; ++t) {
        for (int64_t col = 0; col < H; ++col) {
            double sum = 0, magnitude = 0, allowed = 0;
            for (int64_t j = 0; j < c.top_k; ++j) {
                const int64_t p = t * c.top_k + j, e = ids[size_t(p)];
                double m = 0;
                const double d = bf16_round(dot(act_bits + p * I, db + (e * H + col) * I, I, m));
                const double w = weights[size_t(p)];
                sum += w * d;
                magnitude += std::fabs(w * d);
                allowed += w * (std::ldexp(std::fabs(d), -7) + double(I) * std::ldexp(m, -24));
            }
            out_ref[size_t(t * H + col)] = sum;
            out_extra[size_t(t * H + col)] = allowed + double(c.top_k) * std::ldexp(magnitude, -24);
        }
    }
    ASSERT_TRUE(all_close(gpu_testing::to_doubles(out), out_ref, {.atol = 0, .rtol = 1.0 / 256},
                          out_extra));
}

TEST(CudaMoeGemv, MatchesReferenceAcrossExpertsChoicesAndTokens) {
    REQUIRE_GPU();
    std::mt19937 rng(21);
    for (int64_t num_experts : {8, 16, 64, 128}) {
        for (int64_t top_k : {1, 2, 4, 8}) {
            for (int64_t n : {1, 2, 3, 4, 9}) {
                for (int kind : {0, 1}) {
                    run_case({num_experts, top_k, n, 64, 32, kind}, rng);
                    if (::testing::Test::HasFatalFailure()) return;
                }
            }
        }
    }
}

TEST(CudaMoeGemv, OddSizesAndTheQwen3MoE30BShapes) {
    REQUIRE_GPU();
    std::mt19937 rng(22);
    for (const Case& c :
         {Case{16, 4, 3, 1032, 264, 0}, Case{16, 4, 3, 1032, 264, 1}, Case{8, 8, 1, 2048, 768, 0},
          Case{8, 8, 4, 2048, 768, 0}, Case{128, 1, 5, 264, 40, 1}, Case{16, 3, 2, 136, 24, 0}}) {
        run_case(c, rng);
        if (::testing::Test::HasFatalFailure()) return;
    }
}

TEST(CudaMoeGemv, RejectsShapesItCannotRun) {
    REQUIRE_GPU();
    const Tensor gu = cuda::device_tensor({4, 2 * 12, 64}, DType::kBF16);
    const Tensor down = cuda::device_tensor({4, 64, 12}, DType::kBF16);  // inter 12: not % 8
    EXPECT_FALSE(cuda::moe_gemv_supported(gu, down));
    const Tensor gu2 = cuda::device_tensor({4, 2 * 16, 64}, DType::kBF16);
    const Tensor down2 = cuda::device_tensor({4, 64, 16}, DType::kBF16);
    EXPECT_TRUE(cuda::moe_gemv_supported(gu2, down2));
    const Tensor wrong = cuda::device_tensor({4, 2 * 16, 72}, DType::kBF16);  // hidden mismatch
    EXPECT_FALSE(cuda::moe_gemv_supported(wrong, down2));
}

}  // namespace
