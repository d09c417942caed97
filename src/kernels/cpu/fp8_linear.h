// Block-scaled FP8 (W8A8) on the CPU: the reference for the GPU's FP8 GEMMs, with the arithmetic
// of transformers' FP8Linear (integrations/finegrained_fp8.py and the finegrained-fp8 Triton
// kernels it calls):
//   activations  per token, in groups of kFp8Block along the inner dimension: s = max|x| / 448,
//                q = e4m3(x / max(s, 1e-12)) (nearest, ties to even, saturating)
//   product      y[t, o] = sum over inner blocks b of
//                  (sum over the block of q[t, i] w[o, i], in f32) * s[t, b] * w_scale[o / 128, b]
//                each block's f32 partial scaled and added in block order, in f32.
// Weights are e4m3 bytes [out, in] with f32 block scales [ceil(out / 128), ceil(in / 128)]
// (a checkpoint's weight_scale_inv: the dequantized weight is e4m3 value x scale).
#pragma once

#include <cstdint>

namespace miniinfer::cpu {

// The block edge of weights and activation groups; the one size the config accepts.
constexpr int64_t kFp8Block = 128;

// The amax below which a group's divisor is held (an all-zero group quantizes to zeros).
constexpr float kFp8MinScale = 1e-12f;

// q[n, in] e4m3 and scales[n, ceil(in / kFp8Block)] f32 of x[n, in] (a last, shorter group
// takes its own amax).
void quantize_fp8_groups(const float* x, int64_t n, int64_t in, uint8_t* q, float* scales);

// y[n, out] = x[n, in] · dequant(w)ᵀ (+ bias[out]), with x quantized per group as above.
// w: [out, in] e4m3; w_scale: [ceil(out / 128), ceil(in / 128)] f32. y must not alias x.
void fp8_block_linear(const float* x, int64_t n, int64_t in, const uint8_t* w, const float* w_scale,
                      const float* bias, int64_t out, float* y);

// w[out, in] f32 as Qwen's FP8 checkpoints store a projection: q[out, in] e4m3 and
// scales[ceil(out / 128), ceil(in / 128)] f32, each 128 × 128 block by its amax (scale
// max(amax / 448, kFp8MinScale), the divisor itself, so dequantize_fp8_blocks inverts it).
void quantize_fp8_blocks(const float* w, int64_t out, int64_t in, uint8_t* q, float* scales);

// y[out, in] f32 = w · its block's scale: the weight-only path's one-time widening.
void dequantize_fp8_blocks(const uint8_t* w, const float* w_scale, int64_t out, int64_t in,
                           float* y);

}  // namespace miniinfer::cpu
