#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/scalar_math.h"

namespace miniinfer::cpu {
namespace {

ThreadPool& pool() {
    return ThreadPool::current();
}

}  // namespace

void embedding(const int32_t* ids, int64_t n, const float* table, int64_t hidden, float* out) {
    for (int64_t i = 0; i < n; ++i)
        std::memcpy(out + i * hidden, table + int64_t(ids[i]) * hidden,
                    size_t(hidden) * sizeof(float));
}

// Each task takes a block of weight rows and runs it against every token, so a weight row is
// read from memory once per call, not once per token.
void linear(const float* x, int64_t n, int64_t in, const float* w, const float* bias, int64_t out,
            float* y) {
    pool().parallel_for(
        out,
        [&](int64_t begin, int64_t end) {
            for (int64_t o = begin; o < end; ++o) {
                const float* row = w + o * in;
                const float b = bias ? bias[o] : 0.f;
                for (int64_t t = 0; t < n; ++t) y[t * out + o] = dot(x + t * in, row, in) + b;
            }
        },
        std::max<int64_t>(1, 16384 / std::max<int64_t>(1, in * n)));
}

void rms_norm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y,
              float weight_offset) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * dim;
        float* yr = y + r * dim;
        const float inv_rms = 1.f / std::sqrt(dot(xr, xr, dim) / float(dim) + eps);
        for (int64_t i = 0; i < dim; ++i) yr[i] = (w[i] + weight_offset) * (xr[i] * inv_rms);
    }
}

void add_rms_norm(float* residual, const float* x, const float* w, int64_t rows, int64_t dim,
                  float eps, float* y, float weight_offset) {
    add_inplace(residual, x, rows * dim);
    rms_norm(residual, w, rows, dim, eps, y, weight_offset);
}

void rope_neox(float* x, int64_t n, int64_t num_heads, int64_t head_dim, const int32_t* positions,
               const float* inv_freq, float attention_scale, int64_t rotary_dim) {
    if (rotary_dim == 0) rotary_dim = head_dim;
    const int64_t half = rotary_dim / 2;
    std::vector<float> cos_row(static_cast<size_t>(half)), sin_row(static_cast<size_t>(half));
    for (int64_t t = 0; t < n; ++t) {
        for (int64_t i = 0; i < half; ++i) {
            // The angle is rounded to f32 first, as Hugging Face computes it.
            const float angle = float(positions[t]) * inv_freq[i];
            cos_row[size_t(i)] = float(std::cos(double(angle))) * attention_scale;
            sin_row[size_t(i)] = float(std::sin(double(angle))) * attention_scale;
        }
        for (int64_t h = 0; h < num_heads; ++h) {
            float* v = x + (t * num_heads + h) * head_dim;
            for (int64_t i = 0; i < half; ++i) {
                const float a = v[i], b = v[i + half];
                v[i] = a * cos_row[size_t(i)] - b * sin_row[size_t(i)];
                v[i + half] = b * cos_row[size_t(i)] + a * sin_row[size_t(i)];
            }
        }
    }
}

void mul_sigmoid(float* x, const float* gate, int64_t rows, int64_t cols, int64_t gate_stride) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < cols; ++i) x[r * cols + i] *= sigmoid(gate[r * gate_stride + i]);
}

void add_sigmoid_scaled(float* out, const float* y, const float* gate, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r) {
        const float scale = sigmoid(gate[r]);
        for (int64_t i = 0; i < cols; ++i) out[r * cols + i] += scale * y[r * cols + i];
    }
}

void silu_mul(const float* gate_up, int64_t n, int64_t inter, float* out) {
    for (int64_t t = 0; t < n; ++t) {
        const float* g = gate_up + t * 2 * inter;
        for (int64_t i = 0; i < inter; ++i) out[t * inter + i] = silu(g[i]) * g[inter + i];
    }
}

void store_kv(const float* k, const float* v, const int32_t* slot_mapping, int64_t n,
              int64_t num_kv_heads, int64_t head_dim, float* k_cache, float* v_cache,
              const float* fp8_scales) {
    const int64_t row = num_kv_heads * head_dim;
    for (int64_t t = 0; t < n; ++t) {
        const int64_t slot = slot_mapping[t];
        if (!fp8_scales) {
            std::memcpy(k_cache + slot * row, k + t * row, size_t(row) * sizeof(float));
            std::memcpy(v_cache + slot * row, v + t * row, size_t(row) * sizeof(float));
            continue;
        }
        const float ks = fp8_scales[0], vs = fp8_scales[1];
        for (int64_t i = 0; i < row; ++i) {
            k_cache[slot * row + i] = e4m3_to_f32(f32_to_e4m3(k[t * row + i] / ks)) * ks;
            v_cache[slot * row + i] = e4m3_to_f32(f32_to_e4m3(v[t * row + i] / vs)) * vs;
        }
    }
}

void paged_attention(const PagedAttentionArgs& a) {
    const int64_t num_tokens = a.query_start[a.num_seqs];
    const int64_t group = a.num_heads / a.num_kv_heads;
    const int64_t kv_row = a.num_kv_heads * a.head_dim;
    // Which sequence each query row belongs to.
    std::vector<int32_t> seq_of(static_cast<size_t>(num_tokens));
    for (int64_t s = 0; s < a.num_seqs; ++s)
        for (int32_t t = a.query_start[s]; t < a.query_start[s + 1]; ++t)
            seq_of[size_t(t)] = int32_t(s);

    pool().parallel_for(num_tokens * a.num_heads, [&](int64_t begin, int64_t end) {
        std::vector<float> scores;
        std::vector<float> acc(size_t(a.head_dim));
        for (int64_t job = begin; job < end; ++job) {
            const int64_t t = job / a.num_heads, h = job % a.num_heads, kv_h = h / group;
            const int64_t s = seq_of[size_t(t)];
            const int64_t q_len = a.query_start[s + 1] - a.query_start[s];
            const int64_t num_keys = a.seq_lens[s] - q_len + (t - a.query_start[s]) + 1;
            const int32_t* pages = a.block_table + s * a.max_pages;
            const float* q = a.q + (t * a.num_heads + h) * a.head_dim;
            auto slot = [&](int64_t j) {
                return int64_t(pages[j / a.page_size]) * a.page_size + j % a.page_size;
            };

            scores.resize(size_t(num_keys));
            float max_score = -INFINITY;
            for (int64_t j = 0; j < num_keys; ++j) {
                scores[size_t(j)] =
                    dot(q, a.k_cache + slot(j) * kv_row + kv_h * a.head_dim, a.head_dim) * a.scale;
                max_score = std::max(max_score, scores[size_t(j)]);
            }
            float denom = 0.f;
            for (auto& sc : scores) denom += (sc = std::exp(sc - max_score));
            std::fill(acc.begin(), acc.end(), 0.f);
            for (int64_t j = 0; j < num_keys; ++j) {
                const float p = scores[size_t(j)] / denom;
                const float* v = a.v_cache + slot(j) * kv_row + kv_h * a.head_dim;
                for (int64_t d = 0; d < a.head_dim; ++d) acc[size_t(d)] += p * v[d];
            }
            std::memcpy(a.out + (t * a.num_heads + h) * a.head_dim, acc.data(),
                        size_t(a.head_dim) * sizeof(float));
        }
    });
}

void moe_route(const float* router_logits, int64_t n, int64_t num_experts, int64_t top_k,
               bool renormalize, int32_t* expert_ids, float* weights, const int32_t* forced_ids) {
    std::vector<float> probs(static_cast<size_t>(num_experts));
    std::vector<int32_t> order(static_cast<size_t>(num_experts));
    for (int64_t t = 0; t < n; ++t) {
        const float* logits = router_logits + t * num_experts;
        const float max_logit = *std::max_element(logits, logits + num_experts);
        float sum = 0.f;
        for (int64_t e = 0; e < num_experts; ++e)
            sum += (probs[size_t(e)] = std::exp(logits[e] - max_logit));
        for (auto& p : probs) p /= sum;
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(),
                         [&](int32_t x, int32_t y) { return probs[size_t(x)] > probs[size_t(y)]; });
        if (forced_ids) {
            for (int64_t k = 0; k < top_k; ++k) {
                const int32_t e = forced_ids[t * top_k + k];
                MI_CHECK(e >= 0 && e < num_experts, "forced expert {} of {}", e, num_experts);
                order[size_t(k)] = e;
            }
        }
        float top_sum = 0.f;
        for (int64_t k = 0; k < top_k; ++k) top_sum += probs[size_t(order[size_t(k)])];
        for (int64_t k = 0; k < top_k; ++k) {
            expert_ids[t * top_k + k] = order[size_t(k)];
            weights[t * top_k + k] =
                probs[size_t(order[size_t(k)])] / (renormalize ? top_sum : 1.f);
        }
    }
}

// Tokens are grouped by expert so each expert's weights are used by one linear() over all of
// its tokens; results are added back in (token, k) order so the sum is deterministic.
void moe_experts(const float* x, int64_t n, int64_t hidden, const int32_t* expert_ids,
                 const float* weights, int64_t top_k, const float* gate_up, const float* down,
                 int64_t num_experts, int64_t inter, float* out) {
    std::vector<float> h2, h;
    const ExpertMlp mlp = [&](int64_t e, const float* xs, int64_t m, float* ys) {
        h2.resize(size_t(m * 2 * inter));
        h.resize(size_t(m * inter));
        linear(xs, m, hidden, gate_up + e * 2 * inter * hidden, nullptr, 2 * inter, h2.data());
        silu_mul(h2.data(), m, inter, h.data());
        linear(h.data(), m, inter, down + e * hidden * inter, nullptr, hidden, ys);
    };
    moe_experts(x, n, hidden, expert_ids, weights, top_k, num_experts, mlp, out);
}

void moe_experts(const float* x, int64_t n, int64_t hidden, const int32_t* expert_ids,
                 const float* weights, int64_t top_k, int64_t num_experts, const ExpertMlp& mlp,
                 float* out) {
    std::vector<float> expert_out(size_t(n * top_k * hidden));
    std::vector<float> xs, y;
    for (int64_t e = 0; e < num_experts; ++e) {
        std::vector<int64_t> rows;  // indices into [n * top_k]
        for (int64_t i = 0; i < n * top_k; ++i)
            if (expert_ids[i] == e) rows.push_back(i);
        if (rows.empty()) continue;
        const int64_t m = int64_t(rows.size());
        xs.resize(size_t(m * hidden));
        for (int64_t r = 0; r < m; ++r)
            std::memcpy(&xs[size_t(r * hidden)], x + (rows[size_t(r)] / top_k) * hidden,
                        size_t(hidden) * sizeof(float));
        y.resize(size_t(m * hidden));
        mlp(e, xs.data(), m, y.data());
        for (int64_t r = 0; r < m; ++r)
            std::memcpy(&expert_out[size_t(rows[size_t(r)] * hidden)], &y[size_t(r * hidden)],
                        size_t(hidden) * sizeof(float));
    }
    for (int64_t t = 0; t < n; ++t) {
        float* o = out + t * hidden;
        std::fill(o, o + hidden, 0.f);
        for (int64_t k = 0; k < top_k; ++k) {
            const float wk = weights[t * top_k + k];
            const float* eo = &expert_out[size_t((t * top_k + k) * hidden)];
            for (int64_t i = 0; i < hidden; ++i) o[i] += wk * eo[i];
        }
    }
}

void add_inplace(float* a, const float* b, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) a[i] += b[i];
}

void argmax_rows(const float* x, int64_t rows, int64_t cols, int32_t* out) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = x + r * cols;
        out[r] = int32_t(std::max_element(row, row + cols) - row);
    }
}

}  // namespace miniinfer::cpu
