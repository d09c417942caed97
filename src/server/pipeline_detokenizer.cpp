#include "server/pipeline_detokenizer.h"

namespace miniinfer::pipeline {

void PipelineDetokenizer::add(const std::string& id, const SamplingParams& params) {
    Request& r = requests_[id];
    if (tokenizer_)
        r.detokenizer.emplace(*tokenizer_, params.skip_special_tokens, params.stop,
                              params.min_tokens);
}

PipelineDetokenizer::Result PipelineDetokenizer::process(OutputDelta in) {
    auto it = requests_.find(in.request_id);
    if (it == requests_.end()) return {};
    Request& r = it->second;
    if (r.ended) {  // tokens the engine core made before it heard of the stop string
        if (in.finished) requests_.erase(it);
        return {};
    }
    if (!r.detokenizer) {
        if (in.finished) requests_.erase(it);
        return {std::move(in), false};
    }
    // LLMEngine::append_token's order: a final "stop" from the engine core is EOS or a stop
    // token id, whose text is never pushed; a stop string is looked for before length limits.
    OutputDelta out = in;
    out.new_token_ids.clear();
    out.new_logprobs.clear();
    const size_t num_new = in.new_token_ids.size();
    for (size_t i = 0; i < num_new; ++i) {
        out.new_token_ids.push_back(in.new_token_ids[i]);
        if (i < in.new_logprobs.size()) out.new_logprobs.push_back(in.new_logprobs[i]);
        const bool stop_token = in.finished && in.finish_reason == "stop" && i + 1 == num_new;
        if (stop_token) break;
        out.delta_text += r.detokenizer->push(in.new_token_ids[i]);
        if (!r.detokenizer->stopped()) continue;
        out.finished = true;
        out.finish_reason = "stop";
        out.stop_reason = r.detokenizer->stop_string();
        out.error.clear();
        if (in.finished) {
            requests_.erase(it);
            return {std::move(out), false};
        }
        r.ended = true;
        return {std::move(out), true};
    }
    if (in.finished) {
        out.delta_text += r.detokenizer->finish();
        requests_.erase(it);
    }
    return {std::move(out), false};
}

}  // namespace miniinfer::pipeline
