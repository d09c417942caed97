// bf16 GEMM through cuBLASLt (see gemm.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "core/tensor.h"

namespace miniinfer::cuda {

// y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias[n]): bf16 in and out, fp32 accumulation, through cuBLASLt.
// x may have any rank with k as its last dimension (m = x.numel() / k); y holds m * n elements.
// All tensors are contiguous bf16 CUDA tensors; y must not alias x, w or bias.
// Rounding: without bias y = bf16(fp32 sum). With bias, cuBLASLt's BIAS epilogue (the one
// PyTorch's addmm uses) was measured on the H200 to round x·w to bf16 before adding the bias and
// rounding again: up to one extra half-ulp of |x·w| (tests/gpu/test_cuda_kernels.cpp).
//
// The algorithm is chosen once per (m, n, k, bias?, pointer alignment) with
// cublasLtMatmulAlgoGetHeuristic and cached, with its descriptors, in the Gemm. Thread-compatible:
// one Gemm per stream/thread. The Gemm owns its cuBLASLt handle and a 32 MiB workspace. Safe to
// call during CUDA graph capture once the shape's algorithm is cached: a cached call allocates
// nothing and never synchronises. Bad shapes/dtypes and cuBLASLt failures abort (MI_CHECK):
// they are bugs in the caller, not user errors.
class Gemm {
  public:
    Gemm();
    ~Gemm();
    Gemm(const Gemm&) = delete;
    Gemm& operator=(const Gemm&) = delete;

    void run(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y, cudaStream_t stream);

    static constexpr size_t kWorkspaceBytes = size_t(32) << 20;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace miniinfer::cuda
