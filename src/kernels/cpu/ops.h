// CPU reference kernels: plain loops over raw pointers, fp32 in and out, fp32 accumulation.
// The reference every CUDA kernel is tested against, and the CI backend. Kernels trust their
// inputs (the layers check shapes); loops that matter are spread over the global ThreadPool.
//
// Shapes are written outermost first; all buffers are contiguous, row-major.
#pragma once

#include <cstdint>
#include <functional>

namespace miniinfer::cpu {

// out[n, hidden] = table[ids[i], :]
void embedding(const int32_t* ids, int64_t n, const float* table, int64_t hidden, float* out);

// y[n, out] = x[n, in] · w[out, in]ᵀ (+ bias[out]). y must not alias x.
void linear(const float* x, int64_t n, int64_t in, const float* w, const float* bias, int64_t out,
            float* y);

// y[rows, dim] = x / sqrt(mean(x²) + eps) * (w[dim] + weight_offset). y may alias x.
// weight_offset 1: zero-centred weights (Qwen3.5's and Qwen3-Next's norms, x * (1 + w)), the
// sum 1 + w rounded to f32 before the product as transformers computes it; 0 leaves w as is.
void rms_norm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y,
              float weight_offset = 0.f);

// residual[rows, dim] += x; y = rms_norm(residual). The pre-norm decoder's "add & norm".
void add_rms_norm(float* residual, const float* x, const float* w, int64_t rows, int64_t dim,
                  float eps, float* y, float weight_offset = 0.f);

// Rotary embedding, NeoX layout (rotate the two halves of each head), in place.
// x: [n, num_heads, head_dim]; positions[n]; inv_freq[rotary_dim / 2]; cos and sin are each
// multiplied by attention_scale (YaRN's attention factor; 1 leaves them as they are).
// rotary_dim < head_dim (partial rotary, the hybrids): only each head's first rotary_dim
// dimensions rotate, as two halves of rotary_dim / 2; the rest pass through. 0: head_dim.
void rope_neox(float* x, int64_t n, int64_t num_heads, int64_t head_dim, const int32_t* positions,
               const float* inv_freq, float attention_scale = 1.f, int64_t rotary_dim = 0);

// x[r, i] *= sigmoid(gate[r * gate_stride + i]) for x [rows, cols]: the hybrids' gated
// attention output (its gate columns inside the QKV projection's rows).
void mul_sigmoid(float* x, const float* gate, int64_t rows, int64_t cols, int64_t gate_stride);

// out[r, i] += sigmoid(gate[r]) * y[r, i] for [rows, cols]: the hybrids' shared expert.
void add_sigmoid_scaled(float* out, const float* y, const float* gate, int64_t rows, int64_t cols);

// out[n, inter] = silu(gate_up[:, :inter]) * gate_up[:, inter:]
void silu_mul(const float* gate_up, int64_t n, int64_t inter, float* out);

// Writes each new token's K and V into its slot of the paged cache.
// k, v: [n, num_kv_heads, head_dim]; slot_mapping[n] = page * page_size + offset;
// k_cache, v_cache: [num_pages, page_size, num_kv_heads, head_dim].
// With fp8_scales {k_scale, v_scale} (null: exact copies) each value is stored as
// e4m3(x / scale) * scale: the numbers an FP8 e4m3 cache holds (core/dtype.h).
void store_kv(const float* k, const float* v, const int32_t* slot_mapping, int64_t n,
              int64_t num_kv_heads, int64_t head_dim, float* k_cache, float* v_cache,
              const float* fp8_scales = nullptr);

// Causal grouped-query attention over paged K/V, for a flattened batch of sequences.
// Sequence s owns query rows [query_start[s], query_start[s+1]); they are the last rows of its
// seq_lens[s] context, so row i of a q_len-row chunk sees keys [0, seq_len - q_len + i].
// q, out: [num_tokens, num_heads, head_dim]; block_table: [num_seqs, max_pages] page ids.
struct PagedAttentionArgs {
    const float* q;
    const float* k_cache;
    const float* v_cache;
    const int32_t* query_start;
    const int32_t* seq_lens;
    const int32_t* block_table;
    int64_t num_seqs, max_pages, page_size;
    int64_t num_heads, num_kv_heads, head_dim;
    float scale;
    float* out;
};
void paged_attention(const PagedAttentionArgs& args);

// Mixture-of-experts routing: softmax over router_logits[n, num_experts], the top_k experts
// (ties to the lower index), optionally renormalised to sum to 1.
// expert_ids, weights: [n, top_k]. forced_ids ([n, top_k], tests): these experts in place of the
// top_k, weighted by their probabilities the same way.
void moe_route(const float* router_logits, int64_t n, int64_t num_experts, int64_t top_k,
               bool renormalize, int32_t* expert_ids, float* weights,
               const int32_t* forced_ids = nullptr);

// out[n, hidden] = Σ_k weights[t,k] · down_e(silu(gate_e x) * up_e x), e = expert_ids[t,k].
// gate_up: [num_experts, 2 * inter, hidden]; down: [num_experts, hidden, inter].
void moe_experts(const float* x, int64_t n, int64_t hidden, const int32_t* expert_ids,
                 const float* weights, int64_t top_k, const float* gate_up, const float* down,
                 int64_t num_experts, int64_t inter, float* out);

// The same with each expert's MLP given (an FP8 model's block-scaled experts):
// mlp(e, xs[m, hidden], m, ys[m, hidden]) computes expert e on m rows.
using ExpertMlp = std::function<void(int64_t expert, const float* xs, int64_t m, float* ys)>;
void moe_experts(const float* x, int64_t n, int64_t hidden, const int32_t* expert_ids,
                 const float* weights, int64_t top_k, int64_t num_experts, const ExpertMlp& mlp,
                 float* out);

// a[n] += b[n]
void add_inplace(float* a, const float* b, int64_t n);

// Index of the largest value of each row (first on ties). x: [rows, cols].
void argmax_rows(const float* x, int64_t rows, int64_t cols, int32_t* out);

}  // namespace miniinfer::cpu
