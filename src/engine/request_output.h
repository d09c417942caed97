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

// One request's output from one engine step. Every output carries what changed in that step
// (new tokens, their logprobs, new text, the finish); the whole request (every token, text and
// logprob, the prompt) comes once, in its final output (finished == true). A step's cost then
// does not grow with the requests' lengths (vLLM's RequestOutputKind.DELTA, with the final
// output cumulative).
struct RequestOutput {
    std::string request_id;
    // What changed in this step:
    std::vector<int32_t> new_token_ids;      // tokens generated in this step (EOS/stop included)
    std::vector<TokenLogprob> new_logprobs;  // one per new token, if asked for
    std::string delta_text;                  // text that became final in this step
    int64_t num_output_tokens = 0;           // generated so far, this step's included
    bool finished = false;
    std::string finish_reason;  // "" while running; "stop", "length", "abort", "error"
    std::string stop_reason;    // the stop string or stop token that ended it, if any
    std::string error;          // finish_reason == "error": why
    int64_t num_prompt_tokens = 0;
    int64_t num_cached_tokens = 0;  // prompt tokens whose K/V came from the prefix cache
    // The whole request, in the final output only (empty before):
    std::vector<int32_t> prompt_token_ids;
    std::vector<int32_t> token_ids;      // every generated token (EOS / stop token included)
    std::string text;                    // their text (stop string and special tokens excluded)
    std::vector<TokenLogprob> logprobs;  // one per generated token, if asked for
};

}  // namespace miniinfer
