// RMSNorm on the GPU (see rms_norm.cu).
#pragma once

#include <cuda_runtime.h>

#include "core/tensor.h"

namespace miniinfer::cuda {

// x, out: [rows, dim] bf16 CUDA; weight: [dim] bf16. With residual ([rows, dim] bf16):
// residual += x first and out = norm(residual); residual is mutated. Without: out = norm(x).
void add_rms_norm(const Tensor& x, Tensor* residual, const Tensor& weight, float eps, Tensor& out,
                  cudaStream_t stream);

}  // namespace miniinfer::cuda
