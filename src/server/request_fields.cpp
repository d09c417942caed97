#include "server/request_fields.h"

#include <algorithm>
#include <mutex>
#include <set>

#include "core/logging.h"

namespace miniinfer {
namespace {

constexpr uint8_t C = uint8_t(FrontEnd::kChat);
constexpr uint8_t P = uint8_t(FrontEnd::kCompletion);
constexpr uint8_t Y = uint8_t(FrontEnd::kPython);
constexpr uint8_t kHttp = C | P;
constexpr uint8_t kAll = C | P | Y;

using enum FieldUse;

constexpr std::string_view kStructured =
    "structured output: the output follows it (one per request)";

// vLLM's chat and completion protocols (OpenAI's fields and vLLM's extras) and its
// SamplingParams, each field once.
constexpr RequestField kFields[] = {
    // What to generate from.
    {"model", kHttp, kHonoured, "", "must be the served model name (or absent)"},
    {"messages", C, kHonoured, "",
     "text content, or a list of text parts (joined with newlines); image, audio, video and file "
     "parts are refused: the model takes text only"},
    {"prompt", P, kHonoured, "", "a string, token ids, or a list of either"},
    {"suffix", P, kRefused, "", "insertion (fill-in-the-middle) is not supported"},
    {"echo", kHttp, kDefaultOnly, "false", "echoing the prompt is not supported"},
    {"prompt_embeds", P, kRefused, "", "prompt embeddings are not supported"},
    {"add_generation_prompt", C, kHonoured, "", "passed to the chat template (default true)"},
    {"continue_final_message", C, kHonoured, "",
     "the last (assistant) message is left open for the model to continue"},
    {"add_special_tokens", kHttp, kHonoured, "",
     "the tokenizer's post-processor tokens (default: chat false, completions true)"},
    {"chat_template_kwargs", C, kHonoured, "", "extra chat template variables (enable_thinking)"},
    {"chat_template", C, kRefused, "",
     "a per-request chat template is not accepted; start the server with --chat-template"},
    {"documents", C, kRefused, "", "retrieval documents are not supported by the Qwen templates"},
    {"mm_processor_kwargs", C, kRefused, "", "the model takes text only"},
    {"media_io_kwargs", C, kRefused, "", "the model takes text only"},
    {"modalities", C, kDefaultOnly, "[\"text\"]", "the model answers in text only"},
    {"audio", C, kRefused, "", "the model answers in text only"},
    {"prediction", C, kRefused, "", "predicted outputs (speculative decoding) are not supported"},
    {"web_search_options", C, kRefused, "", "web search is not supported"},
    {"truncate_prompt_tokens", kAll, kHonoured, "",
     "keep the prompt's last k tokens (-1: max_model_len)"},
    // Tools and reasoning.
    {"tools", C, kHonoured, "", "rendered by the chat template; calls parsed as Hermes JSON"},
    {"tool_choice", C, kHonoured, "",
     "\"none\", \"auto\" (needs --enable-auto-tool-choice), \"required\" or a named function "
     "(one call, its arguments following the tool's parameters: structured output)"},
    {"parallel_tool_calls", C, kDefaultOnly, "true",
     "every call the model writes is returned; limiting it to one is not supported"},
    {"functions", C, kRefused, "", "deprecated by OpenAI: send 'tools'"},
    {"function_call", C, kRefused, "", "deprecated by OpenAI: send 'tool_choice'"},
    {"include_reasoning", C, kHonoured, "",
     "false leaves reasoning_content out of the answer (Qwen3's <think> part)"},
    {"reasoning_effort", C, kRefused, "",
     "Qwen3's thinking is switched with chat_template_kwargs {\"enable_thinking\": false}"},
    // How long, and when to stop.
    {"max_tokens", kAll, kHonoured, "", "default: chat what the context leaves, completions 16"},
    {"max_completion_tokens", C, kHonoured, "", "as max_tokens"},
    {"min_tokens", kAll, kHonoured, "", ""},
    {"stop", kAll, kHonoured, "", "a string or a list; the choice's stop_reason names the one hit"},
    {"stop_token_ids", kAll, kHonoured, "", ""},
    {"include_stop_str_in_output", kAll, kHonoured, "", ""},
    {"ignore_eos", kAll, kHonoured, "", ""},
    // Sampling.
    {"temperature", kAll, kHonoured, "", ""},
    {"top_p", kAll, kHonoured, "", ""},
    {"top_k", kAll, kHonoured, "", ""},
    {"min_p", kAll, kHonoured, "", ""},
    {"seed", kAll, kHonoured, "", "the same seed gives the same tokens, whatever the batch"},
    {"repetition_penalty", kAll, kHonoured, "", ""},
    {"presence_penalty", kAll, kHonoured, "", ""},
    {"frequency_penalty", kAll, kHonoured, "", ""},
    {"logit_bias", kAll, kHonoured, "", "token id -> bias in [-100, 100], added before penalties"},
    {"allowed_token_ids", kAll, kHonoured, "", ""},
    {"bad_words", kAll, kHonoured, "", "as vLLM: the word's tokens, with and without a space"},
    {"n", kAll, kHonoured, "", "1..128"},
    {"best_of", P | Y, kDefaultOnly, "1", "best-of-n ranking is not supported"},
    {"use_beam_search", kHttp, kDefaultOnly, "false", "beam search is not supported"},
    {"length_penalty", kHttp, kDefaultOnly, "1.0", "beam search is not supported"},
    {"logits_processors", kAll, kRefused, "", "custom logits processors are not supported"},
    {"response_format", kHttp, kHonoured, "",
     "text, json_object or json_schema (structured output; with thinking on, the answer after the "
     "reasoning)"},
    {"structured_outputs", kAll, kHonoured, "",
     "json, json_object, regex, grammar (GBNF), choice; reasoning_end"},
    {"guided_json", kHttp, kHonoured, "", kStructured},
    {"guided_regex", kHttp, kHonoured, "", kStructured},
    {"guided_choice", kHttp, kHonoured, "", kStructured},
    {"guided_grammar", kHttp, kHonoured, "", kStructured},
    {"guided_decoding_backend", kHttp, kInformational, "", "one grammar engine is built in"},
    {"guided_whitespace_pattern", kHttp, kRefused, "", "the JSON grammar's whitespace is fixed"},
    {"structural_tag", kHttp, kRefused, "", "structural tags are not supported"},
    {"guided_decoding", Y, kRefused, "", "deprecated by vLLM: use structured_outputs"},
    // What comes back.
    {"stream", kHttp, kHonoured, "", ""},
    {"stream_options", kHttp, kHonoured, "",
     "include_usage; continuous_usage_stats is not supported"},
    {"logprobs", kAll, kHonoured, "", "chat: a boolean (with top_logprobs); completions: 0..20"},
    {"top_logprobs", C, kHonoured, "", "0..20"},
    {"prompt_logprobs", kAll, kRefused, "", "prompt logprobs are not supported"},
    {"return_tokens_as_token_ids", kHttp, kHonoured, "",
     "logprobs name tokens as \"token_id:<id>\""},
    {"return_token_ids", kHttp, kHonoured, "",
     "prompt_token_ids on the response, token_ids on each choice"},
    {"skip_special_tokens", kAll, kHonoured, "", ""},
    {"spaces_between_special_tokens", kAll, kInformational, "",
     "byte-level BPE decoding never adds spaces (as Hugging Face's fast tokenizers)"},
    {"detokenize", Y, kDefaultOnly, "true", "token ids without text are not supported"},
    {"output_kind", Y, kInformational, "", "LLM.generate returns final outputs"},
    // Bookkeeping.
    {"request_id", kHttp, kHonoured, "", "the response id is <chatcmpl|cmpl>-<request_id>"},
    {"user", kHttp, kInformational, "", "an end-user id for the caller's own records"},
    {"metadata", C, kInformational, "", "tags for the caller's own records"},
    {"service_tier", C, kInformational, "", "one tier is served"},
    {"store", C, kDefaultOnly, "false", "completions are not stored"},
    {"priority", kHttp, kDefaultOnly, "0", "requests are served first come, first served"},
    {"cache_salt", kHttp, kRefused, "", "prefix cache isolation is not supported"},
    {"kv_transfer_params", kHttp, kRefused, "", "disaggregated prefill is not supported"},
    {"vllm_xargs", kHttp, kRefused, "", "custom extra arguments are not supported"},
    {"extra_args", Y, kRefused, "", "custom extra arguments are not supported"},
};

const char* front_end_name(FrontEnd f) {
    switch (f) {
        case FrontEnd::kChat:
            return "chat";
        case FrontEnd::kCompletion:
            return "completions";
        case FrontEnd::kPython:
            return "python";
    }
    return "?";
}

// null, an empty list and an empty object ask for nothing.
bool asks_nothing(const Json& v) {
    return v.is_null() || ((v.is_array() || v.is_object()) && v.empty());
}

// JSON numbers compare by value (1 == 1.0); everything else exactly.
bool same_value(const Json& a, const Json& b) {
    if (a.is_number() && b.is_number()) return a.get<double>() == b.get<double>();
    return a == b;
}

}  // namespace

std::span<const RequestField> request_fields() {
    return kFields;
}

void check_request_fields(const Json& body, FrontEnd front_end) {
    if (!body.is_object()) return;
    for (const auto& item : body.items()) {
        const std::string& key = item.key();  // not a structured binding: the lambda captures it
        const Json& value = item.value();
        const auto* f = std::find_if(std::begin(kFields), std::end(kFields),
                                     [&](const RequestField& r) { return r.name == key; });
        if (f == std::end(kFields) || !(f->front_ends & uint8_t(front_end))) {
            static std::mutex mutex;
            static std::set<std::string> warned;
            std::lock_guard lock(mutex);
            if (warned.size() < 1024 && warned.insert(key).second)
                MI_LOG_WARN("request field '{}' is not a {} field: ignored (as vLLM ignores it)",
                            key.substr(0, 64), front_end_name(front_end));
            continue;
        }
        switch (f->use) {
            case FieldUse::kHonoured:
            case FieldUse::kInformational:
                break;
            case FieldUse::kRefused:
                if (!asks_nothing(value)) fail("'{}' is not supported: {}", key, f->note);
                break;
            case FieldUse::kDefaultOnly:
                if (!value.is_null() && !same_value(value, Json::parse(f->only)))
                    fail("'{}' is supported only as {}: {}", key, f->only, f->note);
                break;
        }
    }
}

Json request_fields_json() {
    Json rows = Json::array();
    for (const RequestField& f : kFields) {
        Json where = Json::array();
        for (FrontEnd e : {FrontEnd::kChat, FrontEnd::kCompletion, FrontEnd::kPython})
            if (f.front_ends & uint8_t(e)) where.push_back(front_end_name(e));
        static constexpr const char* kUse[] = {"honoured", "default only", "refused",
                                               "informational"};
        rows.push_back({{"name", f.name},
                        {"front_ends", where},
                        {"use", kUse[int(f.use)]},
                        {"only", f.only},
                        {"note", f.note}});
    }
    return rows;
}

}  // namespace miniinfer
