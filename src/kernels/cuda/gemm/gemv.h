// bf16 GEMM for a few rows of x (decode at small batch), bandwidth-bound (see gemv.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"
#include "kernels/cuda/norm/rms_norm.h"

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
// column, so time is ~ceil(m / 8) reads of w. At 1-4 rows with a bf16 y each block first copies
// x into shared memory (bench/RESULTS.md#gemv-copy-x). No allocation, no
// synchronisation: safe to call during CUDA graph capture. Operands gemv_supported() rejects abort
// (MI_LAUNCH_CHECK). cols_per_block: 0 picks by n; 1, 2 or 4 force a variant (benchmarks only).
void gemv(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y, cudaStream_t stream,
          int cols_per_block = 0);

// The two fused forms below: gemv with the kernel before it folded into a prologue, so that a
// decode step at batch 1 or 2 launches one kernel instead of two. Every thread block computes the
// x rows itself into shared memory (a few KB, read from L2) before multiplying them; at most
// kGemvFusedMaxRows rows of at most kGemvFusedMaxSharedBytes as bf16, y bf16, w and bias as gemv
// takes them. Operands the *_supported check refuses abort (MI_LAUNCH_CHECK).
inline constexpr int64_t kGemvFusedMaxRows = 4;
inline constexpr int64_t kGemvFusedMaxSharedBytes = 64 << 10;

// y = (in.weight * norm(in.residual + in.delta)) · wᵀ (+ bias): the residual add + RMSNorm
// (rms_norm.h) inside. Its arithmetic is add_rms_norm's but for the order of the fp32 sum of
// squares. Block 0 also writes in.residual_out and in.normed (when given), so residual_out must
// be another buffer than residual (all blocks read that). The rows: in.residual's, 16-byte
// aligned like the norm's other operands; weight [k]. y may also be f32 here (the MoE router's
// logits).
bool gemv_rms_norm_supported(const AddRmsNorm& in, const Tensor& w, const Tensor* bias,
                             const Tensor& y);
void gemv_rms_norm(const AddRmsNorm& in, const Tensor& w, const Tensor* bias, Tensor& y,
                   cudaStream_t stream);

// y = silu_mul(gate_up) · wᵀ (+ bias) with the SiLU·mul (silu_mul.h) inside: gate_up [m, 2k],
// 16-byte aligned. The bits of silu_mul, then gemv; the act rows are not stored.
bool gemv_silu_mul_supported(const Tensor& gate_up, const Tensor& w, const Tensor* bias,
                             const Tensor& y);
void gemv_silu_mul(const Tensor& gate_up, const Tensor& w, const Tensor* bias, Tensor& y,
                   cudaStream_t stream);

}  // namespace miniinfer::cuda
