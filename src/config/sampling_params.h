// How one request is sampled and when it stops, with vLLM's meanings (and OpenAI's names).
// Built from the model's generation_config.json defaults, then a request's JSON fields on top;
// validate() turns every bad value into an Error for that request alone.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/generation_config.h"
#include "config/structured_output.h"
#include "core/json.h"

namespace miniinfer {

struct SamplingParams {
    double temperature = 1.0;         // >= 0; 0 = greedy
    int64_t top_k = 0;                // 0 or -1: all tokens (vLLM accepts -1; from_json stores 0)
    double top_p = 1.0;               // (0, 1]
    double min_p = 0.0;               // [0, 1]
    double repetition_penalty = 1.0;  // > 0; over prompt + output tokens, as vLLM/HF
    double presence_penalty = 0.0;    // [-2, 2]; output tokens only (OpenAI semantics)
    double frequency_penalty = 0.0;   // [-2, 2]; output tokens only
    std::optional<uint64_t> seed;     // none: the engine draws one when the request arrives
    int64_t max_tokens = 16;          // >= 1
    int64_t min_tokens = 0;           // >= 0 and <= max_tokens; EOS and stop_token_ids masked
    std::vector<std::string> stop;    // stop strings (not in the output); no empty strings
    std::vector<int64_t> stop_token_ids;  // [0, vocab_size)
    bool ignore_eos = false;
    std::optional<int64_t>
        logprobs;  // top-n per generated token, 0..20 (0 = only the sampled one's)
    bool skip_special_tokens = true;
    bool include_stop_str_in_output = false;  // a stop string that ends the text stays in it
    // Added to the logits before penalties, as vLLM (OpenAI: keys are token ids, [-100, 100]).
    std::vector<std::pair<int32_t, float>> logit_bias;
    // Only these tokens may be sampled (vLLM's allowed_token_ids); none: every token. Not empty.
    std::optional<std::vector<int64_t>> allowed_token_ids;
    // Words never generated, as vLLM: each word's token sequences (the word as given and with a
    // leading space) are resolved by the side that holds the tokenizer into bad_words_token_ids;
    // the last token of a sequence is masked whenever the output ends with the rest of it.
    std::vector<std::string> bad_words;
    std::vector<std::vector<int32_t>> bad_words_token_ids;
    // Keep only the last k prompt tokens (vLLM: -1 = max_model_len); none: no truncation.
    std::optional<int64_t> truncate_prompt_tokens;
    // Structured output (vLLM's structured_outputs); none: free text. Needs EOS (ignore_eos off,
    // min_tokens 0): the grammar ends the text with a stop token.
    std::optional<StructuredOutput> structured_outputs;

    // Every out-of-range, NaN or infinite value → Error naming the field and the value.
    // Token ids (stop_token_ids, logit_bias, allowed_token_ids, bad_words_token_ids) outside
    // [0, vocab_size) are errors too.
    void validate(int64_t vocab_size) const;

    // The model's generation_config.json defaults (temperature, top_p, top_k, min_p,
    // repetition_penalty) as vLLM applies them: fields absent from a request take them.
    // do_sample and max_new_tokens are not applied (vLLM ignores do_sample too).
    static SamplingParams from_defaults(const GenerationConfig& gen);

    // Fields present (and not null) in `json` override `base`. Names as vLLM/OpenAI: temperature,
    // top_p, top_k (-1 stored as 0), min_p, repetition_penalty, presence_penalty,
    // frequency_penalty, seed (any 64-bit integer; negatives wrap), max_tokens, min_tokens,
    // stop (a string or a list of strings), stop_token_ids, ignore_eos, logprobs,
    // skip_special_tokens, include_stop_str_in_output, logit_bias ({"<token id>": bias}),
    // allowed_token_ids, bad_words, bad_words_token_ids, truncate_prompt_tokens, structured_outputs
    // (StructuredOutput::from_json). `logprobs` may
    // also be a boolean as in OpenAI's chat API: true takes top_logprobs (default 0), false turns
    // logprobs off. A non-object, or a field of the wrong type → Error naming the field. Unknown
    // keys are ignored (the request-field table, server/request_fields.h, decides which may
    // come). Does not validate ranges.
    static SamplingParams from_json(const Json& json, const SamplingParams& base);
    // Every field, in from_json's names: from_json(to_json(), {}) gives back the same params.
    Json to_json() const;

    bool greedy() const { return temperature == 0.0; }
};

}  // namespace miniinfer
