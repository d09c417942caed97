#include "layers/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/thread_pool.h"
#include "layers/philox.h"

namespace miniinfer {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int32_t checked_id(int64_t id, size_t vocab, const char* what) {
    MI_CHECK(id >= 0 && uint64_t(id) < vocab, "{} id {} outside the vocabulary of {}", what, id,
             vocab);
    return int32_t(id);
}

// Ids sorted, so equal tokens are adjacent runs.
std::vector<int32_t> sorted_ids(std::span<const int32_t> a, std::span<const int32_t> b,
                                size_t vocab) {
    std::vector<int32_t> ids(a.begin(), a.end());
    ids.insert(ids.end(), b.begin(), b.end());
    for (int32_t id : ids) checked_id(id, vocab, "token");
    std::sort(ids.begin(), ids.end());
    return ids;
}

// First maximum; a finite one must exist (penalties cannot make -inf finite, so a finite
// penalised maximum also means the raw logits have one).
int32_t argmax(std::span<const float> x) {
    size_t best = 0;
    for (size_t i = 1; i < x.size(); ++i)
        if (x[i] > x[best]) best = i;
    MI_CHECK(x[best] > kNegInf, "every token is masked: nothing to sample");
    return int32_t(best);
}

// Higher value first, lower id on ties: one order for top_k, top_p and top_logprobs.
template <typename Values>
auto best_first(const Values& v) {
    return [&v](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); };
}

// Unnormalised probabilities of the kept tokens (0 elsewhere); the maximum is exactly 1.
std::vector<double> filtered_weights(std::span<const float> logits, const SamplingParams& p) {
    const double max_logit = logits[argmax(logits)];
    std::vector<double> w(logits.size());
    for (size_t i = 0; i < w.size(); ++i) {
        w[i] = std::exp((double(logits[i]) - max_logit) / p.temperature);
        if (w[i] < p.min_p) w[i] = 0.0;  // max prob is 1 here, so this is p_i < min_p * p_max
    }
    const bool top_k_cuts = p.top_k > 0 && size_t(p.top_k) < w.size();
    if (!top_k_cuts && p.top_p >= 1.0) return w;

    std::vector<int32_t> order;
    for (size_t i = 0; i < w.size(); ++i)
        if (w[i] > 0.0) order.push_back(int32_t(i));
    size_t keep = order.size();
    if (top_k_cuts && size_t(p.top_k) < keep) keep = size_t(p.top_k);
    std::partial_sort(order.begin(), order.begin() + ptrdiff_t(keep), order.end(), best_first(w));
    if (p.top_p < 1.0) {
        double total = 0.0;
        for (size_t j = 0; j < keep; ++j) total += w[order[j]];
        double cum = 0.0;
        for (size_t j = 0; j < keep; ++j) {
            cum += w[order[j]];
            if (cum >= p.top_p * total) {
                keep = j + 1;
                break;
            }
        }
    }
    std::vector<double> kept(w.size(), 0.0);
    for (size_t j = 0; j < keep; ++j) kept[order[j]] = w[order[j]];
    return kept;
}

std::vector<float> penalised_logits(const SamplerInput& in) {
    MI_CHECK(in.params != nullptr && !in.logits.empty(), "sampler input without params or logits");
    for (size_t i = 0; i < in.logits.size(); ++i)
        MI_CHECK(in.logits[i] < std::numeric_limits<float>::infinity(), "logit {} of token {}",
                 in.logits[i], i);
    std::vector<float> logits(in.logits.begin(), in.logits.end());
    apply_penalties(logits, in);
    return logits;
}

void add_top_logprobs(std::span<const float> logits, int32_t token, int64_t num_top,
                      SampledToken& out) {
    const float max_logit = logits[argmax(logits)];
    double sum = 0.0;
    for (float x : logits) sum += std::exp(double(x) - max_logit);
    const double log_z = max_logit + std::log(sum);
    out.logprob = float(logits[token] - log_z);
    if (num_top <= 0) return;
    std::vector<int32_t> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    const size_t n = std::min(size_t(num_top), order.size());
    std::partial_sort(order.begin(), order.begin() + ptrdiff_t(n), order.end(), best_first(logits));
    for (size_t j = 0; j < n; ++j)
        out.top_logprobs.emplace_back(order[j], float(logits[order[j]] - log_z));
}

}  // namespace

std::vector<int32_t> banned_bad_word_ids(const SamplingParams& p,
                                         std::span<const int32_t> output_ids) {
    std::vector<int32_t> banned;
    for (const std::vector<int32_t>& word : p.bad_words_token_ids) {
        if (word.empty() || word.size() - 1 > output_ids.size()) continue;
        const size_t prefix_len = word.size() - 1;
        if (std::equal(word.begin(), word.end() - 1, output_ids.end() - ptrdiff_t(prefix_len)))
            banned.push_back(word.back());
    }
    return banned;
}

void apply_penalties(std::span<float> logits, const SamplerInput& in) {
    const SamplingParams& p = *in.params;
    const size_t vocab = logits.size();
    if (!in.token_bitmask.empty()) {
        MI_CHECK(in.token_bitmask.size() == (vocab + 31) / 32,
                 "token bitmask of {} words for {} tokens", in.token_bitmask.size(), vocab);
        for (size_t i = 0; i < vocab; ++i)
            if (!((in.token_bitmask[i / 32] >> (i % 32)) & 1u)) logits[i] = kNegInf;
    }
    if (p.allowed_token_ids) {
        std::vector<char> allowed(vocab, 0);
        for (int64_t id : *p.allowed_token_ids) allowed[checked_id(id, vocab, "allowed")] = 1;
        for (size_t i = 0; i < vocab; ++i)
            if (!allowed[i]) logits[i] = kNegInf;
    }
    for (int32_t id : banned_bad_word_ids(p, in.output_ids))
        logits[checked_id(id, vocab, "bad word")] = kNegInf;
    for (auto [id, bias] : p.logit_bias) logits[checked_id(id, vocab, "logit_bias")] += bias;
    if (p.repetition_penalty != 1.0) {
        std::vector<int32_t> seen = sorted_ids(in.prompt_ids, in.output_ids, vocab);
        seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
        const float penalty = float(p.repetition_penalty);
        for (int32_t id : seen)
            logits[id] = logits[id] > 0 ? logits[id] / penalty : logits[id] * penalty;
    }
    if (p.frequency_penalty != 0.0 || p.presence_penalty != 0.0) {
        std::vector<int32_t> out = sorted_ids(in.output_ids, {}, vocab);
        for (auto run = out.begin(); run != out.end();) {
            auto run_end = std::upper_bound(run, out.end(), *run);
            const double count = double(run_end - run);
            logits[*run] -= float(p.frequency_penalty * count + p.presence_penalty);
            run = run_end;
        }
    }
    if (int64_t(in.output_ids.size()) < p.min_tokens) {
        for (int64_t id : in.eos_ids) logits[checked_id(id, vocab, "eos")] = kNegInf;
        for (int64_t id : p.stop_token_ids) logits[checked_id(id, vocab, "stop token")] = kNegInf;
    }
}

std::vector<double> sampling_distribution(const SamplerInput& in) {
    std::vector<float> logits = penalised_logits(in);
    std::vector<double> probs(logits.size(), 0.0);
    if (in.params->greedy()) {
        probs[argmax(logits)] = 1.0;
        return probs;
    }
    std::vector<double> w = filtered_weights(logits, *in.params);
    const double total = std::accumulate(w.begin(), w.end(), 0.0);
    for (size_t i = 0; i < w.size(); ++i) probs[i] = w[i] / total;
    return probs;
}

SampledToken sample(const SamplerInput& in) {
    std::vector<float> logits = penalised_logits(in);
    SampledToken out;
    if (in.params->greedy()) {
        out.token = argmax(logits);
    } else {
        // Inverse CDF in token-id order over the kept set: one uniform per (seed, step).
        std::vector<double> w = filtered_weights(logits, *in.params);
        const double total = std::accumulate(w.begin(), w.end(), 0.0);
        const double target = double(philox_uniform(in.seed, in.output_ids.size())) * total;
        double cum = 0.0;
        for (size_t i = 0; i < w.size(); ++i) {
            if (w[i] == 0.0) continue;
            out.token = int32_t(i);  // the last kept token, should rounding leave cum <= target
            cum += w[i];
            if (cum > target) break;
        }
    }
    add_top_logprobs(in.logits, out.token, in.params->logprobs.value_or(0), out);
    return out;
}

std::vector<SampledToken> sample_batch(std::span<const SamplerInput> inputs) {
    std::vector<SampledToken> out(inputs.size());
    ThreadPool::current().parallel_for(int64_t(inputs.size()), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) out[i] = sample(inputs[i]);
    });
    return out;
}

}  // namespace miniinfer
