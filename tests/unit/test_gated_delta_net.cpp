// The Gated DeltaNet ops (kernels/cpu/gated_delta_net.h) against Hugging Face's torch functions:
// goldens in tests/fixtures/gdn-ops/gdn_ops.safetensors, made by tools/make_gdn_goldens.py on a
// flattened batch of 1, 5, 63, 64, 65 and 130 tokens (some from a state, some from zeros), 2 key
// heads repeated to 4 value heads, head_k_dim 16, head_v_dim 8. Errors are measured against the
// largest value of the golden and printed ("measured:" lines).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/json.h"
#include "kernels/cpu/gated_delta_net.h"
#include "kernels/cpu/ops.h"
#include "loader/safetensors.h"

using namespace miniinfer;

namespace {

constexpr double kTolerance = 1e-5;  // of the golden's largest magnitude

struct Goldens {
    SafetensorsFile file =
        SafetensorsFile::open(std::string(MINIINFER_FIXTURES) + "/gdn-ops/gdn_ops.safetensors");
    Json config = Json::parse(file.metadata().at("config"));
    std::vector<int32_t> seq_lens = config.at("seq_lens").get<std::vector<int32_t>>();
    std::vector<int32_t> query_start = prefix_sums(seq_lens);
    int64_t num_seqs = int64_t(seq_lens.size());
    int64_t num_tokens = query_start.back();
    int64_t num_k_heads = config.at("num_k_heads"), num_v_heads = config.at("num_v_heads");
    int64_t head_k_dim = config.at("head_k_dim"), head_v_dim = config.at("head_v_dim");
    int64_t channels = config.at("conv_channels"), kernel_len = config.at("conv_kernel");
    float eps = config.at("eps");

    std::vector<float> operator[](const std::string& name) const {
        const Tensor t = file.tensor(name).to_f32();
        return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
    }
    static std::vector<int32_t> prefix_sums(const std::vector<int32_t>& lens) {
        std::vector<int32_t> starts = {0};
        for (int32_t n : lens) starts.push_back(starts.back() + n);
        return starts;
    }
    int64_t qkv_row() const { return 2 * num_k_heads * head_k_dim + num_v_heads * head_v_dim; }
    // The delta rule's input as the conv lays it out: [q heads | k heads | v heads] per row.
    std::vector<float> qkv() const {
        const auto q = (*this)["delta.q"], k = (*this)["delta.k"], v = (*this)["delta.v"];
        const int64_t qk = num_k_heads * head_k_dim, vd = num_v_heads * head_v_dim;
        std::vector<float> out(size_t(num_tokens * qkv_row()));
        for (int64_t t = 0; t < num_tokens; ++t) {
            std::copy_n(&q[size_t(t * qk)], qk, &out[size_t(t * qkv_row())]);
            std::copy_n(&k[size_t(t * qk)], qk, &out[size_t(t * qkv_row() + qk)]);
            std::copy_n(&v[size_t(t * vd)], vd, &out[size_t(t * qkv_row() + 2 * qk)]);
        }
        return out;
    }
};

const Goldens& goldens() {
    static const Goldens g;
    return g;
}

// max |got - want| / max |want|, printed under `what`.
double relative_error(const std::vector<float>& got, const std::vector<float>& want,
                      const std::string& what) {
    EXPECT_EQ(got.size(), want.size()) << what;
    double max_err = 0, max_ref = 0;
    for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
        max_err = std::max(max_err, std::fabs(double(got[i]) - want[i]));
        max_ref = std::max(max_ref, std::fabs(double(want[i])));
    }
    const double rel = max_err / std::max(max_ref, 1e-30);
    std::printf("measured: %-58s max |err| %.3g, largest %.3g, relative %.3g\n", what.c_str(),
                max_err, max_ref, rel);
    return rel;
}

// Per-sequence states [num_seqs, per_seq] placed in a pool at shuffled slots, two spare slots
// holding a sentinel that must survive the call.
struct StatePool {
    int64_t per_seq;
    std::vector<int32_t> slots;
    std::vector<float> pool;
    static constexpr float kSentinel = 12345.f;

    StatePool(const std::vector<float>& states, int64_t num_seqs)
        : per_seq(int64_t(states.size()) / num_seqs),
          slots(size_t(num_seqs)),
          pool(size_t((num_seqs + 2) * per_seq), kSentinel) {
        for (int64_t s = 0; s < num_seqs; ++s)
            slots[size_t(s)] = int32_t((s * 5 + 3) % (num_seqs + 2));
        for (int64_t s = 0; s < num_seqs; ++s)
            std::copy_n(&states[size_t(s * per_seq)], per_seq, slot(s));
    }
    float* slot(int64_t s) { return &pool[size_t(slots[size_t(s)] * per_seq)]; }
    std::vector<float> gather() {
        std::vector<float> out;
        for (size_t s = 0; s < slots.size(); ++s)
            out.insert(out.end(), slot(int64_t(s)), slot(int64_t(s)) + per_seq);
        return out;
    }
    bool spares_untouched() const {
        int64_t untouched = 0;
        for (int64_t i = 0; i < int64_t(pool.size()); ++i) {
            const int64_t slot_idx = i / per_seq;
            if (std::find(slots.begin(), slots.end(), slot_idx) == slots.end())
                untouched += pool[size_t(i)] == kSentinel;
        }
        return untouched == 2 * per_seq;
    }
};

using DeltaRule = void (*)(const cpu::GatedDeltaRuleArgs&);

// Runs `rule` over rows [query_start[s], query_start[s+1]) of every sequence, from the pool's
// states; returns the output [num_tokens, num_v_heads, head_v_dim].
std::vector<float> run_delta_rule(DeltaRule rule, const Goldens& gd, const std::vector<float>& qkv,
                                  const std::vector<float>& g, const std::vector<float>& beta,
                                  const std::vector<int32_t>& query_start, StatePool& states) {
    std::vector<float> out(size_t(query_start.back() * gd.num_v_heads * gd.head_v_dim), NAN);
    rule({.qkv = qkv.data(),
          .g = g.data(),
          .beta = beta.data(),
          .query_start = query_start.data(),
          .state_slots = states.slots.data(),
          .num_seqs = int64_t(states.slots.size()),
          .num_k_heads = gd.num_k_heads,
          .num_v_heads = gd.num_v_heads,
          .head_k_dim = gd.head_k_dim,
          .head_v_dim = gd.head_v_dim,
          .state = states.pool.data(),
          .out = out.data()});
    return out;
}

// Rows [begin, end) of `full`, a [rows, row_len] buffer.
std::vector<float> rows(const std::vector<float>& full, int64_t row_len, int64_t begin,
                        int64_t end) {
    return std::vector<float>(full.begin() + begin * row_len, full.begin() + end * row_len);
}

}  // namespace

TEST(GatedDeltaNet, ConvMatchesHuggingFace) {
    const Goldens& gd = goldens();
    const auto x = gd["conv.x"], weight = gd["conv.weight"];
    StatePool states(gd["conv.state_in"], gd.num_seqs);
    std::vector<float> out(x.size(), NAN);
    cpu::causal_conv1d_silu({.x = x.data(),
                             .weight = weight.data(),
                             .query_start = gd.query_start.data(),
                             .state_slots = states.slots.data(),
                             .num_seqs = gd.num_seqs,
                             .channels = gd.channels,
                             .kernel_len = gd.kernel_len,
                             .conv_state = states.pool.data(),
                             .out = out.data()});
    EXPECT_LT(relative_error(out, gd["conv.out"], "conv1d+silu vs HF"), kTolerance);
    EXPECT_EQ(states.gather(), gd["conv.state_out"]);  // the last 3 inputs, copied
    EXPECT_TRUE(states.spares_untouched());
}

// One call, two calls split mid-chunk, token by token, in place: the same bits.
TEST(GatedDeltaNet, ConvCarriesItsStateAcrossCalls) {
    const Goldens& gd = goldens();
    const int64_t s = gd.num_seqs - 1, begin = gd.query_start[size_t(s)],
                  len = gd.seq_lens[size_t(s)];
    const auto x = rows(gd["conv.x"], gd.channels, begin, begin + len);
    const auto weight = gd["conv.weight"];
    auto run = [&](std::vector<int32_t> splits, bool in_place) {
        std::vector<float> state(size_t((gd.kernel_len - 1) * gd.channels), 0.f);
        std::vector<float> buf = x, out(x.size(), NAN);
        const int32_t slot = 0;
        for (size_t i = 0; i + 1 < splits.size(); ++i) {
            const int32_t qs[2] = {splits[i], splits[i + 1]};
            cpu::causal_conv1d_silu({.x = buf.data(),
                                     .weight = weight.data(),
                                     .query_start = qs,
                                     .state_slots = &slot,
                                     .num_seqs = 1,
                                     .channels = gd.channels,
                                     .kernel_len = gd.kernel_len,
                                     .conv_state = state.data(),
                                     .out = in_place ? buf.data() : out.data()});
        }
        return in_place ? buf : out;
    };
    std::vector<int32_t> each(size_t(len + 1));
    std::iota(each.begin(), each.end(), 0);
    const auto once = run({0, int32_t(len)}, false);
    EXPECT_EQ(run({0, 64, int32_t(len)}, false), once);
    EXPECT_EQ(run({0, 2, 3, 67, int32_t(len)}, true), once);
    EXPECT_EQ(run(each, false), once);
    relative_error(once, rows(gd["conv.out"], gd.channels, begin, begin + len),
                   "conv1d 130 tokens, one call vs HF");
}

TEST(GatedDeltaNet, GatesMatchHuggingFace) {
    const Goldens& gd = goldens();
    const auto a = gd["gates.a"], b = gd["gates.b"];
    std::vector<float> g(a.size(), NAN), beta(a.size(), NAN);
    cpu::gdn_gates(a.data(), b.data(), gd["gates.a_log"].data(), gd["gates.dt_bias"].data(),
                   gd.num_tokens, gd.num_v_heads, g.data(), beta.data());
    const auto want_g = gd["gates.g"], want_beta = gd["gates.beta"];
    double worst = 0;  // per element: g spans 1e-3 to 1e2, so relative to each value
    for (size_t i = 0; i < g.size(); ++i)
        worst = std::max(worst, std::fabs(double(g[i]) - want_g[i]) / std::fabs(want_g[i]));
    std::printf("measured: %-58s max relative %.3g\n", "g vs HF (per element)", worst);
    EXPECT_LT(worst, 2e-6);
    EXPECT_LT(relative_error(beta, want_beta, "beta vs HF"), 1e-6);
}

// Both forms against both of transformers' on the batch: recurrent and chunked, from states and
// from zeros, each sequence's state at a shuffled slot of a pool.
TEST(GatedDeltaNet, DeltaRuleMatchesHuggingFace) {
    const Goldens& gd = goldens();
    const auto qkv = gd.qkv(), g = gd["gates.g"], beta = gd["gates.beta"];
    struct Form {
        const char* name;
        DeltaRule rule;
    };
    for (Form form : {Form{"recurrent", cpu::gated_delta_rule_recurrent},
                      Form{"chunked", cpu::gated_delta_rule_chunked}}) {
        StatePool states(gd["delta.state_in"], gd.num_seqs);
        const auto out = run_delta_rule(form.rule, gd, qkv, g, beta, gd.query_start, states);
        const auto state = states.gather();
        EXPECT_TRUE(states.spares_untouched());
        for (const char* hf : {"recurrent", "chunk"}) {
            const std::string vs = std::string(form.name) + " vs HF " + hf;
            EXPECT_LT(relative_error(out, gd[std::string("delta.") + hf + "_out"], vs + ": out"),
                      kTolerance);
            EXPECT_LT(relative_error(state, gd[std::string("delta.") + hf + "_state"],
                                     vs + ": final state"),
                      kTolerance);
        }
    }
}

// The 130-token sequence from zeros, split across calls as chunked prefill and decode split
// it: every split within tolerance of transformers' single call; splits that keep the chunk
// boundaries (64 + 66), and the recurrent form split anywhere, bit for bit the single call.
TEST(GatedDeltaNet, DeltaRuleCarriesItsStateAcrossCalls) {
    const Goldens& gd = goldens();
    const int64_t s = gd.num_seqs - 1, begin = gd.query_start[size_t(s)],
                  len = gd.seq_lens[size_t(s)];
    const int64_t out_row = gd.num_v_heads * gd.head_v_dim;
    const auto qkv = rows(gd.qkv(), gd.qkv_row(), begin, begin + len);
    const auto g = rows(gd["gates.g"], gd.num_v_heads, begin, begin + len);
    const auto beta = rows(gd["gates.beta"], gd.num_v_heads, begin, begin + len);
    const auto want = rows(gd["delta.chunk_out"], out_row, begin, begin + len);
    const int64_t state_len = gd.num_v_heads * gd.head_k_dim * gd.head_v_dim;
    const auto want_state = rows(gd["delta.chunk_state"], state_len, s, s + 1);

    // Calls over [splits[i], splits[i+1]); one sequence, its state in a pool of three slots.
    auto run = [&](DeltaRule rule, const std::vector<int32_t>& splits) {
        StatePool states(std::vector<float>(size_t(state_len), 0.f), 1);
        std::vector<float> out(size_t(len * out_row), NAN);
        for (size_t i = 0; i + 1 < splits.size(); ++i) {
            const int64_t lo = splits[i], hi = splits[i + 1];
            const auto part = run_delta_rule(
                rule, gd, rows(qkv, gd.qkv_row(), lo, hi), rows(g, gd.num_v_heads, lo, hi),
                rows(beta, gd.num_v_heads, lo, hi), {0, int32_t(hi - lo)}, states);
            std::copy(part.begin(), part.end(), out.begin() + lo * out_row);
        }
        return std::pair{out, states.gather()};
    };
    std::vector<int32_t> each(size_t(len + 1));
    std::iota(each.begin(), each.end(), 0);
    const std::vector<int32_t> once = {0, int32_t(len)};

    const auto chunked = run(cpu::gated_delta_rule_chunked, once);
    EXPECT_EQ(run(cpu::gated_delta_rule_chunked, {0, 64, int32_t(len)}), chunked);
    const auto recurrent = run(cpu::gated_delta_rule_recurrent, once);
    EXPECT_EQ(run(cpu::gated_delta_rule_recurrent, each), recurrent);
    EXPECT_EQ(run(cpu::gated_delta_rule_recurrent, {0, 1, 64, 100, int32_t(len)}), recurrent);

    struct Case {
        const char* name;
        DeltaRule rule;
        std::vector<int32_t> splits;
    };
    for (const Case& c :
         {Case{"chunked, one call", cpu::gated_delta_rule_chunked, once},
          Case{"chunked, 50 + 80", cpu::gated_delta_rule_chunked, {0, 50, 130}},
          Case{"chunked, 1 + 63 + 1 + 65", cpu::gated_delta_rule_chunked, {0, 1, 64, 65, 130}},
          Case{"recurrent, token by token", cpu::gated_delta_rule_recurrent, each}}) {
        const auto [out, state] = run(c.rule, c.splits);
        const std::string what = std::string("130 tokens ") + c.name + " vs HF chunk";
        EXPECT_LT(relative_error(out, want, what + ": out"), kTolerance);
        EXPECT_LT(relative_error(state, want_state, what + ": state"), kTolerance);
    }
}

// A snapshot after r rows holds what a call over the first r rows leaves, and the call's
// outputs and final state are those of two calls split at r, bit for bit (the chunked rule ends
// a chunk at the snapshot): the conv and both forms of the rule.
TEST(GatedDeltaNet, SnapshotsHoldTheStateAtTheirRow) {
    const Goldens& gd = goldens();
    const int64_t s = gd.num_seqs - 1, begin = gd.query_start[size_t(s)],
                  len = gd.seq_lens[size_t(s)];
    const int64_t out_row = gd.num_v_heads * gd.head_v_dim;
    const int64_t state_len = gd.num_v_heads * gd.head_k_dim * gd.head_v_dim;
    const int64_t conv_len = (gd.kernel_len - 1) * gd.channels;
    const auto x = rows(gd["conv.x"], gd.channels, begin, begin + len);
    const auto weight = gd["conv.weight"];
    const auto qkv = rows(gd.qkv(), gd.qkv_row(), begin, begin + len);
    const auto g = rows(gd["gates.g"], gd.num_v_heads, begin, begin + len);
    const auto beta = rows(gd["gates.beta"], gd.num_v_heads, begin, begin + len);
    const int32_t slots[2] = {0, 1};
    for (const int32_t r : {1, 37, 64, 100}) {
        const int32_t snapshot_rows = r;
        // The conv: [0, r) then [r, len) in slot 0, against one call snapshotting into slot 1.
        auto conv = [&](int32_t lo, int32_t hi, std::vector<float>& state, std::vector<float>& out,
                        const int32_t* snap_rows) {
            const int32_t qs[2] = {lo, hi};
            cpu::causal_conv1d_silu({.x = x.data(),
                                     .weight = weight.data(),
                                     .query_start = qs,
                                     .state_slots = &slots[0],
                                     .num_seqs = 1,
                                     .channels = gd.channels,
                                     .kernel_len = gd.kernel_len,
                                     .conv_state = state.data(),
                                     .out = out.data(),
                                     .snapshot_rows = snap_rows,
                                     .snapshot_slots = &slots[1]});
        };
        std::vector<float> split_state(size_t(2 * conv_len), 0.f), split_out(x.size(), NAN);
        conv(0, r, split_state, split_out, nullptr);
        std::copy_n(split_state.begin(), conv_len, split_state.begin() + conv_len);
        conv(r, int32_t(len), split_state, split_out, nullptr);
        std::vector<float> state(size_t(2 * conv_len), 0.f), out(x.size(), NAN);
        conv(0, int32_t(len), state, out, &snapshot_rows);
        EXPECT_EQ(out, split_out) << "conv, snapshot after " << r;
        EXPECT_EQ(state, split_state) << "conv, snapshot after " << r;

        for (DeltaRule rule : {cpu::gated_delta_rule_chunked, cpu::gated_delta_rule_recurrent}) {
            auto call = [&](int32_t lo, int32_t hi, std::vector<float>& pool, std::vector<float>& o,
                            const int32_t* snap_rows) {
                const int32_t q[2] = {0, hi - lo};
                rule({.qkv = qkv.data() + lo * gd.qkv_row(),
                      .g = g.data() + lo * gd.num_v_heads,
                      .beta = beta.data() + lo * gd.num_v_heads,
                      .query_start = q,
                      .state_slots = &slots[0],
                      .num_seqs = 1,
                      .num_k_heads = gd.num_k_heads,
                      .num_v_heads = gd.num_v_heads,
                      .head_k_dim = gd.head_k_dim,
                      .head_v_dim = gd.head_v_dim,
                      .state = pool.data(),
                      .out = o.data() + lo * out_row,
                      .snapshot_rows = snap_rows,
                      .snapshot_slots = &slots[1]});
            };
            std::vector<float> split_pool(size_t(2 * state_len), 0.f);
            std::vector<float> split_o(size_t(len * out_row), NAN);
            call(0, r, split_pool, split_o, nullptr);
            std::copy_n(split_pool.begin(), state_len, split_pool.begin() + state_len);
            call(r, int32_t(len), split_pool, split_o, nullptr);
            std::vector<float> pool(size_t(2 * state_len), 0.f), o(size_t(len * out_row), NAN);
            call(0, int32_t(len), pool, o, &snapshot_rows);
            const char* form = rule == cpu::gated_delta_rule_chunked ? "chunked" : "recurrent";
            EXPECT_EQ(o, split_o) << form << ", snapshot after " << r;
            EXPECT_EQ(pool, split_pool) << form << ", snapshot after " << r;
        }
    }
}

TEST(GatedDeltaNet, GatedRmsNormMatchesHuggingFace) {
    const Goldens& gd = goldens();
    const auto x = gd["norm.x"], z = gd["norm.z"];
    std::vector<float> y(x.size(), NAN);
    cpu::rms_norm_gated(x.data(), z.data(), gd["norm.weight"].data(),
                        int64_t(x.size()) / gd.head_v_dim, gd.head_v_dim, gd.eps, y.data());
    EXPECT_LT(relative_error(y, gd["norm.out"], "gated RMSNorm vs HF"), kTolerance);
}

TEST(GatedDeltaNet, ZeroCentredRmsNormMatchesHuggingFace) {
    const Goldens& gd = goldens();
    auto x = gd["norm.zc_x"];
    const auto w = gd["norm.zc_weight"], want = gd["norm.zc_out"];
    const int64_t dim = int64_t(w.size()), num_rows = int64_t(x.size()) / dim;
    std::vector<float> y(x.size(), NAN);
    cpu::rms_norm(x.data(), w.data(), num_rows, dim, gd.eps, y.data(), /*weight_offset=*/1.f);
    EXPECT_LT(relative_error(y, want, "zero-centred RMSNorm vs HF"), kTolerance);
    // The add & norm form: residual 0 + x, the same norm.
    std::vector<float> residual(x.size(), 0.f), y2(x.size(), NAN);
    cpu::add_rms_norm(residual.data(), x.data(), w.data(), num_rows, dim, gd.eps, y2.data(), 1.f);
    EXPECT_EQ(y2, y);
}

// At the models' sizes (head dims 128, 16 key heads to 32 value heads in the released models; 2
// to 4 here), the two forms agree: the chunked one against the recurrent reference on a batch
// of a decode step, a chunk of 64 and a 200-token prompt, from random states.
TEST(GatedDeltaNet, ChunkedAgreesWithRecurrentAtModelSizes) {
    std::mt19937 rng(47);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::uniform_real_distribution<float> uniform(0.f, 1.f);
    const int64_t num_k_heads = 2, num_v_heads = 4, dk = 128, dv = 128;
    const std::vector<int32_t> query_start = {0, 1, 65, 265};
    const int64_t num_tokens = query_start.back(), num_seqs = 3;
    const int64_t row = 2 * num_k_heads * dk + num_v_heads * dv;
    auto fill = [&](int64_t n, float scale) {
        std::vector<float> v(static_cast<size_t>(n));
        for (auto& x : v) x = normal(rng) * scale;
        return v;
    };
    const auto qkv = fill(num_tokens * row, 1.f), a = fill(num_tokens * num_v_heads, 1.f),
               b = fill(num_tokens * num_v_heads, 2.f),
               initial = fill(num_seqs * num_v_heads * dk * dv, 0.1f);
    std::vector<float> a_log(static_cast<size_t>(num_v_heads)), dt_bias(a_log.size(), 1.f);
    for (auto& x : a_log) x = std::log(0.01f + 16.f * uniform(rng));  // transformers' init
    std::vector<float> g(a.size()), beta(a.size());
    cpu::gdn_gates(a.data(), b.data(), a_log.data(), dt_bias.data(), num_tokens, num_v_heads,
                   g.data(), beta.data());

    const std::vector<int32_t> slots = {2, 0, 1};
    auto run = [&](DeltaRule rule) {
        std::vector<float> state = initial, out(size_t(num_tokens * num_v_heads * dv), NAN);
        rule({.qkv = qkv.data(),
              .g = g.data(),
              .beta = beta.data(),
              .query_start = query_start.data(),
              .state_slots = slots.data(),
              .num_seqs = num_seqs,
              .num_k_heads = num_k_heads,
              .num_v_heads = num_v_heads,
              .head_k_dim = dk,
              .head_v_dim = dv,
              .state = state.data(),
              .out = out.data()});
        return std::pair{out, state};
    };
    const auto [out_r, state_r] = run(cpu::gated_delta_rule_recurrent);
    const auto [out_c, state_c] = run(cpu::gated_delta_rule_chunked);
    EXPECT_LT(relative_error(out_c, out_r, "dims 128: chunked vs recurrent: out"), kTolerance);
    EXPECT_LT(relative_error(state_c, state_r, "dims 128: chunked vs recurrent: state"),
              kTolerance);
}
