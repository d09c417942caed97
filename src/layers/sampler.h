// The CPU reference sampler: one request's logits → one token, in vLLM's order:
//   structured output's token bitmask → allowed_token_ids mask → bad_words mask → logit_bias →
//   repetition penalty → frequency/presence penalties → min_tokens masking → greedy argmax
//   (temperature 0), or: / temperature → min_p → top_k → top_p → draw.
// Requests are independent: the draw is Philox4x32-10 at key = seed, counter = step (the number
// of tokens generated so far), so a seeded request gets the same tokens whatever batch it is in,
// and after a preemption. The CUDA sampler is tested against this one.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "config/sampling_params.h"

namespace miniinfer {

// Everything is borrowed; the caller keeps it alive for the call. Token ids must lie in
// [0, logits.size()) (MI_CHECK): the engine validates user input before it gets here.
struct SamplerInput {
    std::span<const float> logits;           // [vocab] raw model logits for this request
    const SamplingParams* params = nullptr;  // validated
    std::span<const int32_t> prompt_ids;     // for repetition_penalty
    std::span<const int32_t> output_ids;     // generated so far: penalties, min_tokens, the step
    std::span<const int64_t> eos_ids;  // masked, with stop_token_ids, while output < min_tokens
    uint64_t seed = 0;                 // params->seed, or one the engine drew at request creation
    // Structured output: [ceil(vocab / 32)] words, bit (id % 32) of word (id / 32) set when the
    // request's grammar allows token id (structured/grammar_matcher.h); empty: no grammar.
    std::span<const uint32_t> token_bitmask;
};

struct SampledToken {
    int32_t token = 0;
    // Of `token`, from log_softmax of the raw logits (vLLM V1's default), for a row that asks
    // for logprobs; the CUDA sampler leaves other rows' value unspecified (it spares a copy of
    // the raw logits when penalties change them in place).
    float logprob = 0.f;
    // params->logprobs entries (none if unset or 0), best first, ties by lower id; raw logits.
    std::vector<std::pair<int32_t, float>> top_logprobs;
};

SampledToken sample(const SamplerInput& in);

// Many requests; each row is sample(inputs[i]), spread over ThreadPool::current() (so not to
// be called from inside a task of that pool). Exceptions propagate to the caller.
std::vector<SampledToken> sample_batch(std::span<const SamplerInput> inputs);

// The steps before temperature, in place on `logits` ([vocab], initially a copy of in.logits):
// -inf for every token in.token_bitmask clears (when set); -inf for every token outside
// params->allowed_token_ids (when set); -inf for the ids
// banned_bad_word_ids gives; logits[id] += bias for each logit_bias entry, in list order (a
// repeated id adds each); repetition penalty (logit > 0 ? logit / p : logit * p, each token of
// prompt ∪ output once); logit -= frequency * count + presence * (count > 0) over output
// tokens; and -inf for EOS and stop_token_ids while output_ids.size() < min_tokens.
// -inf stays -inf through every later step, so the masks may come in any order.
void apply_penalties(std::span<float> logits, const SamplerInput& in);

// The tokens bad_words forbid at this step, as vLLM: for each sequence of
// params.bad_words_token_ids, its last token when output_ids end with the rest of it (a
// one-token sequence: always). In the order of the sequences; may repeat. Reads output_ids'
// values (no placeholders); mutates nothing.
std::vector<int32_t> banned_bad_word_ids(const SamplingParams& params,
                                         std::span<const int32_t> output_ids);

// The distribution the draw uses ([vocab], sums to 1, zero outside the kept set): one-hot at
// the argmax when greedy, else softmax(penalised / temperature) restricted by min_p
// (p >= min_p * max p), then top_k, then top_p (the smallest set, most probable first, ties by
// lower id, whose renormalised mass reaches top_p), renormalised. For tests and the CUDA check.
std::vector<double> sampling_distribution(const SamplerInput& in);

}  // namespace miniinfer
