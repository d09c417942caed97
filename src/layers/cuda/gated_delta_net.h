// The hybrids' Gated DeltaNet block on the GPU (the CPU reference is GatedDeltaNet in
// layers/layers.h):
//
//   in_proj GEMM (q, k, v, z, b, a in one output row) -> causal conv1d + SiLU over q, k, v ->
//   gated delta rule with the gates in front and the gated RMSNorm behind (one kernel) ->
//   out_proj GEMM
//
// Each sequence's conv window and state S live in slot in.state_slots[s] of the layer's
// StateLayer; kernels/cuda/gdn/gated_delta_net.h has the arithmetic.
#pragma once

#include <cstdint>

#include "layers/cuda/linear.h"
#include "layers/cuda/step.h"

namespace miniinfer::cuda {

struct GatedDeltaNet {
    // [conv_dim + value_dim + 2 nv (+ zero rows to a multiple of 8), hidden]: in_proj_qkv,
    // in_proj_z, in_proj_b, in_proj_a stacked (one GEMM).
    Linear in_proj;
    Linear out_proj;        // [hidden, value_dim]
    Tensor conv1d;          // [conv_dim, kernel] bf16
    Tensor A_log, dt_bias;  // [nv] bf16
    Tensor norm;            // [head_v_dim] bf16, used as stored
    int64_t num_k_heads = 0, num_v_heads = 0, head_k_dim = 0, head_v_dim = 0;
    float eps = 1e-6f;

    int64_t conv_dim() const { return 2 * num_k_heads * head_k_dim + num_v_heads * head_v_dim; }
    int64_t value_dim() const { return num_v_heads * head_v_dim; }

    // Scratch shared by every such layer, allocated once for the largest step.
    struct Buffers {
        Tensor proj;  // [max_tokens, in_proj rows]
        Tensor qkv;   // [max_tokens, conv_dim]: the conv's output
        Tensor out;   // [max_tokens, value_dim]: the gated norm's output, before out_proj
    };
    Buffers allocate_buffers(int64_t max_tokens) const;

    // y = gdn(x), x the output of the norm `input` (run by in_proj); advances the step's
    // sequences' states in `state`.
    void forward(const AddRmsNorm& input, Tensor& y, StateLayer& state, const Step& step,
                 Buffers& buf) const;
};

}  // namespace miniinfer::cuda
