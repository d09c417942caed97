// What every GPU test file needs: the visible skip where no CUDA device is present, and
// random bf16 host tensors to feed the kernels.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <utility>

#include "core/cuda/device_buffer.h"
#include "core/dtype.h"
#include "core/tensor.h"

// Skips the test with a message ctest shows (SKIP_REGULAR_EXPRESSION). GTEST_SKIP returns
// from the calling function, so this must be a macro.
#define REQUIRE_GPU()                           \
    if (::miniinfer::cuda::device_count() == 0) \
    GTEST_SKIP() << "no CUDA device visible: GPU test skipped"

namespace miniinfer::gpu_testing {

// A host bf16 tensor of N(0, scale²) values.
inline Tensor random_bf16(Shape shape, std::mt19937& rng, float scale) {
    Tensor t = Tensor::zeros(std::move(shape), DType::kBF16);
    std::normal_distribution<float> d(0.f, scale);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<uint16_t>()[i] = f32_to_bf16(d(rng));
    return t;
}

}  // namespace miniinfer::gpu_testing
