// What the MoE GEMV tests share (test_cuda_moe_gemv.cpp: bf16; test_cuda_fp8_gemv.cpp: FP8): the
// host references' SiLU and bf16 rounding, the poison act rows past the choices keep, and the
// tokens' expert choices.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtype.h"

namespace miniinfer::moe_gemv_testing {

inline constexpr uint16_t kPoison = 0xabab;

inline double silu(double g) {
    return g / (1.0 + std::exp(-g));
}

inline double bf16_round(double v) {
    return bf16_to_f32(f32_to_bf16(float(v)));
}

// Each token's k distinct experts: random (kind 0), the same k for every token (kind 1).
inline std::vector<int32_t> choose_experts(int kind, int64_t n, int64_t k, int64_t num_experts,
                                           std::mt19937& rng) {
    std::vector<int32_t> all(static_cast<size_t>(num_experts));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<int32_t> ids;
    for (int64_t t = 0; t < n; ++t) {
        if (kind == 0) std::shuffle(all.begin(), all.end(), rng);
        ids.insert(ids.end(), all.begin(), all.begin() + k);
    }
    return ids;
}

}  // namespace miniinfer::moe_gemv_testing
