// The MoE expert projections for a few tokens (decode at small batch), bandwidth-bound (see
// moe_gemv.cu). They take the router's choices as they are, in (token, choice) order: no
// permutation, no padding, no separate SiLU·mul or combine kernel. A step of n tokens reads each
// chosen expert's rows once per choice, so this pays only while few tokens share an expert;
// cuda::Moe uses it up to kMoeGemvMaxPairs choices and the grouped GEMMs above.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace miniinfer::cuda {

// The most (token, choice) pairs a step sends through the gemv path (measured on the H200 against
// the grouped GEMMs: bench_cuda_ops moe, bench/RESULTS.md).
inline constexpr int64_t kMoeGemvMaxPairs = 32;

// Whether moe_gemv_gate_up_silu and moe_gemv_down_combine accept experts of these shapes: bf16
// CUDA weights [E, 2 · inter, hidden] and [E, hidden, inter] with hidden and inter multiples of 8,
// 16-byte aligned.
bool moe_gemv_supported(const Tensor& experts_gate_up, const Tensor& experts_down);

// act[t · k + j, i] = bf16(silu(g) · u) with g = bf16(x[t] · gate_e[i]), u = bf16(x[t] · up_e[i]),
// e = topk_ids[t, j]: the gate_up projection and silu_mul of every choice, in silu_mul's
// arithmetic (fp32 products and sums).
//   x:        [n, hidden] bf16, 16-byte aligned
//   topk_ids: [n, k] i32, values in [0, E) (device values, trusted)
//   w:        [E, 2 · inter, hidden] bf16: gate rows, then up rows
//   act:      [≥ n · k, inter] bf16; rows n · k on are not written
void moe_gemv_gate_up_silu(const Tensor& x, const Tensor& topk_ids, const Tensor& w, Tensor& act,
                           cudaStream_t stream);

// out[t] = bf16(Σ_{j = 0 .. k-1} topk_weights[t, j] · bf16(act[t · k + j] · down_e[:]ᵀ)),
// e = topk_ids[t, j]: the down projection and moe_combine in one, the weighted sum in moe_combine's
// order and arithmetic (one fp32 fused multiply-add per choice, one rounding), no atomics.
//   act:          [≥ n · k, inter] bf16 (moe_gemv_gate_up_silu's), 16-byte aligned
//   topk_ids:     [n, k] i32; topk_weights: [n, k] f32
//   w:            [E, hidden, inter] bf16
//   out:          [n, hidden] bf16, written
// Both: no allocation, no host synchronisation (graph-capturable); operands of the wrong shape
// abort (MI_LAUNCH_CHECK: a bug in the caller).
void moe_gemv_down_combine(const Tensor& act, const Tensor& topk_ids, const Tensor& topk_weights,
                           const Tensor& w, Tensor& out, cudaStream_t stream);

// Block-scaled FP8 experts (W8A8, cpu::fp8_block_linear's arithmetic, fp8_gemv.h): the same two
// steps with e4m3 weights and f32 block scales (128 x 128 blocks), each activation row quantized
// per token in groups of 128 inside every block that uses it (fp8.cuh's helpers: the CPU's bits).
// Each block takes two pairs of one token (gate_up, 8 output columns: 16 weight rows a pair) or
// one token (down, 16 output columns), quantizes its activation rows into shared memory as e4m3
// bytes and runs the dots on the tensor cores (mma m16n8k32).

// Whether the two functions below accept experts of these shapes: kF8E4M3 CUDA weights
// [E, 2 · inter, hidden] and [E, hidden, inter] with hidden and inter multiples of 16, 16-byte
// aligned. (down also needs about top_k · (inter + 512) bytes of shared memory, ≤ 224 KiB: checked
// there.)
bool moe_gemv_fp8_supported(const Tensor& experts_gate_up, const Tensor& experts_down);

// moe_gemv_gate_up_silu with g and u each the block-scaled FP8 dot of x[t] (quantized per group of
// 128) and expert e's gate / up row, rounded to bf16; act = bf16(silu(g) · u) in silu_mul's
// arithmetic. w: [E, 2 · inter, hidden] e4m3 (gate rows, then up rows); w_scale: f32
// [E, ceil(2 · inter / 128), ceil(hidden / 128)] (blocks of the stacked rows); the rest as there.
void moe_gemv_gate_up_silu_fp8(const Tensor& x, const Tensor& topk_ids, const Tensor& w,
                               const Tensor& w_scale, Tensor& act, cudaStream_t stream);

// moe_gemv_down_combine with each act row (bf16) quantized per group of 128, the FP8 dot rounded
// to bf16 per choice, then the weighted combine exactly as there. w: [E, hidden, inter] e4m3;
// w_scale: f32 [E, ceil(hidden / 128), ceil(inter / 128)]. Both: no allocation, no host
// synchronisation (graph-capturable); operands of the wrong shape abort (MI_LAUNCH_CHECK).
void moe_gemv_down_combine_fp8(const Tensor& act, const Tensor& topk_ids,
                               const Tensor& topk_weights, const Tensor& w, const Tensor& w_scale,
                               Tensor& out, cudaStream_t stream);

}  // namespace miniinfer::cuda
