// The CPU sampler and its Philox generator: known answers, the filters against the exact
// filtered softmax, seeded reproducibility across batches, penalties, min_tokens, logprobs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <set>

#include "config/sampling_params.h"
#include "layers/philox.h"
#include "layers/sampler.h"

using namespace miniinfer;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

SamplerInput input(std::span<const float> logits, const SamplingParams& p, uint64_t seed = 0,
                   std::span<const int32_t> output = {}) {
    return {.logits = logits,
            .params = &p,
            .prompt_ids = {},
            .output_ids = output,
            .eos_ids = {},
            .seed = seed,
            .token_bitmask = {}};
}

// The filtered softmax written out directly from the definitions, to check the sampler against.
std::vector<double> expected_distribution(const std::vector<float>& logits,
                                          const SamplingParams& p) {
    const size_t n = logits.size();
    std::vector<double> prob(n);
    double z = 0;
    for (size_t i = 0; i < n; ++i) z += prob[i] = std::exp(logits[i] / p.temperature);
    double max_prob = 0;
    for (double& x : prob) max_prob = std::max(max_prob, x /= z);
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return prob[a] > prob[b]; });
    std::vector<size_t> kept;
    for (size_t i : order)
        if (prob[i] >= p.min_p * max_prob && (p.top_k <= 0 || kept.size() < size_t(p.top_k)))
            kept.push_back(i);
    double mass = 0;
    for (size_t i : kept) mass += prob[i];
    double cum = 0;
    std::vector<double> out(n, 0.0);
    for (size_t i : kept) {
        out[i] = prob[i];
        if ((cum += prob[i]) >= p.top_p * mass) break;
    }
    double total = std::accumulate(out.begin(), out.end(), 0.0);
    for (double& x : out) x /= total;
    return out;
}

// Pearson's statistic of `num_draws` draws at steps 0..num_draws-1 against `expected`; draws of
// tokens expected never to appear make it infinite.
double chi_square(const std::vector<float>& logits, const SamplingParams& p,
                  const std::vector<double>& expected, int num_draws, int* num_kept = nullptr) {
    std::vector<int32_t> history(num_draws, 0);
    std::vector<int> counts(logits.size(), 0);
    for (int step = 0; step < num_draws; ++step)
        ++counts[sample(input(logits, p, 1234, std::span(history).first(step))).token];
    double stat = 0;
    int kept = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
        if (expected[i] == 0) {
            if (counts[i] > 0) return kInf;
            continue;
        }
        ++kept;
        double e = expected[i] * num_draws;
        stat += (counts[i] - e) * (counts[i] - e) / e;
    }
    if (num_kept) *num_kept = kept;
    return stat;
}

const std::vector<float> kSmallLogits = {1.0f, 0.5f, 0.2f, -0.3f, -1.0f, 0.8f, -2.0f, 0.0f};
}  // namespace

TEST(Philox, KnownAnswerVectors) {
    Philox4x32 zero = philox4x32_10({{0, 0, 0, 0}}, 0, 0);
    EXPECT_EQ(zero.v[0], 0x6627e8d5u);
    Philox4x32 ones = philox4x32_10({{~0u, ~0u, ~0u, ~0u}}, ~0u, ~0u);
    EXPECT_EQ(ones.v[0], 0x408f276du);
    Philox4x32 pi =
        philox4x32_10({{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0);
    EXPECT_EQ(pi.v[0], 0xd16cfe09u);
    EXPECT_EQ(pi.v[1], 0x94fdccebu);
    EXPECT_EQ(pi.v[2], 0x5001e420u);
    EXPECT_EQ(pi.v[3], 0x24126ea1u);
}

TEST(Philox, UnitFloatIsHalfOpen) {
    EXPECT_EQ(uint_to_unit_float(0), 0.0f);
    EXPECT_LT(uint_to_unit_float(0xffffffffu), 1.0f);
    double sum = 0;
    for (uint64_t step = 0; step < 100000; ++step) sum += philox_uniform(7, step);
    EXPECT_NEAR(sum / 100000, 0.5, 0.005);
    EXPECT_NE(philox_uniform(7, 0), philox_uniform(8, 0));
    EXPECT_NE(philox_uniform(7, 0), philox_uniform(7, 1ull << 32));  // the high step word counts
}

TEST(Sampler, GreedyIsArgmaxFirstOnTies) {
    SamplingParams p;
    p.temperature = 0.0;
    std::vector<float> logits = {0.1f, 3.0f, -1.0f, 3.0f, 2.9f};
    EXPECT_EQ(sample(input(logits, p)).token, 1);
    logits[4] = 3.5f;
    EXPECT_EQ(sample(input(logits, p, 99)).token, 4);
}

TEST(Sampler, TopK1IsGreedy) {
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.f, 3.f);
    SamplingParams p;
    p.top_k = 1;
    p.temperature = 1.7;
    SamplingParams greedy;
    greedy.temperature = 0;
    for (int trial = 0; trial < 50; ++trial) {
        std::vector<float> logits(500);
        for (float& x : logits) x = normal(rng);
        EXPECT_EQ(sample(input(logits, p, trial)).token, sample(input(logits, greedy)).token);
    }
}

TEST(Sampler, SeededDrawsReproduceAndDifferAcrossSeeds) {
    std::vector<float> logits(1000, 0.0f);  // flat: any token may come
    SamplingParams p;
    auto run = [&](uint64_t seed) {
        std::vector<int32_t> tokens;
        for (int step = 0; step < 64; ++step)
            tokens.push_back(sample(input(logits, p, seed, std::span(tokens))).token);
        return tokens;
    };
    std::vector<int32_t> a = run(1), b = run(1), c = run(2);
    EXPECT_EQ(a, b);
    int same = 0;
    for (size_t i = 0; i < a.size(); ++i) same += a[i] == c[i];
    EXPECT_LT(same, 4);
    EXPECT_GT(std::set<int32_t>(a.begin(), a.end()).size(), 50u);
}

TEST(Sampler, BatchGivesEachRequestItsOwnTokens) {
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.f, 2.f);
    constexpr int kNum = 16;
    std::vector<std::vector<float>> logits(kNum, std::vector<float>(300));
    std::vector<SamplingParams> params(kNum);
    std::vector<std::vector<int32_t>> outputs(kNum);
    for (int i = 0; i < kNum; ++i) {
        for (float& x : logits[i]) x = normal(rng);
        params[i].temperature = i % 4 == 0 ? 0.0 : 0.5 + 0.1 * i;
        params[i].top_k = i % 3 == 0 ? 0 : 10 * i;
        params[i].top_p = i % 2 ? 0.9 : 1.0;
        params[i].logprobs = i % 5;
        outputs[i].assign(size_t(i), int32_t(i));
    }
    std::vector<SamplerInput> batch;
    for (int i = 0; i < kNum; ++i)
        batch.push_back(input(logits[i], params[i], 1000 + i, outputs[i]));
    std::vector<SampledToken> together = sample_batch(batch);
    std::reverse(batch.begin(), batch.end());
    std::vector<SampledToken> reversed = sample_batch(batch);
    for (int i = 0; i < kNum; ++i) {
        SampledToken alone = sample(batch[kNum - 1 - i]);
        EXPECT_EQ(together[i].token, alone.token);
        EXPECT_EQ(reversed[kNum - 1 - i].token, alone.token);
        EXPECT_EQ(together[i].top_logprobs, alone.top_logprobs);
    }
}

TEST(Sampler, DistributionOfKeptSetIsHandComputable) {
    // Probabilities 0.4, 0.3, 0.2, 0.1 at temperature 1.
    std::vector<float> logits = {std::log(0.3f), std::log(0.1f), std::log(0.4f), std::log(0.2f)};
    auto kept = [&](const std::function<void(SamplingParams&)>& edit) {
        SamplingParams p;
        edit(p);
        std::vector<double> dist = sampling_distribution(input(logits, p));
        EXPECT_NEAR(std::accumulate(dist.begin(), dist.end(), 0.0), 1.0, 1e-12);
        std::vector<int> ids;
        for (size_t i = 0; i < dist.size(); ++i)
            if (dist[i] > 0) ids.push_back(int(i));
        return ids;
    };
    EXPECT_EQ(kept([](auto&) {}), (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(kept([](auto& p) { p.top_k = 2; }), (std::vector<int>{0, 2}));
    EXPECT_EQ(kept([](auto& p) { p.top_p = 0.3; }), (std::vector<int>{2}));
    EXPECT_EQ(kept([](auto& p) { p.top_p = 0.65; }), (std::vector<int>{0, 2}));
    EXPECT_EQ(kept([](auto& p) { p.top_p = 0.75; }), (std::vector<int>{0, 2, 3}));
    EXPECT_EQ(kept([](auto& p) { p.min_p = 0.6; }), (std::vector<int>{0, 2}));
    EXPECT_EQ(kept([](auto& p) { p.min_p = 0.4; }), (std::vector<int>{0, 2, 3}));
    // top_p applies to the renormalised top_k set: 0.4 / 0.7 >= 0.55 keeps one token (0.4 alone
    // would not reach 0.55).
    EXPECT_EQ(kept([](auto& p) { p.top_k = 2, p.top_p = 0.55; }), (std::vector<int>{2}));
    EXPECT_EQ(kept([](auto& p) { p.temperature = 0; }), (std::vector<int>{2}));
    SamplingParams p;
    p.top_k = 2;
    std::vector<double> dist = sampling_distribution(input(logits, p));
    EXPECT_NEAR(dist[2], 0.4 / 0.7, 1e-6);
    EXPECT_NEAR(dist[0], 0.3 / 0.7, 1e-6);
}

TEST(Sampler, EmpiricalDistributionMatchesFilteredSoftmax) {
    constexpr int kDraws = 20000;
    std::vector<std::function<void(SamplingParams&)>> settings = {
        [](auto&) {},
        [](auto& p) { p.temperature = 0.7; },
        [](auto& p) { p.temperature = 1.5, p.top_k = 3; },
        [](auto& p) { p.top_p = 0.8; },
        [](auto& p) { p.min_p = 0.3; },
        [](auto& p) { p.temperature = 0.8, p.min_p = 0.1, p.top_k = 5, p.top_p = 0.9; },
    };
    for (size_t s = 0; s < settings.size(); ++s) {
        SamplingParams p;
        settings[s](p);
        std::vector<double> expected = expected_distribution(kSmallLogits, p);
        std::vector<double> reported = sampling_distribution(input(kSmallLogits, p));
        for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(reported[i], expected[i], 1e-6);
        int kept = 0;
        double stat = chi_square(kSmallLogits, p, expected, kDraws, &kept);
        // Far beyond the 99.99% quantile for these degrees of freedom; the draws are fixed by
        // the seed, so this either always passes or always fails.
        const double df = kept - 1;
        EXPECT_LT(stat, df + 8 * std::sqrt(2 * df) + 1) << "setting " << s;
    }
    // The check has power: temperature 0.7 draws against the temperature-1 softmax fail it.
    SamplingParams cold, warm;
    cold.temperature = 0.7;
    EXPECT_GT(chi_square(kSmallLogits, cold, expected_distribution(kSmallLogits, warm), kDraws),
              100);
}

// Structured output's mask comes first: a masked token stays -inf whatever its bias, the
// greedy choice and the distribution keep to the allowed tokens (ids past 32 included).
TEST(Sampler, TokenBitmaskMasksFirst) {
    std::vector<float> raw(40, 0.f);
    raw[0] = 5.f;
    raw[3] = 1.f;
    raw[35] = 2.f;
    const std::vector<uint32_t> mask = {1u << 3, 1u << (35 - 32)};
    SamplingParams p;
    p.temperature = 0.0;
    p.logit_bias = {{0, 10.f}, {3, 0.5f}};
    SamplerInput in = input(raw, p);
    in.token_bitmask = mask;
    std::vector<float> logits = raw;
    apply_penalties(logits, in);
    EXPECT_EQ(logits[0], -std::numeric_limits<float>::infinity());
    EXPECT_FLOAT_EQ(logits[3], 1.5f);
    EXPECT_FLOAT_EQ(logits[35], 2.f);
    EXPECT_EQ(sample(in).token, 35);
    p.temperature = 1.0;
    const std::vector<double> dist = sampling_distribution(in);
    for (size_t i = 0; i < dist.size(); ++i) {
        if (i != 3 && i != 35) {
            EXPECT_EQ(dist[i], 0.0) << i;
        }
    }
    EXPECT_NEAR(dist[3] + dist[35], 1.0, 1e-12);
}

TEST(Sampler, PenaltiesFollowTheFormulas) {
    std::vector<float> raw = {2.0f, -2.0f, 1.0f, 1.5f, -1.0f};
    std::vector<int32_t> prompt = {0, 1, 0}, output = {1, 2, 2};
    SamplingParams p;
    p.repetition_penalty = 2.0;
    p.frequency_penalty = 0.5;
    p.presence_penalty = 0.25;
    SamplerInput in = input(raw, p, 0, output);
    in.prompt_ids = prompt;
    std::vector<float> logits = raw;
    apply_penalties(logits, in);
    EXPECT_FLOAT_EQ(logits[0], 1.0f);                  // prompt only, positive: / 2
    EXPECT_FLOAT_EQ(logits[1], -4.0f - 0.5f - 0.25f);  // negative: * 2; once in output
    EXPECT_FLOAT_EQ(logits[2], 0.5f - 1.0f - 0.25f);   // / 2; twice in output
    EXPECT_FLOAT_EQ(logits[3], 1.5f);                  // unseen
    EXPECT_FLOAT_EQ(logits[4], -1.0f);

    // Repetition penalty only: the output tokens count once however often they appear.
    p.frequency_penalty = p.presence_penalty = 0.0;
    logits = raw;
    apply_penalties(logits, in);
    EXPECT_FLOAT_EQ(logits[2], 0.5f);
    // And it moves the greedy choice off the prompt's token 0 to the unseen token 3.
    p.temperature = 0.0;
    EXPECT_EQ(sample(in).token, 3);
    p.repetition_penalty = 1.0;
    EXPECT_EQ(sample(in).token, 0);
}

TEST(Sampler, MinTokensMasksEosAndStopTokens) {
    std::vector<float> logits = {0.0f, 1.0f, 5.0f, 4.0f, 3.0f};
    std::vector<int64_t> eos = {2};
    SamplingParams p;
    p.temperature = 0.0;
    p.min_tokens = 2;
    p.stop_token_ids = {3};
    p.ignore_eos = true;  // min_tokens masks EOS regardless
    std::vector<int32_t> output = {1, 1};
    SamplerInput in = input(logits, p, 0, std::span(output).first(1));
    in.eos_ids = eos;
    EXPECT_EQ(sample(in).token, 4);
    in.output_ids = output;  // min_tokens reached
    EXPECT_EQ(sample(in).token, 2);
    // Sampling never returns a masked token.
    p.temperature = 1.0;
    in.output_ids = std::span(output).first(0);
    std::vector<double> dist = sampling_distribution(in);
    EXPECT_EQ(dist[2], 0.0);
    EXPECT_EQ(dist[3], 0.0);
    EXPECT_GT(dist[4], 0.5);
}

TEST(Sampler, LogprobsAreLogSoftmaxOfRawLogitsSorted) {
    std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, -3.0f};
    double z = 0;
    for (float x : logits) z += std::exp(double(x));
    auto log_softmax = [&](int i) { return float(logits[i] - std::log(z)); };
    SamplingParams p;
    p.logprobs = 4;
    p.repetition_penalty = 1.8;  // changes the sampling logits, not the reported logprobs
    std::vector<int32_t> prompt = {1, 3};
    SamplerInput in = input(logits, p, 3);
    in.prompt_ids = prompt;
    SampledToken t = sample(in);
    EXPECT_NEAR(t.logprob, log_softmax(t.token), 1e-6);
    ASSERT_EQ(t.top_logprobs.size(), 4u);
    std::vector<int32_t> ids;
    for (auto& [id, lp] : t.top_logprobs) {
        ids.push_back(id);
        EXPECT_NEAR(lp, log_softmax(id), 1e-6);
    }
    EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 4, 0}));  // best first, lower id on ties

    p.logprobs = 0;
    t = sample(in);
    EXPECT_TRUE(t.top_logprobs.empty());
    EXPECT_NEAR(t.logprob, log_softmax(t.token), 1e-6);
    p.logprobs = 20;  // more than the vocabulary: all of it
    EXPECT_EQ(sample(in).top_logprobs.size(), logits.size());
}

TEST(Sampler, LogitBiasIsAddedBeforePenalties) {
    std::vector<float> raw = {2.0f, -2.0f, 1.0f, 1.5f};
    std::vector<int32_t> output = {0};
    SamplingParams p;
    p.repetition_penalty = 2.0;
    p.logit_bias = {{0, 1.0f}, {1, 0.5f}, {3, -0.5f}, {3, -0.25f}};
    SamplerInput in = input(raw, p, 0, output);
    std::vector<float> logits = raw;
    apply_penalties(logits, in);
    EXPECT_EQ(logits[0], (2.0f + 1.0f) / 2.0f);  // biased, then penalised as positive
    EXPECT_EQ(logits[1], -1.5f);                 // not in the output: bias only
    EXPECT_EQ(logits[2], 1.0f);
    EXPECT_EQ(logits[3], 1.5f - 0.5f - 0.25f);  // a repeated id adds each entry
}

TEST(Sampler, LogitBiasOf100ForcesTheTokenGreedyAndRandom) {
    std::vector<float> logits = {3.0f, 9.0f, -4.0f, 2.0f, 8.5f};
    SamplingParams p;
    p.temperature = 0.0;
    EXPECT_EQ(sample(input(logits, p)).token, 1);
    p.logit_bias = {{2, 100.0f}};
    EXPECT_EQ(sample(input(logits, p)).token, 2);
    p.temperature = 1.0;
    for (uint64_t seed = 0; seed < 50; ++seed) EXPECT_EQ(sample(input(logits, p, seed)).token, 2);
    // The logprob stays the raw logits' (vLLM's default).
    p.logprobs = 0;
    const SampledToken t = sample(input(logits, p, 7));
    double z = 0;
    for (float x : logits) z += std::exp(double(x));
    EXPECT_NEAR(t.logprob, -4.0 - std::log(z), 1e-5);
}

TEST(Sampler, AllowedTokenIdsRestrictEveryDraw) {
    std::vector<float> logits = {3.0f, 9.0f, -4.0f, 2.0f, 8.5f, 0.0f};
    SamplingParams p;
    p.temperature = 0.0;
    p.allowed_token_ids = std::vector<int64_t>{2, 3, 3, 5};  // duplicates allowed
    EXPECT_EQ(sample(input(logits, p)).token, 3);
    p.temperature = 1.5;
    std::set<int32_t> seen;
    for (uint64_t seed = 0; seed < 400; ++seed) seen.insert(sample(input(logits, p, seed)).token);
    EXPECT_EQ(seen, (std::set<int32_t>{2, 3, 5}));
    const std::vector<double> dist = sampling_distribution(input(logits, p));
    const double z = std::exp(-4.0 / 1.5) + std::exp(2.0 / 1.5) + 1.0;
    EXPECT_NEAR(dist[3], std::exp(2.0 / 1.5) / z, 1e-9);
    EXPECT_EQ(dist[1], 0.0);
    // A bias on a masked token leaves it masked.
    p.logit_bias = {{1, 100.0f}};
    EXPECT_EQ(sampling_distribution(input(logits, p))[1], 0.0);
}

TEST(Sampler, BadWordsBanSingleTokensAlwaysAndSequencesAfterTheirPrefix) {
    std::vector<float> logits = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
    SamplingParams p;
    p.temperature = 0.0;
    p.bad_words_token_ids = {{5}, {1, 2, 4}, {0, 3}};
    EXPECT_EQ(banned_bad_word_ids(p, {}), (std::vector<int32_t>{5}));
    EXPECT_EQ(sample(input(logits, p)).token, 4);  // 5 banned; 4's prefix not generated
    const std::vector<int32_t> after_prefix = {3, 1, 2};
    EXPECT_EQ(banned_bad_word_ids(p, after_prefix), (std::vector<int32_t>{5, 4}));
    EXPECT_EQ(sample(input(logits, p, 0, after_prefix)).token, 3);
    const std::vector<int32_t> half_prefix = {1, 3, 2};  // ends with 2, not with 1, 2
    EXPECT_EQ(sample(input(logits, p, 0, half_prefix)).token, 4);
    const std::vector<int32_t> both = {1, 2, 0};  // 0 → 3 banned too; 1, 2 no longer last
    EXPECT_EQ(banned_bad_word_ids(p, both), (std::vector<int32_t>{5, 3}));
    EXPECT_EQ(sample(input(logits, p, 0, both)).token, 4);
    // Random draws never take a banned token.
    p.temperature = 1.0;
    for (uint64_t seed = 0; seed < 200; ++seed) {
        const int32_t t = sample(input(logits, p, seed, after_prefix)).token;
        EXPECT_TRUE(t != 5 && t != 4) << t;
    }
}

TEST(Sampler, AllCheapFieldsTogether) {
    std::vector<float> raw = {4.0f, 1.0f, 3.0f, 2.0f, 0.5f, 7.0f};
    std::vector<int32_t> prompt = {2}, output = {0, 1};
    std::vector<int64_t> eos = {4};
    SamplingParams p;
    p.allowed_token_ids = std::vector<int64_t>{0, 2, 3, 4};
    p.bad_words_token_ids = {{0, 2}, {0, 1, 3}};  // 3 after 0, 1 (here); 2 after 0 (not)
    p.logit_bias = {{2, -1.0f}, {5, 50.0f}};      // 5 is not allowed: stays masked
    p.repetition_penalty = 2.0;
    p.presence_penalty = 0.5;
    p.min_tokens = 3;
    SamplerInput in = input(raw, p, 0, output);
    in.prompt_ids = prompt;
    in.eos_ids = eos;
    std::vector<float> logits = raw;
    apply_penalties(logits, in);
    constexpr float kNeg = -std::numeric_limits<float>::infinity();
    EXPECT_EQ(logits[0], 4.0f / 2.0f - 0.5f);  // allowed, in the output
    EXPECT_EQ(logits[1], kNeg);                // not allowed
    EXPECT_EQ(logits[2], (3.0f - 1.0f) / 2.0f);
    EXPECT_EQ(logits[3], kNeg);  // bad word 0, 1, 3
    EXPECT_EQ(logits[4], kNeg);  // EOS before min_tokens
    EXPECT_EQ(logits[5], kNeg);  // not allowed, bias or not
    p.temperature = 0.0;
    EXPECT_EQ(sample(in).token, 0);
    p.temperature = 0.8;
    for (uint64_t seed = 0; seed < 100; ++seed) {
        const int32_t t = sample(input(raw, p, seed, output)).token;
        EXPECT_TRUE(t == 0 || t == 2 || t == 4) << t;  // (EOS unmasked: no eos_ids given)
    }
}
