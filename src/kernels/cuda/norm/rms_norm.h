// RMSNorm on the GPU (see rms_norm.cu).
#pragma once

#include <cuda_runtime.h>

#include "core/tensor.h"

namespace miniinfer::cuda {

// x, out: [rows, dim] bf16 CUDA; weight: [dim] bf16. With residual ([rows, dim] bf16):
// residual += x first and out = norm(residual); residual is mutated. Without: out = norm(x).
void add_rms_norm(const Tensor& x, Tensor* residual, const Tensor& weight, float eps, Tensor& out,
                  cudaStream_t stream);

// The out-of-place form, for a residual stream kept in two buffers: residual_out = residual +
// delta, normed = weight * norm(residual_out). Without delta, normed = weight * norm(residual)
// and residual_out is not written (may be null). All [rows, dim] bf16 CUDA tensors but weight
// ([dim]); residual_out may alias residual (then this is the in-place form above), nothing else
// may alias. gemv_rms_norm (gemv.h) runs the same arithmetic in front of a GEMV.
struct AddRmsNorm {
    const Tensor* delta = nullptr;
    const Tensor* residual = nullptr;
    Tensor* residual_out = nullptr;
    const Tensor* weight = nullptr;
    float eps = 1e-6f;
    Tensor* normed = nullptr;
};
void add_rms_norm(const AddRmsNorm& a, cudaStream_t stream);

}  // namespace miniinfer::cuda
