// The scalar pieces the CPU reference kernels share (ops.cpp, gated_delta_net.cpp): fp32, written
// once so every kernel rounds alike.
#pragma once

#include <cmath>
#include <cstdint>

namespace miniinfer::cpu {

inline float dot(const float* a, const float* b, int64_t n) {
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
    return sum;
}

inline float sigmoid(float x) {
    return 1.f / (1.f + std::exp(-x));
}

inline float silu(float x) {
    return x / (1.f + std::exp(-x));
}

}  // namespace miniinfer::cpu
