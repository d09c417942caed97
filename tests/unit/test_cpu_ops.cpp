// CPU reference kernels against straightforward formulas (double precision) on random inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/ops.h"
#include "layers/layers.h"

using namespace miniinfer;

namespace {
std::vector<float> randn(size_t n, std::mt19937& rng, float scale = 1.f) {
    std::normal_distribution<float> d(0.f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}
}  // namespace

TEST(CpuOps, LinearWithBias) {
    std::mt19937 rng(1);
    for (auto [n, in, out] : {std::tuple{1, 7, 5}, {9, 64, 33}, {4, 130, 257}}) {
        auto x = randn(size_t(n * in), rng), w = randn(size_t(out * in), rng),
             b = randn(size_t(out), rng);
        std::vector<float> y(size_t(n * out));
        cpu::linear(x.data(), n, in, w.data(), b.data(), out, y.data());
        for (int t = 0; t < n; ++t)
            for (int o = 0; o < out; ++o) {
                double ref = b[size_t(o)];
                for (int i = 0; i < in; ++i)
                    ref += double(x[size_t(t * in + i)]) * w[size_t(o * in + i)];
                ASSERT_NEAR(y[size_t(t * out + o)], ref, 1e-4 * (1 + std::fabs(ref)));
            }
    }
}

TEST(CpuOps, RmsNormAndAddRmsNorm) {
    std::mt19937 rng(2);
    const int rows = 5, dim = 96;
    const float eps = 1e-6f;
    auto x = randn(rows * dim, rng, 3.f), w = randn(dim, rng), r = randn(rows * dim, rng);
    std::vector<float> y(rows * dim);
    cpu::rms_norm(x.data(), w.data(), rows, dim, eps, y.data());
    auto expect_norm = [&](const std::vector<float>& in, const std::vector<float>& out) {
        for (int i = 0; i < rows; ++i) {
            double ss = 0;
            for (int j = 0; j < dim; ++j)
                ss += double(in[size_t(i * dim + j)]) * in[size_t(i * dim + j)];
            const double inv = 1.0 / std::sqrt(ss / dim + eps);
            for (int j = 0; j < dim; ++j)
                ASSERT_NEAR(out[size_t(i * dim + j)], w[size_t(j)] * in[size_t(i * dim + j)] * inv,
                            1e-5);
        }
    };
    expect_norm(x, y);
    std::vector<float> sum(rows * dim);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = r[i] + x[i];
    cpu::add_rms_norm(r.data(), x.data(), w.data(), rows, dim, eps, y.data());
    EXPECT_EQ(r, sum);  // the residual now holds the sum
    expect_norm(sum, y);
}

TEST(CpuOps, RotaryMatchesRotationFormula) {
    std::mt19937 rng(3);
    for (int head_dim : {8, 64, 128}) {
        for (double factor : {1.0, 4.0}) {
            const int n = 6, heads = 3;
            const double theta = 1e6;
            const RopeScaling linear{
                .kind = factor == 1.0 ? RopeScaling::Kind::kNone : RopeScaling::Kind::kLinear,
                .factor = factor};
            Rotary rotary(head_dim, theta, linear);
            std::vector<int32_t> pos = {0, 1, 2, 17, 255, 300};
            auto x = randn(size_t(n * heads * head_dim), rng);
            Tensor t = Tensor::zeros({n, heads, head_dim}, DType::kF32);
            std::copy(x.begin(), x.end(), t.data<float>());
            rotary.apply(t, pos);
            const int half = head_dim / 2;
            for (int i = 0; i < n; ++i)
                for (int h = 0; h < heads; ++h)
                    for (int j = 0; j < half; ++j) {
                        const double angle =
                            pos[size_t(i)] / factor * std::pow(theta, -2.0 * j / head_dim);
                        const size_t base = size_t((i * heads + h) * head_dim);
                        const double a = x[base + size_t(j)], b = x[base + size_t(j + half)];
                        ASSERT_NEAR(t.data<float>()[base + size_t(j)],
                                    a * std::cos(angle) - b * std::sin(angle), 2e-4);
                        ASSERT_NEAR(t.data<float>()[base + size_t(j + half)],
                                    b * std::cos(angle) + a * std::sin(angle), 2e-4);
                    }
        }
    }
}

// YaRN against its formula in double (transformers' _compute_yarn_parameters): dimensions
// that turn more than beta_fast times over the original context keep their frequency, fewer
// than beta_slow times are divided by factor, a linear ramp between; cos and sin scaled by the
// attention factor.
TEST(CpuOps, RotaryYarnFrequenciesAndScale) {
    for (const bool truncate : {true, false}) {
        const int64_t d = 128;
        const double theta = 1e6, factor = 4.0, fast = 32.0, slow = 1.0;
        const int64_t original = 64;
        const RopeScaling yarn{.kind = RopeScaling::Kind::kYarn,
                               .factor = factor,
                               .original_max_position_embeddings = original,
                               .beta_fast = fast,
                               .beta_slow = slow,
                               .attention_factor = 0.1 * std::log(factor) + 1.0,
                               .truncate = truncate};
        const Rotary rotary(d, theta, yarn);
        EXPECT_FLOAT_EQ(rotary.attention_scale(), float(0.1 * std::log(4.0) + 1.0));
        auto dim_of = [&](double rotations) {
            return d * std::log(double(original) / (rotations * 2 * M_PI)) / (2 * std::log(theta));
        };
        double low = dim_of(fast), high = dim_of(slow);
        if (truncate) low = std::floor(low), high = std::ceil(high);
        low = std::max(low, 0.0);
        high = std::min(high, double(d - 1));
        int64_t kept = 0, divided = 0;
        for (int64_t i = 0; i < d / 2; ++i) {
            const double base = std::pow(theta, -2.0 * double(i) / double(d));
            const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
            const double want = base / factor * ramp + base * (1 - ramp);
            EXPECT_NEAR(rotary.inv_freq()[size_t(i)], want, 1e-6 * want) << i;
            kept += ramp == 0.0;
            divided += ramp == 1.0;
        }
        EXPECT_GT(kept, 0);  // both ends of the range are in this head
        EXPECT_GT(divided, 0);

        // cos and sin carry the attention factor: a rotated vector's norm grows by it.
        Tensor x = Tensor::zeros({1, 1, d}, DType::kF32);
        for (int64_t i = 0; i < d; ++i) x.data<float>()[i] = float(i % 7) - 3.f;
        double before = 0, after = 0;
        for (int64_t i = 0; i < d; ++i) before += double(x.data<float>()[i]) * x.data<float>()[i];
        const int32_t pos = 1000;
        rotary.apply(x, std::span(&pos, 1));
        for (int64_t i = 0; i < d; ++i) after += double(x.data<float>()[i]) * x.data<float>()[i];
        EXPECT_NEAR(std::sqrt(after / before), rotary.attention_scale(), 1e-5);
    }
}

TEST(CpuOps, RotaryScoresDependOnlyOnDistance) {
    std::mt19937 rng(4);
    const int d = 64;
    Rotary rotary(d, 10000.0);
    auto q = randn(d, rng), k = randn(d, rng);
    auto score = [&](int qp, int kp) {
        Tensor tq = Tensor::zeros({1, 1, d}, DType::kF32),
               tk = Tensor::zeros({1, 1, d}, DType::kF32);
        std::copy(q.begin(), q.end(), tq.data<float>());
        std::copy(k.begin(), k.end(), tk.data<float>());
        int32_t pq = qp, pk = kp;
        rotary.apply(tq, std::span(&pq, 1));
        rotary.apply(tk, std::span(&pk, 1));
        double s = 0;
        for (int i = 0; i < d; ++i) s += double(tq.data<float>()[i]) * tk.data<float>()[i];
        return s;
    };
    EXPECT_NEAR(score(10, 3), score(107, 100), 1e-3);
    EXPECT_NEAR(score(5, 5), score(60, 60), 1e-3);
}

TEST(CpuOps, SiluMul) {
    std::vector<float> gu = {1.f, -2.f, 0.5f,
                             3.f};  // one token, inter 2: gate (1, -2), up (0.5, 3)
    std::vector<float> out(2);
    cpu::silu_mul(gu.data(), 1, 2, out.data());
    EXPECT_NEAR(out[0], 1.0 / (1 + std::exp(-1.0)) * 0.5, 1e-6);
    EXPECT_NEAR(out[1], -2.0 / (1 + std::exp(2.0)) * 3.0, 1e-6);
}

// Paged attention against dense causal attention over contiguous K/V, with shuffled pages,
// cached prefixes (query chunk shorter than the context), and several GQA ratios.
TEST(CpuOps, PagedAttentionMatchesDenseCausal) {
    std::mt19937 rng(5);
    struct Case {
        int heads, kv_heads, head_dim, page_size;
    };
    for (Case c :
         {Case{4, 4, 8, 1}, {4, 2, 64, 16}, {7, 1, 64, 3}, {8, 1, 128, 16}, {16, 2, 128, 256}}) {
        const std::vector<int> seq_lens = {1, 17, 40, 5};
        const std::vector<int> q_lens = {
            1, 17, 9, 1};  // prefill, prefill, chunk after a cached prefix, decode
        const int num_seqs = int(seq_lens.size());
        int max_pages = 0, total_pages = 0;
        for (int len : seq_lens) {
            max_pages = std::max(max_pages, (len + c.page_size - 1) / c.page_size);
            total_pages += (len + c.page_size - 1) / c.page_size;
        }
        std::vector<int32_t> page_ids(static_cast<size_t>(total_pages));
        std::iota(page_ids.begin(), page_ids.end(), 0);
        std::shuffle(page_ids.begin(), page_ids.end(), rng);
        std::vector<int32_t> block_table(size_t(num_seqs * max_pages), -1);
        std::vector<int32_t> query_start = {0};
        const int row = c.kv_heads * c.head_dim;
        std::vector<float> k_cache(size_t(total_pages * c.page_size * row)),
            v_cache(k_cache.size());
        std::vector<std::vector<float>> dense_k(static_cast<size_t>(num_seqs)),
            dense_v(static_cast<size_t>(num_seqs));
        int next_page = 0;
        for (int s = 0; s < num_seqs; ++s) {
            for (int p = 0; p * c.page_size < seq_lens[size_t(s)]; ++p)
                block_table[size_t(s * max_pages + p)] = page_ids[size_t(next_page++)];
            dense_k[size_t(s)] = randn(size_t(seq_lens[size_t(s)] * row), rng);
            dense_v[size_t(s)] = randn(size_t(seq_lens[size_t(s)] * row), rng);
            for (int j = 0; j < seq_lens[size_t(s)]; ++j) {
                const int slot =
                    block_table[size_t(s * max_pages + j / c.page_size)] * c.page_size +
                    j % c.page_size;
                std::copy_n(&dense_k[size_t(s)][size_t(j * row)], row,
                            &k_cache[size_t(slot * row)]);
                std::copy_n(&dense_v[size_t(s)][size_t(j * row)], row,
                            &v_cache[size_t(slot * row)]);
            }
            query_start.push_back(query_start.back() + q_lens[size_t(s)]);
        }
        const int num_tokens = query_start.back();
        auto q = randn(size_t(num_tokens * c.heads * c.head_dim), rng);
        std::vector<float> out(q.size());
        const float scale = 1.f / std::sqrt(float(c.head_dim));
        cpu::paged_attention({q.data(), k_cache.data(), v_cache.data(), query_start.data(),
                              seq_lens.data(), block_table.data(), num_seqs, max_pages, c.page_size,
                              c.heads, c.kv_heads, c.head_dim, scale, out.data()});
        for (int s = 0; s < num_seqs; ++s)
            for (int i = 0; i < q_lens[size_t(s)]; ++i) {
                const int t = query_start[size_t(s)] + i;
                const int visible = seq_lens[size_t(s)] - q_lens[size_t(s)] + i + 1;
                for (int h = 0; h < c.heads; ++h) {
                    const int kh = h / (c.heads / c.kv_heads);
                    std::vector<double> p(static_cast<size_t>(visible));
                    double mx = -1e300, sum = 0;
                    for (int j = 0; j < visible; ++j) {
                        double dot = 0;
                        for (int d = 0; d < c.head_dim; ++d)
                            dot += double(q[size_t((t * c.heads + h) * c.head_dim + d)]) *
                                   dense_k[size_t(s)][size_t(j * row + kh * c.head_dim + d)];
                        p[size_t(j)] = dot * scale;
                        mx = std::max(mx, p[size_t(j)]);
                    }
                    for (auto& x : p) sum += (x = std::exp(x - mx));
                    for (int d = 0; d < c.head_dim; ++d) {
                        double ref = 0;
                        for (int j = 0; j < visible; ++j)
                            ref += p[size_t(j)] / sum *
                                   dense_v[size_t(s)][size_t(j * row + kh * c.head_dim + d)];
                        ASSERT_NEAR(out[size_t((t * c.heads + h) * c.head_dim + d)], ref, 2e-5)
                            << "heads " << c.heads << "/" << c.kv_heads << " d " << c.head_dim
                            << " page " << c.page_size << " seq " << s << " row " << i;
                    }
                }
            }
    }
}

TEST(CpuOps, StoreKvWritesSlots) {
    const int kvh = 2, d = 4, page_size = 4, pages = 3;
    std::vector<float> k(3 * kvh * d), v(k.size());
    std::iota(k.begin(), k.end(), 0.f);
    std::iota(v.begin(), v.end(), 100.f);
    std::vector<float> kc(size_t(pages * page_size * kvh * d), -1.f), vc(kc.size(), -1.f);
    const int32_t slots[3] = {5, 0, 11};
    cpu::store_kv(k.data(), v.data(), slots, 3, kvh, d, kc.data(), vc.data());
    EXPECT_EQ(kc[5 * kvh * d], 0.f);
    EXPECT_EQ(kc[0], float(kvh * d));
    EXPECT_EQ(vc[11 * kvh * d + kvh * d - 1], 100.f + float(3 * kvh * d - 1));
    EXPECT_EQ(kc[1 * kvh * d], -1.f);  // untouched slot
}

TEST(CpuOps, MoeRouteSoftmaxTopK) {
    std::mt19937 rng(6);
    const int n = 7, E = 8, K = 3;
    auto logits = randn(n * E, rng, 2.f);
    for (bool renorm : {false, true}) {
        std::vector<int32_t> ids(n * K);
        std::vector<float> w(n * K);
        cpu::moe_route(logits.data(), n, E, K, renorm, ids.data(), w.data());
        for (int t = 0; t < n; ++t) {
            std::vector<double> p(E);
            double sum = 0;
            for (int e = 0; e < E; ++e)
                sum += (p[size_t(e)] = std::exp(double(logits[size_t(t * E + e)])));
            for (auto& x : p) x /= sum;
            std::vector<int> order(E);
            std::iota(order.begin(), order.end(), 0);
            std::sort(order.begin(), order.end(),
                      [&](int a, int b) { return p[size_t(a)] > p[size_t(b)]; });
            double top = 0;
            for (int k = 0; k < K; ++k) top += p[size_t(order[size_t(k)])];
            for (int k = 0; k < K; ++k) {
                EXPECT_EQ(ids[size_t(t * K + k)], order[size_t(k)]);
                EXPECT_NEAR(w[size_t(t * K + k)],
                            p[size_t(order[size_t(k)])] / (renorm ? top : 1.0), 1e-6);
            }
        }
    }
}

TEST(CpuOps, MoeExpertsMatchPerTokenLoop) {
    std::mt19937 rng(7);
    const int n = 5, H = 16, I = 8, E = 4, K = 2;
    auto x = randn(n * H, rng), gate_up = randn(E * 2 * I * H, rng, 0.3f),
         down = randn(E * H * I, rng, 0.3f);
    std::vector<int32_t> ids = {0, 3, 1, 0, 2, 3, 3, 1, 0, 2};
    std::vector<float> w = {0.6f, 0.4f, 0.5f, 0.5f, 0.9f, 0.1f, 0.7f, 0.3f, 0.2f, 0.8f};
    std::vector<float> out(n * H);
    cpu::moe_experts(x.data(), n, H, ids.data(), w.data(), K, gate_up.data(), down.data(), E, I,
                     out.data());
    for (int t = 0; t < n; ++t)
        for (int o = 0; o < H; ++o) {
            double ref = 0;
            for (int k = 0; k < K; ++k) {
                const int e = ids[size_t(t * K + k)];
                double y = 0;
                for (int i = 0; i < I; ++i) {
                    double g = 0, u = 0;
                    for (int j = 0; j < H; ++j) {
                        g +=
                            double(gate_up[size_t((e * 2 * I + i) * H + j)]) * x[size_t(t * H + j)];
                        u += double(gate_up[size_t((e * 2 * I + I + i) * H + j)]) *
                             x[size_t(t * H + j)];
                    }
                    y += down[size_t((e * H + o) * I + i)] * (g / (1 + std::exp(-g)) * u);
                }
                ref += w[size_t(t * K + k)] * y;
            }
            ASSERT_NEAR(out[size_t(t * H + o)], ref, 1e-4);
        }
}

TEST(CpuOps, ArgmaxFirstOnTies) {
    std::vector<float> x = {1, 3, 3, 2, -1, -1, -5, -1};
    int32_t out[2];
    cpu::argmax_rows(x.data(), 2, 4, out);
    EXPECT_EQ(out[0], 1);
    EXPECT_EQ(out[1], 0);
}
