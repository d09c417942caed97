// OutputProcessor: what one request's generated tokens become, text deltas and, when it ends,
// why. The stop checks live here and nowhere else, in vLLM's order, on each new token:
//
//   1. an EOS id (not with ignore_eos)  -> "stop", stop_reason ""          } only once at least
//   2. one of params.stop_token_ids     -> "stop", stop_reason "<the id>"  } min_tokens were made
//   3. a stop string ends in the text   -> "stop", stop_reason the string; the text is cut just
//                                          before it (after it with include_stop_str_in_output;
//                                          IncrementalDetokenizer's rules)
//   4. max_tokens or max_model_len      -> "length"
//
// The first that fires ends the request. The text of a token that fires 1 or 2 is never
// detokenized. Whatever ends the request, except a stop string, releases the text held back
// (a possible start of a stop string, an unfinished UTF-8 character) with the last delta.
//
// Both ends of the pipeline run it, so they cannot drift: LLMEngine (in one process with the
// tokenizer; as the pipeline's engine core without one, where 3 never fires) and
// PipelineDetokenizer (with the tokenizer and the engine core's StopRules, so it reaches the
// engine core's verdict on 1, 2 and 4 and also sees 3). Nothing here knows of a transport.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/sampling_params.h"
#include "scheduler/request.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace miniinfer {

// What ends every request of one engine besides its SamplingParams.
struct StopRules {
    std::vector<int64_t> eos_token_ids;  // config.json, generation_config, tokenizer_config
    int64_t max_model_len = 0;           // prompt + generated tokens; 0: no limit
};

class OutputProcessor {
  public:
    // One request with `num_prompt_tokens` prompt tokens. `rules` and `tokenizer` (null: no
    // text and no stop strings) are borrowed and must outlive this object.
    OutputProcessor(const SamplingParams& params, const StopRules& rules,
                    const Tokenizer* tokenizer, int64_t num_prompt_tokens);

    struct Update {
        std::string delta_text;                            // text that became final
        FinishReason finish_reason = FinishReason::kNone;  // kNone: the request goes on
        std::string stop_reason;  // the stop string or stop token id that ended it, else ""
        bool finished() const { return finish_reason != FinishReason::kNone; }
    };

    // Takes the next generated token and runs the checks above. MI_CHECK: not after finished().
    Update append(int32_t token);

    // The request ends for a reason decided elsewhere (abort, error, or the engine core's word
    // when this side missed it). Returns the text held back; "" if already finished.
    std::string finish(FinishReason reason, std::string stop_reason = "");

    // True when the `num_output_tokens`-th output token ends the request by length (max_tokens
    // or max_model_len), whatever token it is: overlap scheduling gives no step after it.
    bool ends_by_length(int64_t num_output_tokens) const;

    bool finished() const { return finish_reason_ != FinishReason::kNone; }
    FinishReason finish_reason() const { return finish_reason_; }
    const std::string& stop_reason() const { return stop_reason_; }
    int64_t num_output_tokens() const { return num_output_tokens_; }

  private:
    // The token check (1, 2): the stop_reason if `token` ends the request.
    std::optional<std::string> stop_token_reason(int32_t token) const;

    const StopRules* rules_;
    std::vector<int64_t> stop_token_ids_;
    int64_t min_tokens_, max_tokens_;
    bool ignore_eos_;
    std::optional<IncrementalDetokenizer> detokenizer_;
    int64_t num_prompt_tokens_;
    int64_t num_output_tokens_ = 0;
    FinishReason finish_reason_ = FinishReason::kNone;
    std::string stop_reason_;
};

}  // namespace miniinfer
