#include "server/pipeline_detokenizer.h"

namespace miniinfer::pipeline {

namespace {
FinishReason reason_named(const std::string& name) {
    for (FinishReason r : {FinishReason::kStop, FinishReason::kLength, FinishReason::kAbort})
        if (name == finish_reason_name(r)) return r;
    return FinishReason::kError;
}
}  // namespace

void PipelineDetokenizer::add(const std::string& id, const SamplingParams& params,
                              int64_t num_prompt_tokens) {
    requests_.erase(id);
    requests_.emplace(id, Request{OutputProcessor(params, rules_, tokenizer_, num_prompt_tokens)});
}

PipelineDetokenizer::Result PipelineDetokenizer::process(OutputDelta in) {
    auto it = requests_.find(in.request_id);
    if (it == requests_.end()) return {};
    Request& r = it->second;
    if (r.ended) {  // tokens the engine core made before it heard of the stop string
        if (in.finished) requests_.erase(it);
        return {};
    }
    OutputDelta out = in;
    out.new_token_ids.clear();
    out.new_logprobs.clear();
    for (size_t i = 0; i < in.new_token_ids.size(); ++i) {
        out.new_token_ids.push_back(in.new_token_ids[i]);
        if (i < in.new_logprobs.size()) out.new_logprobs.push_back(in.new_logprobs[i]);
        OutputProcessor::Update update = r.output.append(in.new_token_ids[i]);
        out.delta_text += update.delta_text;
        if (!update.finished()) continue;
        out.finished = true;
        out.finish_reason = finish_reason_name(update.finish_reason);
        out.stop_reason = std::move(update.stop_reason);
        out.error.clear();
        if (in.finished) {  // the engine core ended it too (EOS, stop token, length)
            requests_.erase(it);
            return {std::move(out), false};
        }
        r.ended = true;  // a stop string, which only this side sees
        return {std::move(out), true};
    }
    if (in.finished) {  // ended by the engine core alone: abort, error
        out.delta_text += r.output.finish(reason_named(in.finish_reason), in.stop_reason);
        requests_.erase(it);
    }
    return {std::move(out), false};
}

}  // namespace miniinfer::pipeline
