#include "engine/output_processor.h"

#include <algorithm>

#include "core/check.h"

namespace miniinfer {

namespace {
bool contains(const std::vector<int64_t>& ids, int32_t id) {
    return std::find(ids.begin(), ids.end(), id) != ids.end();
}
}  // namespace

OutputProcessor::OutputProcessor(const SamplingParams& params, const StopRules& rules,
                                 const Tokenizer* tokenizer, int64_t num_prompt_tokens)
    : rules_(&rules),
      stop_token_ids_(params.stop_token_ids),
      min_tokens_(params.min_tokens),
      max_tokens_(params.max_tokens),
      ignore_eos_(params.ignore_eos),
      num_prompt_tokens_(num_prompt_tokens) {
    if (tokenizer)
        detokenizer_.emplace(*tokenizer, params.skip_special_tokens, params.stop, params.min_tokens,
                             params.include_stop_str_in_output);
}

std::optional<std::string> OutputProcessor::stop_token_reason(int32_t token) const {
    if (num_output_tokens_ < min_tokens_) return std::nullopt;
    if (!ignore_eos_ && contains(rules_->eos_token_ids, token)) return "";
    if (contains(stop_token_ids_, token)) return std::to_string(token);
    return std::nullopt;
}

OutputProcessor::Update OutputProcessor::append(int32_t token) {
    MI_CHECK(!finished(), "a token after the request finished");
    ++num_output_tokens_;
    Update u;
    if (std::optional<std::string> reason = stop_token_reason(token)) {
        u.delta_text = finish(FinishReason::kStop, std::move(*reason));
    } else {
        if (detokenizer_) {
            u.delta_text = detokenizer_->push(token);
            if (detokenizer_->stopped()) finish(FinishReason::kStop, detokenizer_->stop_string());
        }
        if (!finished() && ends_by_length(num_output_tokens_))
            u.delta_text += finish(FinishReason::kLength);
    }
    u.finish_reason = finish_reason_;
    u.stop_reason = stop_reason_;
    return u;
}

bool OutputProcessor::ends_by_length(int64_t num_output_tokens) const {
    return num_output_tokens >= max_tokens_ ||
           (rules_->max_model_len > 0 &&
            num_prompt_tokens_ + num_output_tokens >= rules_->max_model_len);
}

std::string OutputProcessor::finish(FinishReason reason, std::string stop_reason) {
    if (finished()) return {};
    finish_reason_ = reason;
    stop_reason_ = std::move(stop_reason);
    return detokenizer_ ? detokenizer_->finish() : std::string();
}

}  // namespace miniinfer
