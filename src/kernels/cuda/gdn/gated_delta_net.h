// The Gated DeltaNet layer's ops on the GPU (Qwen3.5, Qwen3-Next), with the semantics of the CPU
// reference (kernels/cpu/gated_delta_net.h): the causal conv1d with its state, and the gated
// delta rule with its gates in front and the gated RMSNorm behind, each sequence's state kept in
// its slot between steps. The projections are GEMMs (one fused in_proj, out_proj); the layer
// that strings these together is layers/cuda/gated_delta_net.h.
//
// Batches as paged attention's: sequence s owns rows [query_start[s], query_start[s + 1]); a
// sequence whose first row is at position 0 starts from a zero state (its slot is not read),
// the others continue their slot's. Where snapshot_rows[s] > 0, the state after the sequence's
// first snapshot_rows[s] rows of the step is also copied into slot snapshot_slots[s] (the
// prefix cache's snapshots). Every array lives on the device, so a CUDA graph replays a decode
// step with each step's own slots.
//
// The delta rule runs token by token (transformers' recurrent form) for decode and prefill
// alike, each sequence's state read once and written once per step.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace miniinfer::cuda {

// Where a step's sequences keep their state, i32 device arrays.
struct GdnSequences {
    const Tensor* query_start;     // [num_seqs + 1]
    const Tensor* positions;       // [num_tokens]: a sequence starting at 0 starts from zeros
    const Tensor* state_slots;     // [num_seqs]
    const Tensor* snapshot_rows;   // [num_seqs]: 0, or rows after which to snapshot
    const Tensor* snapshot_slots;  // [num_seqs]
};

// out[t, c] = bf16(silu(Σ_i weight[c, i] · x[t - (K - 1) + i, c])) for the conv_dim channels of
// x's first columns, the rows before a sequence's first row from its conv state, which holds
// its last K - 1 inputs (f32, oldest first) and is updated.
//   x:          [n, ≥ conv_dim] bf16 (in_proj's output: the conv reads its first conv_dim columns)
//   weight:     [conv_dim, K] bf16
//   conv_state: [num_slots, K - 1, conv_dim] f32
//   out:        [n, conv_dim] bf16
void causal_conv1d_silu(const Tensor& x, const Tensor& weight, const GdnSequences& seqs,
                        Tensor& conv_state, Tensor& out, cudaStream_t stream);

// The gated delta rule of every value head, its gates and the gated RMSNorm:
//   g = -exp(A_log) · softplus(a + dt_bias), beta = sigmoid(b)
//   q, k = l2norm(q), l2norm(k) of the value head's key head; q · 1/sqrt(head_k_dim)
//   S = exp(g) S;  S += k ⊗ beta (v - kᵀS);  o = qᵀS
//   out = bf16(norm_weight · rms_norm(o) · silu(z))
// Dimensions: nk key heads and nv value heads (nv a multiple of nk), head_k_dim dk and
// head_v_dim dv, each 64 or 128.
//   qkv:       [n, 2 nk dk + nv dv] bf16 (the conv's output: query heads, key heads, value heads)
//   zba:       [n, ≥ z_col + nv dv] and a, b at columns a_col, b_col (nv each): in_proj's output
//   A_log, dt_bias: [nv] bf16;  norm_weight: [dv] bf16
//   state:     [num_slots, nv, dk, dv] f32, updated
//   out:       [n, nv dv] bf16
struct GatedDeltaRuleArgs {
    const Tensor* qkv;
    const Tensor* zba;
    int64_t z_col, b_col, a_col;
    const Tensor* A_log;
    const Tensor* dt_bias;
    const Tensor* norm_weight;
    float norm_eps;
    int64_t num_k_heads, num_v_heads, head_k_dim, head_v_dim;
    Tensor* state;
    Tensor* out;
};
void gated_delta_rule(const GatedDeltaRuleArgs& args, const GdnSequences& seqs,
                      cudaStream_t stream);

// Copies slot `from` of every state tensor into slot `to` (the prefix cache's restores):
// t is [num_slots, ...] of any dtype.
void copy_state_slot(Tensor& t, int32_t from, int32_t to, cudaStream_t stream);

}  // namespace miniinfer::cuda
