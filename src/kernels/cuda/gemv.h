// bf16 GEMM for a few rows of x (decode at small batch), bandwidth-bound (see gemv.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"
#include "kernels/cuda/rms_norm.h"

namespace miniinfer::cuda {

// Rows one launch handles; gemv() covers larger m in chunks of this many rows, each chunk
// streaming w again (from L2 when w fits there).
inline constexpr int64_t kGemvRowsPerLaunch = 8;

// Whether gemv() accepts these operands: contiguous bf16 CUDA tensors (y may be f32), w [n, k]
// with k % 8 == 0, x and w 16-byte aligned (so every row is read with 16-byte loads), x ending in
// k, y holding m * n elements, bias (if given) [n]. y may have any alignment. The Gemm wrapper asks
// this before dispatching to gemv and falls back to cuBLASLt when it is false.
bool gemv_supported(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y);

// y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias[n]): bf16 in, fp32 products and sums; y bf16 (one rounding
// of the fp32 result, the bias added in fp32 before it) or f32 (the fp32 result as is). x: any rank
// ending in k (m = x.numel() / k); y: m * n elements ending in n; y must not alias x, w or bias.
// Meant for small m (1..16): every block streams a few rows of w once and keeps m fp32 sums per
// column, so time is ~ceil(m / 8) reads of w. No allocation, no synchronisation: safe to call
// during CUDA graph capture. Operands gemv_supported() rejects abort (MI_LAUNCH_CHECK).
// cols_per_block: 0 picks by n; 1, 2 or 4 force a variant (benchmarks only).
void gemv(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y, cudaStream_t stream,
          int cols_per_block = 0);

// gemv with the residual add + RMSNorm before it fused in (one kernel instead of two at batch 1):
// y = (in.weight * norm(in.residual + in.delta)) · wᵀ (+ bias), the norm's arithmetic as
// add_rms_norm's (rms_norm.h) but for the order of the fp32 sum of squares. Every block
// normalises the rows itself into shared memory; block 0 also writes in.residual_out and
// in.normed (when given), so residual_out must be another buffer than residual (all blocks read
// that). Rows: in.residual's; y bf16. Supported (else MI_LAUNCH_CHECK aborts): what gemv
// accepts, at most kGemvRowsPerLaunch rows of at most kGemvNormMaxSharedBytes together, 16-byte
// aligned norm operands of the rows' shape, weight [k].
inline constexpr int64_t kGemvNormMaxSharedBytes = 64 << 10;
bool gemv_rms_norm_supported(const AddRmsNorm& in, const Tensor& w, const Tensor* bias,
                             const Tensor& y);
void gemv_rms_norm(const AddRmsNorm& in, const Tensor& w, const Tensor* bias, Tensor& y,
                   cudaStream_t stream);

}  // namespace miniinfer::cuda
