// The sparse MoE block on the GPU, Qwen3-MoE style (the CPU reference is FusedMoE in
// layers/layers.h):
//
//   router GEMM -> softmax, top-k (+ renormalisation) -> permute: each permuted row's token,
//   expert-contiguous (each expert's segment padded to the grouped GEMM's row tile) ->
//   grouped GEMM gate_up, reading x's rows through the permutation (the gather fused into it),
//   SiLU(gate) * up (in the GEMM's epilogue at the smallest tile) -> grouped GEMM down ->
//   weighted sum of each token's k rows back in token order (row-parallel: all-reduced across
//   ranks)
//
// Up to kMoeGemvMaxPairs (token, choice) pairs (decode at small batch) take a shorter path:
// router, top-k, then two gemv-style kernels straight from the choices (moe_gemv.h).
//
// The hybrids' MoE adds a shared expert on every token (a dense MLP), scaled by
// sigmoid(shared_gate · x).
//
// Every size comes from the host-side token count and the config, none from the routing, so a
// decode step with this block can be captured in a CUDA graph. The combine adds each token's k
// rows in a fixed order, without atomics: the same input gives the same output, run to run.
#pragma once

#include <cstdint>

#include "config/tuning.h"
#include "layers/cuda/linear.h"
#include "layers/cuda/mlp.h"
#include "layers/cuda/step.h"

namespace miniinfer::cuda {

struct Moe {
    Linear router;           // [E, hidden], replicated
    Tensor experts_gate_up;  // [E, 2 * inter, hidden] bf16: gate rows, then up rows (this rank's)
    Tensor experts_down;     // [E, hidden, inter]
    // A block-scaled FP8 checkpoint's experts: the two above are e4m3, with these f32 scales
    // [E, ceil(rows / 128), ceil(cols / 128)] (undefined for bf16 experts).
    Tensor experts_gate_up_scale, experts_down_scale;
    int64_t top_k = 0;
    bool renormalize = true;       // norm_topk_prob
    Communicator* comm = nullptr;  // the down projection is row-parallel; null without TP
    // SiLU·mul inside the gate_up GEMM up to this row tile, its own kernel above
    // (Tuning::moe_silu_tile).
    int64_t silu_tile = Tuning{}.moe_silu_tile;
    Mlp shared;          // undefined weights: no shared expert
    Tensor shared_gate;  // [hidden] bf16

    int64_t num_experts() const { return experts_gate_up.size(0); }
    bool fp8() const { return experts_gate_up_scale.defined(); }

    // Scratch shared by every MoE layer, allocated once for the largest step.
    struct Buffers {
        Tensor logits;                  // [max_tokens, E] f32
        Tensor topk_ids, topk_weights;  // [max_tokens, k] i32, f32
        Tensor slot_row;                // [max_tokens, k] i32: each choice's permuted row
        Tensor permute_workspace;       // moe_permute's scratch, i32
        Tensor expert_offsets;          // [E + 1] i32
        Tensor row_token;               // [max_rows] i32: each permuted row's token (-1: pad)
        Tensor gate_up;                 // [max_rows, 2 * inter] bf16: gate_up when not fused
        Tensor act;                     // [max_rows, inter] bf16: SiLU(gate) * up per row
        // FP8 experts: the tokens' x and the rows' act quantized per group of 128 (e4m3, then
        // f32 scales [rows, ceil(cols / 128)]).
        Tensor x_q, x_scales;      // [max_tokens, hidden]
        Tensor act_q, act_scales;  // [max_rows, inter]
        Tensor y_perm;             // [max_rows, hidden] bf16: the down projection per row
        Mlp::Buffers shared;       // the shared expert's
        Tensor shared_out;         // [max_tokens, hidden] bf16
    };
    Buffers allocate_buffers(int64_t max_tokens) const;

    // y = moe(x), x the output of the norm `input` (run by the router; the experts read
    // *input.normed).
    void forward(const AddRmsNorm& input, Tensor& y, const Step& step, Buffers& buf) const;
};

}  // namespace miniinfer::cuda
