// Block-scaled FP8 (W8A8, e4m3) GEMM for a few rows of x (decode at small batch), bandwidth-bound
// (see fp8_gemv.cu). The arithmetic is cpu::fp8_block_linear's (kernels/cpu/fp8_linear.h): x is
// quantized per row in groups of 128 along k (s = amax / 448, q = e4m3(x / max(s, 1e-12)), a
// shorter last group with its own amax), and, in fp32,
//   y[t, o] = Σ_b (Σ_{i in block b} q[t, i] · w[o, i]) · s[t, b] · w_scale[o / 128, b]
// Products of two e4m3 values are exact in fp32: only the order of the sums differs from the CPU.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"
#include "kernels/cuda/norm/rms_norm.h"

namespace miniinfer::cuda {

// The most rows of x one call takes (every block keeps all of them, quantized, in shared memory).
inline constexpr int64_t kFp8GemvMaxRows = 8;

// Shared memory one block may use for the quantized rows: m · k values (each e4m3 value kept as
// its exact bf16, 2 bytes: cheap to widen) plus m · ceil(k / 128) f32 scales must fit (sm_90
// allows 227 KiB a block). Qwen3-8B's down projection (k = 12,288) fits at every m ≤ 8 (199,680
// bytes), Qwen3-32B's (k = 25,600) up to m = 4 (208,000); larger m · k is refused by the
// *_supported checks (the caller takes the grouped FP8 GEMM).
inline constexpr int64_t kFp8GemvMaxSharedBytes = 224 << 10;

// Whether fp8_gemv() accepts these operands: contiguous CUDA tensors, x bf16 [.., k] with
// m = x.numel() / k in 1..kFp8GemvMaxRows, w kF8E4M3 [n, k] with k % 16 == 0, w_scale f32
// [ceil(n / 128), ceil(k / 128)], bias bf16 [n] or null, y bf16 or f32 with m · n elements ending
// in n; x and w 16-byte aligned; m · k within kFp8GemvMaxSharedBytes (above). Callers fall back to
// the grouped FP8 GEMM when it is false.
bool fp8_gemv_supported(const Tensor& x, const Tensor& w, const Tensor& w_scale, const Tensor* bias,
                        const Tensor& y);

// y[m, n] = the block-scaled FP8 product of x[m, k] and w[n, k] (+ bias[n], added in fp32): y bf16
// is one rounding of the fp32 result, y f32 the result as is. Every block quantizes all m rows of
// x into shared memory itself (x is a few KB, read from L2), then its warps stream w. y must not
// alias x, w, w_scale or bias. No allocation, no synchronisation: safe during CUDA graph capture;
// launched with PDL (launch.cuh). Operands fp8_gemv_supported() refuses abort (MI_LAUNCH_CHECK).
void fp8_gemv(const Tensor& x, const Tensor& w, const Tensor& w_scale, const Tensor* bias,
              Tensor& y, cudaStream_t stream);

// The fused forms (as gemv_rms_norm / gemv_silu_mul in gemv.h): x is computed by a prologue in
// every block, then quantized into shared memory as fp8_gemv does; w, w_scale, bias and y (bf16 or
// f32) as fp8_gemv takes them, at most kFp8GemvMaxRows rows.

// y = fp8 product of (in.weight * norm(in.residual + in.delta)) and w: add_rms_norm's arithmetic
// but for the order of the fp32 sum of squares. Block 0 also writes in.residual_out (when delta is
// given) and in.normed (when given); residual_out must be another buffer than residual and delta.
// The rows: in.residual's, 16-byte aligned like the norm's other operands; weight [k].
bool fp8_gemv_rms_norm_supported(const AddRmsNorm& in, const Tensor& w, const Tensor& w_scale,
                                 const Tensor* bias, const Tensor& y);
void fp8_gemv_rms_norm(const AddRmsNorm& in, const Tensor& w, const Tensor& w_scale,
                       const Tensor* bias, Tensor& y, cudaStream_t stream);

// y = fp8 product of silu_mul(gate_up) and w, with silu_mul's bits (silu_mul.cuh) for x:
// gate_up [m, 2k] bf16, 16-byte aligned. The act rows are not stored.
bool fp8_gemv_silu_mul_supported(const Tensor& gate_up, const Tensor& w, const Tensor& w_scale,
                                 const Tensor* bias, const Tensor& y);
void fp8_gemv_silu_mul(const Tensor& gate_up, const Tensor& w, const Tensor& w_scale,
                       const Tensor* bias, Tensor& y, cudaStream_t stream);

}  // namespace miniinfer::cuda
