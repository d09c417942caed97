// The CPU reference's building blocks of a decoder, each owning its f32 host weights. The GPU
// has its own blocks (layers/cuda/), written for speed against the same semantics.
// Activations are [num_tokens, ...] f32 tensors; every forward returns a new tensor and leaves
// its inputs alone unless it says so.
#pragma once

#include <span>
#include <utility>
#include <vector>

#include "config/model_config.h"
#include "core/tensor.h"
#include "layers/forward_batch.h"

namespace miniinfer {

// An FP8 checkpoint's projection holds e4m3 weights and their block scales: its forward is the
// block-scaled W8A8 product (kernels/cpu/fp8_linear.h); any other weight is f32.
struct Linear {
    Linear() = default;
    Linear(Tensor weight, Tensor bias, Tensor weight_scale = {})
        : weight(std::move(weight)), bias(std::move(bias)), weight_scale(std::move(weight_scale)) {}

    Tensor weight;        // [out, in] f32, or e4m3 with weight_scale
    Tensor bias;          // [out] or undefined
    Tensor weight_scale;  // [ceil(out / 128), ceil(in / 128)] f32 for e4m3 weights, else undefined
    Tensor forward(const Tensor& x) const;  // [n, in] -> [n, out]
};

struct RMSNorm {
    Tensor weight;  // [dim]
    float eps = 1e-6f;
    float weight_offset = 0.f;  // 1: zero-centred weights, x * (1 + w) (the hybrids)
    // x: [rows, dim] (or [n, heads, dim]: normalises each head).
    Tensor forward(const Tensor& x) const;
    // residual += x, then returns norm(residual). Mutates residual.
    Tensor forward_add(const Tensor& x, Tensor& residual) const;
};

// Rotary position embedding, NeoX layout, with the config's scaling (none, linear, YaRN) computed
// as transformers computes it: per-dimension inverse frequencies and a cos/sin multiplier.
class Rotary {
  public:
    Rotary() = default;  // head_dim 0: set before use
    // rotary_dim < head_dim: partial rotary (the hybrids), the frequencies those of a
    // rotary_dim-wide head, as transformers computes them; 0: head_dim.
    Rotary(int64_t head_dim, double theta, const RopeScaling& scaling = {}, int64_t rotary_dim = 0);
    void apply(Tensor& x,
               std::span<const int32_t> positions) const;  // x: [n, heads, head_dim], in place
    const std::vector<float>& inv_freq() const { return inv_freq_; }  // [rotary_dim / 2]
    // cos and sin are multiplied by it (YaRN's attention factor; 1 otherwise).
    float attention_scale() const { return attention_scale_; }

  private:
    int64_t head_dim_ = 0, rotary_dim_ = 0;
    std::vector<float> inv_freq_;
    float attention_scale_ = 1.f;
};

// Stores this step's K/V into the layer's pages, then attends over all of each sequence's pages.
// The reference for the GPU's attention backends (layers/cuda/attention_backend.h).
struct PagedAttention {
    int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
    float scale = 1.f;
    // FP8 KV cache (EngineConfig::kv_cache_dtype): > 0, K and V are stored rounded to e4m3 at
    // these scales (cpu::store_kv); 0, exactly.
    float fp8_k_scale = 0.f, fp8_v_scale = 0.f;
    // q: [n, num_heads, head_dim]; k, v: [n, num_kv_heads, head_dim] -> [n, num_heads * head_dim]
    Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const ForwardBatch& batch,
                   const Tensor& k_cache, const Tensor& v_cache, int64_t page_size) const;
};

// The attention block, Qwen2 / Qwen3 style (layers/cuda/attention.h is its GPU twin):
//   QKV projection -> per-head q/k RMSNorm (Qwen3) -> rotary -> paged attention -> O projection
// The hybrids' gated attention: qkv also emits a gate per query dimension after v, and the
// attention's output is multiplied by sigmoid(gate) before o_proj.
struct Attention {
    Linear qkv;     // [(heads + 2 kv_heads) * head_dim, hidden]; output_gate: + heads * head_dim
    Linear o_proj;  // [hidden, heads * head_dim]
    RMSNorm q_norm, k_norm;  // [head_dim] (Qwen3), or undefined weights (Qwen2)
    Rotary rotary;
    PagedAttention attention;
    bool output_gate = false;
    // x: [n, hidden], already normed -> [n, hidden]; writes this step's K/V into the caches.
    Tensor forward(const Tensor& x, const ForwardBatch& batch, const Tensor& k_cache,
                   const Tensor& v_cache, int64_t page_size) const;
};

struct DenseMlp {
    Linear gate_up;  // [2 * inter, hidden]: gate rows, then up rows
    Linear down;     // [hidden, inter]
    Tensor forward(const Tensor& x) const;
};

// Qwen3-MoE sparse block: softmax router, top-k experts, optional renormalisation; the
// hybrids' MoE adds a shared expert on every token, scaled by sigmoid(shared_gate . x).
struct FusedMoE {
    Linear router;   // [num_experts, hidden], no bias
    Tensor gate_up;  // [num_experts, 2 * inter, hidden] f32, or e4m3 with gate_up_scale
    Tensor down;     // [num_experts, hidden, inter] f32, or e4m3 with down_scale
    // FP8 experts: each expert's block scales, [num_experts, 2 * inter / 128, ceil(hidden / 128)]
    // and [num_experts, ceil(hidden / 128), ceil(inter / 128)] f32; else undefined.
    Tensor gate_up_scale, down_scale;
    int64_t top_k = 0;
    bool renormalize = true;
    // Expert parallelism: only experts [expert_begin, expert_end) are computed (a rank's
    // partial sum); expert_end -1: all of them.
    int64_t expert_begin = 0, expert_end = -1;
    DenseMlp shared;     // undefined weights: no shared expert
    Linear shared_gate;  // [1, hidden]
    // forced_ids (tests; QwenModel::force_routing): [n * top_k] experts taken in place of the
    // router's top-k, weighted by their router probabilities (renormalised as configured).
    Tensor forward(const Tensor& x, std::span<const int32_t> forced_ids = {}) const;
};

// The hybrids' Gated DeltaNet block (linear attention), kernels/cpu/gated_delta_net.h's ops
// strung together as transformers' Qwen3_5GatedDeltaNet:
//   in_proj_qkv -> causal conv1d + SiLU -> gated delta rule (q, k L2-normalised; state S per
//   value head) -> RMSNorm(o) * w * silu(in_proj_z x) -> out_proj
// with g = -exp(A_log) softplus(in_proj_a x + dt_bias) and beta = sigmoid(in_proj_b x). Each
// sequence's conv window and S live in slot batch.state_slots[s] of the layer's state tensors
// (kvcache/state_cache.h), and batch.snapshot_rows copy them mid-step; the chunked rule runs
// prefill and decode alike.
struct GatedDeltaNet {
    Linear in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, out_proj;
    Tensor conv1d;          // [conv_dim, kernel]
    Tensor A_log, dt_bias;  // [num_v_heads]
    Tensor norm;            // [head_v_dim]
    int64_t num_k_heads = 0, num_v_heads = 0, head_k_dim = 0, head_v_dim = 0;
    float eps = 1e-6f;
    // x: [n, hidden], already normed -> [n, hidden]; advances the sequences' states.
    Tensor forward(const Tensor& x, const ForwardBatch& batch, Tensor& conv_state,
                   Tensor& recurrent_state) const;
};

// Rows `ids` of the embedding table: [n] -> [n, hidden].
Tensor embed(const Tensor& table, std::span<const int32_t> ids);

}  // namespace miniinfer
