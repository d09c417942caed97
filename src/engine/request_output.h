// What callers hand the engine (Prompt) and what they get back (RequestOutput).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace miniinfer {

// Text (tokenized with the model's tokenizer) or token ids; ids win if both are set.
struct Prompt {
    std::string text;
    std::vector<int32_t> token_ids;
    static Prompt from_text(std::string t) { return {std::move(t), {}}; }
    static Prompt from_ids(std::vector<int32_t> ids) { return {{}, std::move(ids)}; }
};

struct TokenLogprob {
    int32_t token = 0;
    float logprob = 0;
    std::vector<std::pair<int32_t, float>> top;  // best first (SamplingParams::logprobs entries)
    bool operator==(const TokenLogprob&) const = default;
};

struct RequestOutput {
    std::string request_id;
    std::vector<int32_t> prompt_token_ids;
    std::vector<int32_t> token_ids;      // every generated token so far (EOS / stop token included)
    std::string text;                    // their text (stop string and special tokens excluded)
    std::string delta_text;              // text that became final in this step
    std::vector<TokenLogprob> logprobs;  // one per generated token, if asked for
    bool finished = false;
    std::string finish_reason;  // "" while running; "stop", "length", "abort", "error"
    std::string stop_reason;    // the stop string or stop token that ended it, if any
    std::string error;          // finish_reason == "error": why
    int64_t num_prompt_tokens = 0;
    int64_t num_cached_tokens = 0;  // prompt tokens whose K/V came from the prefix cache
};

}  // namespace miniinfer
