// Block-scaled FP8 GEMMs (W8A8, Qwen's FP8 checkpoints) on Hopper's tensor cores: the dense
// projections of a prefill or a large decode batch, and the MoE experts. The activations come
// quantized (fp8_quantize.h); each k block's fp32 product is scaled by its two scales and added
// to the accumulators (the CPU reference's arithmetic, kernels/cpu/fp8_linear.h, summed in
// another order).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"
#include "kernels/cuda/gemm/grouped_gemm.h"

namespace miniinfer::cuda {

// True on an sm_90 device (wgmma e4m3 is sm_90a machine code).
bool fp8_gemm_supported();

// y[m, n] = Σ_b (xq[m, b] · w[n, b]ᵀ) · x_scale[m, b] · w_scale[n / 128, b] (+ bias[n]), b the
// k blocks of 128, fp32 throughout, y one bf16 rounding.
//   xq [m, k] e4m3 with x_scale [m, ceil(k / 128)] f32 (fp8_quantize's), k a multiple of 16
//   w [n, k] e4m3 with w_scale [ceil(n / 128), ceil(k / 128)] f32; n a multiple of 8
//   bias [n] bf16 or null; y [m, n] bf16, 16-byte aligned; must not alias the inputs
// No allocation, no host synchronisation: graph-capturable. Bad operands abort (MI_LAUNCH_CHECK).
void fp8_gemm(const Tensor& xq, const Tensor& x_scale, const Tensor& w, const Tensor& w_scale,
              const Tensor* bias, Tensor& y, cudaStream_t stream);

// grouped_gemm_sm90's contract (grouped_gemm.h: expert_offsets multiples of tile_rows 64 or
// 128, rows through row_token as `rows` says, padding rows zeros, rows from offsets[E] on not
// written; kStore only) with block-scaled FP8 operands:
//   xq [rows of x, k] e4m3 and x_scale [rows of x, ceil(k / 128)] f32, read through row_token
//   like x (a padding row's scales are not read)
//   w [E, n, k] e4m3 and w_scale [E, ceil(n / 128), ceil(k / 128)] f32
//   y [max_rows, n] bf16
void fp8_grouped_gemm(const Tensor& xq, const Tensor& x_scale, const Tensor* row_token,
                      const Tensor& w, const Tensor& w_scale, const Tensor& expert_offsets,
                      int64_t tile_rows, Tensor& y, cudaStream_t stream,
                      GroupedGemmRows rows = GroupedGemmRows::kGather);

}  // namespace miniinfer::cuda
