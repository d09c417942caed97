// The attention block on the GPU, Qwen2 / Qwen3 style:
//
//   QKV GEMM (column-parallel) -> per-head q/k RMSNorm (Qwen3) + rotary + K/V stored into the
//   layer's pages (one fused kernel; on decode steps inside the fa2 decode kernel instead:
//   AttentionParams::qkv_step) -> paged attention (the step's backend) -> O projection
//   (row-parallel)
//
// The hybrids' gated attention: the QKV GEMM also emits a gate per query element after v, and
// attention's output is multiplied by its sigmoid before o_proj; partial rotary (rotary_dim).
//
// Heads are this rank's: num_heads / world query heads and num_kv_heads / world KV heads.
#pragma once

#include <cstdint>

#include "layers/cuda/linear.h"
#include "layers/cuda/step.h"

namespace miniinfer::cuda {

struct Attention {
    // [(heads + 2 kv_heads) * head_dim, hidden] (gated: + heads * head_dim gate rows),
    // column-parallel
    Linear qkv;
    Linear o_proj;          // [hidden, heads * head_dim], row-parallel
    Tensor q_norm, k_norm;  // [head_dim] bf16 (Qwen3) or undefined (Qwen2)
    Tensor inv_freq;        // [rotary_dim / 2] f32: rotary frequencies, shared by every layer
    // Rotary cos/sin multiplier (Rotary::attention_scale: YaRN's attention factor, else 1).
    float rope_scale = 1.f;
    int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
    int64_t rotary_dim = 0;    // < head_dim: partial rotary (the hybrids); 0: head_dim
    bool output_gate = false;  // gated attention (the hybrids)
    float eps = 1e-6f;         // of q_norm / k_norm
    float scale = 1.f;         // softmax scale, 1 / sqrt(head_dim)

    // Scratch shared by every layer, allocated once for the largest step.
    struct Buffers {
        Tensor qkv;  // [max_tokens, qkv's rows]
        Tensor q;    // [max_tokens, heads, head_dim]: normed, rotated
        Tensor out;  // [max_tokens, heads * head_dim]: attention's output, before o_proj
    };
    Buffers allocate_buffers(int64_t max_tokens) const;

    // y = attention(x) for the step's tokens, x the output of the norm `input` (run by qkv);
    // writes this step's K/V into kv.
    void forward(const AddRmsNorm& input, Tensor& y, KvLayer& kv, const Step& step,
                 Buffers& buf) const;
};

}  // namespace miniinfer::cuda
