// Element type conversion on the GPU.
#pragma once

#include <cuda_runtime.h>

#include "core/tensor.h"

namespace miniinfer::cuda {

// out (f32) = in (bf16), same shape, contiguous CUDA tensors.
void bf16_to_f32(const Tensor& in, Tensor& out, cudaStream_t stream);

}  // namespace miniinfer::cuda
