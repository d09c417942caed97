// PipelineDetokenizer: the detokenizer process's work, without the process. It turns the
// engine core's deltas (token ids, no text) into the deltas LLMEngine would have produced in
// one process: incremental text, and stop strings applied.
//
// The engine core cannot see stop strings. When one matches at token k, this stage ends the
// request itself (tokens, logprobs and text cut to what one process returns at token k,
// finish_reason "stop", the stop string as stop_reason) and asks the caller to abort the
// request in the engine core; deltas the engine made meanwhile are dropped.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "server/pipeline_messages.h"
#include "tokenizer/detokenizer.h"

namespace miniinfer::pipeline {

class PipelineDetokenizer {
  public:
    // `tokenizer` may be null (a model without one: no text, no stop strings, as LLMEngine).
    explicit PipelineDetokenizer(const Tokenizer* tokenizer) : tokenizer_(tokenizer) {}

    // A request the engine core accepted; its deltas follow.
    void add(const std::string& id, const SamplingParams& params);

    struct Result {
        std::optional<OutputDelta>
            delta;  // for the frontend; none: drop (the request already ended here)
        bool abort_in_engine = false;  // a stop string ended it: the engine core must stop it too
    };
    Result process(OutputDelta delta);

    size_t num_requests() const { return requests_.size(); }

  private:
    struct Request {
        std::optional<IncrementalDetokenizer> detokenizer;
        bool ended = false;  // a stop string ended it; waiting for the engine core's final delta
    };
    const Tokenizer* tokenizer_;
    std::map<std::string, Request> requests_;
};

}  // namespace miniinfer::pipeline
