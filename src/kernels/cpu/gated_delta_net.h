// CPU reference of the Gated DeltaNet layer's operations (Qwen3.5, Qwen3-Next), matching
// transformers' torch code (models/qwen3_5/modeling_qwen3_5.py) in fp32: the causal conv1d with
// its state, the gates, the gated delta rule in its recurrent and chunked forms, and the gated
// RMSNorm. The projections (in_proj_*, out_proj) are cpu::linear; the layer that strings these
// together is the model's.
//
// Batches are flattened as paged_attention's: sequence s owns rows [query_start[s],
// query_start[s+1]) of the step's activations, and keeps its state between steps in slot
// state_slots[s] of the caller's state pools. Each call advances every sequence's state past
// its rows, so a prompt gives the same result processed at once, in chunks or token by token
// (up to float rounding in the chunked delta rule, whose chunks start at each call's first row).
// A new sequence's slot must hold zeros; a restored prefix's slot, the snapshot taken after it.
// Snapshots for the prefix cache: where snapshot_rows is given, sequence s also copies its state
// after its first snapshot_rows[s] rows of the call (> 0; 0: none) into slot
// snapshot_slots[s], as it passes that row (the chunked rule ends a chunk there).
//
// Like ops.h: plain loops over raw contiguous row-major buffers, f32, spread over the
// ThreadPool; the kernels trust their inputs (the layers check shapes).
#pragma once

#include <cstdint>

namespace miniinfer::cpu {

// Depthwise causal conv1d over each sequence's rows, then SiLU: for every channel c,
//   out[t, c] = silu(Σ_i weight[c, i] · x[t - (kernel_len - 1) + i, c]),
// where the rows before the sequence's first row of this call come from its conv state.
// The conv state holds the sequence's last kernel_len - 1 inputs, oldest first (all that the
// next token needs; transformers keeps kernel_len columns, its oldest never read), and is
// updated in place. No bias: Qwen3.5 and Qwen3-Next have none.
struct CausalConv1dArgs {
    const float* x;              // [num_tokens, channels]
    const float* weight;         // [channels, kernel_len] (conv1d.weight [C, 1, K] squeezed)
    const int32_t* query_start;  // [num_seqs + 1]
    const int32_t* state_slots;  // [num_seqs]
    int64_t num_seqs, channels, kernel_len;
    float* conv_state;  // [num_slots, kernel_len - 1, channels], read and updated
    float* out;         // [num_tokens, channels]; may alias x
    const int32_t* snapshot_rows = nullptr;   // [num_seqs] or null (see above)
    const int32_t* snapshot_slots = nullptr;  // [num_seqs]
};
void causal_conv1d_silu(const CausalConv1dArgs& args);

// The delta rule's per-token decay (log space, <= 0) and write strength, per value head:
//   g = -exp(a_log) · softplus(a + dt_bias),  beta = sigmoid(b)
// softplus as torch's (x > 20: x). a, b, g, beta: [num_tokens, num_heads];
// a_log, dt_bias: [num_heads].
void gdn_gates(const float* a, const float* b, const float* a_log, const float* dt_bias,
               int64_t num_tokens, int64_t num_heads, float* g, float* beta);

// The gated delta rule. Per value head h, with state S [head_k_dim, head_v_dim] and token t:
//   q, k = l2norm(q_t), l2norm(k_t) of key head h / (num_v_heads / num_k_heads) (transformers'
//          repeat_interleave), l2norm(x) = x / sqrt(Σx² + 1e-6); q scaled by 1/sqrt(head_k_dim)
//   S = exp(g_t) · S;  S += k ⊗ beta_t · (v_t - kᵀS);  out_t = qᵀS
// qkv is the conv's output as both models lay it out: all query heads, all key heads, all
// value heads, side by side in each row. The state is f32 and updated in place.
struct GatedDeltaRuleArgs {
    // [num_tokens, 2 * num_k_heads * head_k_dim + num_v_heads * head_v_dim]
    const float* qkv;
    const float* g;              // [num_tokens, num_v_heads] log decay
    const float* beta;           // [num_tokens, num_v_heads]
    const int32_t* query_start;  // [num_seqs + 1]
    const int32_t* state_slots;  // [num_seqs]
    int64_t num_seqs, num_k_heads, num_v_heads, head_k_dim, head_v_dim;
    float* state;  // [num_slots, num_v_heads, head_k_dim, head_v_dim], in place
    float* out;    // [num_tokens, num_v_heads, head_v_dim]
    const int32_t* snapshot_rows = nullptr;   // [num_seqs] or null (see above)
    const int32_t* snapshot_slots = nullptr;  // [num_seqs]
};

// Token by token, as transformers' torch_recurrent_gated_delta_rule (its decode step): the
// reference.
void gated_delta_rule_recurrent(const GatedDeltaRuleArgs& args);

// The same rule a chunk of kGdnChunkLen tokens at a time, as torch_chunk_gated_delta_rule (the
// prefill of transformers, and the form a GPU runs): within a chunk the updates are
// condensed by the UT transform, (I + tril(diag(beta) K Kᵀ ⊙ decay, -1))⁻¹ solved by forward
// substitution; the state is read and written once per chunk. Chunks start at each sequence's
// first row of this call. Equal to the recurrent form up to float rounding.
inline constexpr int64_t kGdnChunkLen = 64;
void gated_delta_rule_chunked(const GatedDeltaRuleArgs& args);

// y[rows, dim] = w · rms_norm(x) · silu(z): the GDN output's norm, per value head
// (rows = num_tokens · num_v_heads, dim = head_v_dim). w is used as stored (this norm is not
// zero-centred, unlike the models' other RMSNorms: ops.h's rms_norm with weight_offset 1).
void rms_norm_gated(const float* x, const float* z, const float* w, int64_t rows, int64_t dim,
                    float eps, float* y);

}  // namespace miniinfer::cpu
