// What the side holding the tokenizer and the prompt ids does to a request before the engine
// core takes it, as vLLM's input processing: bad_words resolved into token ids, the prompt
// truncated, a structured output constraint checked. Written once for LLMEngine::add_request and
// the multi-process pipeline's tokenizer and engine processes.
#pragma once

#include <cstdint>
#include <vector>

#include "config/sampling_params.h"
#include "tokenizer/tokenizer.h"

namespace miniinfer {

// vLLM's SamplingParams.update_from_tokenizer. Each word, its leading ASCII whitespace
// stripped, is encoded without special tokens; " " + that word too, kept when it gives as many
// tokens as the first form but a different first one (a word token of its own mid-text).
// Replaces params.bad_words_token_ids (so resolving twice gives the same ids); no-op when
// bad_words is empty. Throws Error: bad_words without a tokenizer, or a word that encodes to
// no token.
void resolve_bad_words(SamplingParams& params, const Tokenizer* tokenizer);

// Builds the grammar of params.structured_outputs (parsing and lowering only, milliseconds:
// the vocabulary precompute stays with the engine's GrammarCache), so that the pipeline's
// tokenizer process refuses a bad schema, regex or grammar before the engine core sees it.
// Throws Error naming the problem, as LLMEngine::add_request would; no-op without a constraint.
void check_structured_output(const SamplingParams& params);

// vLLM's truncate_prompt_tokens: keeps the last k ids of prompt_ids (k = max_model_len for -1),
// in place; no-op when unset or when the prompt is not longer. Validated params assumed.
// Throws Error when k > max_model_len (as vLLM), whatever the prompt's length.
void truncate_prompt(std::vector<int32_t>& prompt_ids, const SamplingParams& params,
                     int64_t max_model_len);

}  // namespace miniinfer
