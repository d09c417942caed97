#include "engine/request_inputs.h"

#include <algorithm>
#include <string_view>

#include "core/check.h"
#include "structured/grammar_cache.h"

namespace miniinfer {

void check_structured_output(const SamplingParams& params) {
    if (params.structured_outputs) structured::build_grammar(*params.structured_outputs);
}

void resolve_bad_words(SamplingParams& params, const Tokenizer* tokenizer) {
    if (params.bad_words.empty()) return;
    if (!tokenizer) fail("bad_words needs the model's tokenizer (this model directory has none)");
    const EncodeOptions plain{.add_special_tokens = false};
    std::vector<std::vector<int32_t>> resolved;
    for (const std::string& word : params.bad_words) {
        std::string_view bare = word;
        bare.remove_prefix(std::min(bare.find_first_not_of(" \t\n\v\f\r"), bare.size()));
        std::vector<int32_t> ids = tokenizer->encode(bare, plain);
        if (ids.empty())
            fail("sampling params: 'bad_words' entry \"{}\" encodes to no token",
                 word.substr(0, 32));
        std::vector<int32_t> spaced = tokenizer->encode(" " + std::string(bare), plain);
        const bool own_word = spaced.size() == ids.size() && spaced.front() != ids.front();
        resolved.push_back(std::move(ids));
        if (own_word) resolved.push_back(std::move(spaced));
    }
    params.bad_words_token_ids = std::move(resolved);
}

void truncate_prompt(std::vector<int32_t>& prompt_ids, const SamplingParams& params,
                     int64_t max_model_len) {
    if (!params.truncate_prompt_tokens) return;
    const int64_t keep =
        *params.truncate_prompt_tokens == -1 ? max_model_len : *params.truncate_prompt_tokens;
    if (keep > max_model_len)
        fail("sampling params: 'truncate_prompt_tokens' ({}) is greater than max_model_len ({})",
             keep, max_model_len);
    if (keep >= int64_t(prompt_ids.size())) return;
    prompt_ids.erase(prompt_ids.begin(), prompt_ids.end() - keep);
}

}  // namespace miniinfer
