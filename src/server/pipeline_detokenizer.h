// PipelineDetokenizer: the detokenizer process's work, without the process. It turns the
// engine core's deltas (token ids, no text) into the deltas LLMEngine would have produced in
// one process: incremental text, and stop strings applied.
//
// Each request's tokens go through an OutputProcessor, the same code and StopRules as the
// engine core's, so on EOS, stop token ids and length it ends the request on the token the
// engine core did, with the same reason. The engine core cannot see stop strings: when one
// matches at token k, this stage ends the request itself (tokens, logprobs and text cut to
// what one process returns at token k, finish_reason "stop", the stop string as stop_reason)
// and asks the caller to abort the request in the engine core; deltas the engine made
// meanwhile are dropped. An end this stage does not see (abort, error) is the engine core's.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "engine/output_processor.h"
#include "server/pipeline_messages.h"

namespace miniinfer::pipeline {

class PipelineDetokenizer {
  public:
    // `tokenizer` may be null (a model without one: no text, no stop strings, as LLMEngine); it
    // must outlive this object. `rules`: the engine core's (LLMEngine::stop_rules()).
    PipelineDetokenizer(const Tokenizer* tokenizer, StopRules rules)
        : tokenizer_(tokenizer), rules_(std::move(rules)) {}

    // A request the engine core accepted; its deltas follow.
    void add(const std::string& id, const SamplingParams& params, int64_t num_prompt_tokens);

    struct Result {
        std::optional<OutputDelta>
            delta;  // for the frontend; none: drop (the request already ended here)
        bool abort_in_engine = false;  // a stop string ended it: the engine core must stop it too
    };
    Result process(OutputDelta delta);

    size_t num_requests() const { return requests_.size(); }

  private:
    struct Request {
        OutputProcessor output;
        bool ended = false;  // ended here first; waiting for the engine core's final delta
    };
    const Tokenizer* tokenizer_;
    StopRules rules_;  // the processors point here
    std::map<std::string, Request> requests_;
};

}  // namespace miniinfer::pipeline
