#include "kernels/cpu/gated_delta_net.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/scalar_math.h"

namespace miniinfer::cpu {
namespace {

// torch.nn.functional.softplus with its defaults (beta 1, threshold 20).
inline float softplus(float x) {
    return x > 20.f ? x : std::log1p(std::exp(x));
}

// dst[n] = src / sqrt(Σsrc² + 1e-6) · scale: transformers' l2norm (eps inside the root, as FLA's).
inline void l2norm(const float* src, int64_t n, float scale, float* dst) {
    const float inv_norm = 1.f / std::sqrt(dot(src, src, n) + 1e-6f);
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i] * inv_norm * scale;
}

// One (sequence, value head) of a delta rule call: where its rows and its state are.
struct HeadJob {
    const GatedDeltaRuleArgs& a;
    int64_t seq, head;

    int64_t begin() const { return a.query_start[seq]; }
    int64_t end() const { return a.query_start[seq + 1]; }
    int64_t row_len() const {
        return 2 * a.num_k_heads * a.head_k_dim + a.num_v_heads * a.head_v_dim;
    }
    int64_t k_head() const { return head / (a.num_v_heads / a.num_k_heads); }
    const float* q(int64_t t) const { return a.qkv + t * row_len() + k_head() * a.head_k_dim; }
    const float* k(int64_t t) const { return q(t) + a.num_k_heads * a.head_k_dim; }
    const float* v(int64_t t) const {
        return a.qkv + t * row_len() + 2 * a.num_k_heads * a.head_k_dim + head * a.head_v_dim;
    }
    float g(int64_t t) const { return a.g[t * a.num_v_heads + head]; }
    float beta(int64_t t) const { return a.beta[t * a.num_v_heads + head]; }
    float* out(int64_t t) const { return a.out + (t * a.num_v_heads + head) * a.head_v_dim; }
    float* state() const { return state_of(a.state_slots[seq]); }
    // The row after which the state is snapshot (-1: none), and the copy to its slot.
    int64_t snapshot_end() const {
        return a.snapshot_rows && a.snapshot_rows[seq] > 0 ? begin() + a.snapshot_rows[seq] : -1;
    }
    void snapshot() const {
        std::copy_n(state(), a.head_k_dim * a.head_v_dim, state_of(a.snapshot_slots[seq]));
    }

  private:
    float* state_of(int32_t slot) const {
        return a.state + (int64_t(slot) * a.num_v_heads + head) * a.head_k_dim * a.head_v_dim;
    }
};

// Runs fn(HeadJob) for every (sequence, value head) of the call, spread over the pool.
template <typename Fn>
void for_each_head(const GatedDeltaRuleArgs& a, Fn fn) {
    ThreadPool::current().parallel_for(a.num_seqs * a.num_v_heads, [&](int64_t lo, int64_t hi) {
        for (int64_t job = lo; job < hi; ++job)
            fn(HeadJob{a, job / a.num_v_heads, job % a.num_v_heads});
    });
}

float q_scale(int64_t head_k_dim) {
    return float(1.0 / std::sqrt(double(head_k_dim)));
}

}  // namespace

void causal_conv1d_silu(const CausalConv1dArgs& a) {
    const int64_t history = a.kernel_len - 1;
    ThreadPool::current().parallel_for(
        a.num_seqs * a.channels,
        [&](int64_t lo, int64_t hi) {
            std::vector<float> window(size_t(a.kernel_len));  // oldest first; last: this row
            for (int64_t job = lo; job < hi; ++job) {
                const int64_t s = job / a.channels, c = job % a.channels;
                const auto state_of = [&](int32_t slot) {
                    return a.conv_state + int64_t(slot) * history * a.channels + c;
                };
                float* state = state_of(a.state_slots[s]);
                const float* w = a.weight + c * a.kernel_len;
                const int64_t snapshot_end = a.snapshot_rows && a.snapshot_rows[s] > 0
                                                 ? a.query_start[s] + a.snapshot_rows[s]
                                                 : -1;
                for (int64_t i = 0; i < history; ++i) window[size_t(i)] = state[i * a.channels];
                for (int64_t t = a.query_start[s]; t < a.query_start[s + 1]; ++t) {
                    // x is read before out is written, and the window keeps its own copy of
                    // the inputs: out may alias x.
                    window[size_t(history)] = a.x[t * a.channels + c];
                    float sum = 0.f;
                    for (int64_t i = 0; i < a.kernel_len; ++i) sum += w[i] * window[size_t(i)];
                    a.out[t * a.channels + c] = silu(sum);
                    std::copy(window.begin() + 1, window.end(), window.begin());
                    if (t + 1 == snapshot_end)
                        for (int64_t i = 0; i < history; ++i)
                            state_of(a.snapshot_slots[s])[i * a.channels] = window[size_t(i)];
                }
                for (int64_t i = 0; i < history; ++i) state[i * a.channels] = window[size_t(i)];
            }
        },
        64);
}

void gdn_gates(const float* a, const float* b, const float* a_log, const float* dt_bias,
               int64_t num_tokens, int64_t num_heads, float* g, float* beta) {
    for (int64_t t = 0; t < num_tokens; ++t)
        for (int64_t h = 0; h < num_heads; ++h) {
            const int64_t i = t * num_heads + h;
            g[i] = -std::exp(a_log[h]) * softplus(a[i] + dt_bias[h]);
            beta[i] = sigmoid(b[i]);
        }
}

void gated_delta_rule_recurrent(const GatedDeltaRuleArgs& args) {
    const int64_t dk = args.head_k_dim, dv = args.head_v_dim;
    const float scale = q_scale(dk);
    for_each_head(args, [&](const HeadJob& job) {
        std::vector<float> q(static_cast<size_t>(dk)), k(static_cast<size_t>(dk)),
            delta(static_cast<size_t>(dv));
        float* S = job.state();  // [dk, dv]
        for (int64_t t = job.begin(); t < job.end(); ++t) {
            l2norm(job.q(t), dk, scale, q.data());
            l2norm(job.k(t), dk, 1.f, k.data());
            const float decay = std::exp(job.g(t)), beta = job.beta(t);
            const float* v = job.v(t);
            for (int64_t i = 0; i < dk * dv; ++i) S[i] *= decay;
            // delta = beta · (v - kᵀS): the part of v the state does not predict yet.
            std::fill(delta.begin(), delta.end(), 0.f);
            for (int64_t i = 0; i < dk; ++i)
                for (int64_t j = 0; j < dv; ++j) delta[size_t(j)] += S[i * dv + j] * k[size_t(i)];
            for (int64_t j = 0; j < dv; ++j) delta[size_t(j)] = (v[j] - delta[size_t(j)]) * beta;
            float* out = job.out(t);
            std::fill(out, out + dv, 0.f);
            for (int64_t i = 0; i < dk; ++i)
                for (int64_t j = 0; j < dv; ++j) {
                    S[i * dv + j] += k[size_t(i)] * delta[size_t(j)];
                    out[j] += S[i * dv + j] * q[size_t(i)];
                }
            if (t + 1 == job.snapshot_end()) job.snapshot();
        }
    });
}

// Per chunk of n <= 64 tokens, with c the cumulative log decay from the chunk's start
// (c_i = g_0 + ... + g_i), decay(i, j) = exp(c_i - c_j), and S the state before the chunk:
//   A    = strictly lower part of (beta_i k_i · k_j) decay(i, j)                     [n, n]
//   U    = (I + A)⁻¹ (beta v),  W = (I + A)⁻¹ (beta exp(c) k)       [n, dv], [n, dk]
//   v'   = U - W S                          (what each token writes, given the old state)
//   out  = exp(c) q S + (lower part with diagonal of (q_i · k_j) decay(i, j)) v'
//   S    = exp(c_last) S + Σ_j exp(c_last - c_j) k_j ⊗ v'_j
// The same steps in the same order as torch_chunk_gated_delta_rule, so the two round alike.
void gated_delta_rule_chunked(const GatedDeltaRuleArgs& args) {
    const int64_t dk = args.head_k_dim, dv = args.head_v_dim, C = kGdnChunkLen;
    const float scale = q_scale(dk);
    for_each_head(args, [&](const HeadJob& job) {
        const auto size = [](int64_t n) { return static_cast<size_t>(n); };
        std::vector<float> q(size(C * dk)), k(size(C * dk)), w(size(C * dk)), u(size(C * dv)),
            c(size(C)), beta(size(C)), attn(size(C * C)), ut(size(C * C)), kb(size(dk)),
            acc(size(dv));
        float* S = job.state();  // [dk, dv]
        const int64_t snapshot_end = job.snapshot_end();
        for (int64_t start = job.begin(), n = 0; start < job.end(); start += n) {
            // A chunk also ends where the state is snapshot.
            n = std::min(C, (start < snapshot_end ? snapshot_end : job.end()) - start);
            double cum = 0;  // torch's cumsum accumulates f32 in double on the CPU
            for (int64_t i = 0; i < n; ++i) {
                const int64_t t = start + i;
                l2norm(job.q(t), dk, scale, &q[size_t(i * dk)]);
                l2norm(job.k(t), dk, 1.f, &k[size_t(i * dk)]);
                beta[size_t(i)] = job.beta(t);
                c[size_t(i)] = float(cum += double(job.g(t)));
            }
            // The UT system (strictly lower part; its unit diagonal is implied) and the
            // intra-chunk attention (lower part with the diagonal).
            for (int64_t i = 0; i < n; ++i) {
                for (int64_t d = 0; d < dk; ++d)
                    kb[size_t(d)] = k[size_t(i * dk + d)] * beta[size_t(i)];
                for (int64_t j = 0; j <= i; ++j) {
                    const float decay = std::exp(c[size_t(i)] - c[size_t(j)]);
                    ut[size_t(i * C + j)] = dot(kb.data(), &k[size_t(j * dk)], dk) * decay;
                    attn[size_t(i * C + j)] =
                        dot(&q[size_t(i * dk)], &k[size_t(j * dk)], dk) * decay;
                }
            }
            // Forward substitution: row i of U and W minus A's row i times the rows above.
            for (int64_t i = 0; i < n; ++i) {
                const float* v = job.v(start + i);
                const float eci = std::exp(c[size_t(i)]);
                for (int64_t d = 0; d < dv; ++d) u[size_t(i * dv + d)] = v[d] * beta[size_t(i)];
                for (int64_t d = 0; d < dk; ++d)
                    w[size_t(i * dk + d)] = k[size_t(i * dk + d)] * beta[size_t(i)] * eci;
                for (int64_t j = 0; j < i; ++j) {
                    const float a = ut[size_t(i * C + j)];
                    for (int64_t d = 0; d < dv; ++d)
                        u[size_t(i * dv + d)] -= a * u[size_t(j * dv + d)];
                    for (int64_t d = 0; d < dk; ++d)
                        w[size_t(i * dk + d)] -= a * w[size_t(j * dk + d)];
                }
            }
            // v' = U - W S, kept in u.
            for (int64_t i = 0; i < n; ++i) {
                std::fill(acc.begin(), acc.end(), 0.f);
                for (int64_t e = 0; e < dk; ++e)
                    for (int64_t d = 0; d < dv; ++d)
                        acc[size_t(d)] += w[size_t(i * dk + e)] * S[e * dv + d];
                for (int64_t d = 0; d < dv; ++d) u[size_t(i * dv + d)] -= acc[size_t(d)];
            }
            // Outputs: the old state read by the decayed query, plus this chunk's writes.
            for (int64_t i = 0; i < n; ++i) {
                const float eci = std::exp(c[size_t(i)]);
                std::fill(acc.begin(), acc.end(), 0.f);
                for (int64_t e = 0; e < dk; ++e) {
                    const float qe = q[size_t(i * dk + e)] * eci;
                    for (int64_t d = 0; d < dv; ++d) acc[size_t(d)] += qe * S[e * dv + d];
                }
                float* out = job.out(start + i);
                for (int64_t d = 0; d < dv; ++d) {
                    float intra = 0.f;
                    for (int64_t j = 0; j <= i; ++j)
                        intra += attn[size_t(i * C + j)] * u[size_t(j * dv + d)];
                    out[d] = acc[size_t(d)] + intra;
                }
            }
            // The state after the chunk.
            const float c_last = c[size_t(n - 1)], chunk_decay = std::exp(c_last);
            for (int64_t e = 0; e < dk; ++e) {
                std::fill(acc.begin(), acc.end(), 0.f);
                for (int64_t j = 0; j < n; ++j) {
                    const float kj = k[size_t(j * dk + e)] * std::exp(c_last - c[size_t(j)]);
                    for (int64_t d = 0; d < dv; ++d) acc[size_t(d)] += kj * u[size_t(j * dv + d)];
                }
                for (int64_t d = 0; d < dv; ++d)
                    S[e * dv + d] = S[e * dv + d] * chunk_decay + acc[size_t(d)];
            }
            if (start + n == snapshot_end) job.snapshot();
        }
    });
}

void rms_norm_gated(const float* x, const float* z, const float* w, int64_t rows, int64_t dim,
                    float eps, float* y) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * dim;
        const float* zr = z + r * dim;
        float* yr = y + r * dim;
        const float inv_rms = 1.f / std::sqrt(dot(xr, xr, dim) / float(dim) + eps);
        for (int64_t i = 0; i < dim; ++i) yr[i] = w[i] * (xr[i] * inv_rms) * silu(zr[i]);
    }
}

}  // namespace miniinfer::cpu
