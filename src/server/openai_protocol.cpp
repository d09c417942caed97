#include "server/openai_protocol.h"

#include <algorithm>
#include <cstring>

#include <fmt/ranges.h>

#include "core/logging.h"
#include "server/request_fields.h"

namespace miniinfer {
namespace {

constexpr const char* kThinkOpen = "<think>";
constexpr const char* kThinkClose = "</think>";

// What a non-text content part would need (OpenAI's and vLLM's part types), for the 400 that
// refuses it. Multimodal checkpoints (Qwen3.5's) are served as their text model.
std::string_view missing_input_feature(std::string_view part_type) {
    for (std::string_view vision : {"image_url", "image", "image_embeds", "video_url", "video"})
        if (part_type == vision) return "vision input (images and video) is not supported";
    for (std::string_view audio : {"input_audio", "audio_url", "audio"})
        if (part_type == audio) return "audio input is not supported";
    return "only text parts are supported";
}

// A JSON schema given as an object (or its text) for `field`.
std::string schema_text(const Json& v, const std::string& field) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() || v.is_boolean()) return v.dump();
    fail("'{}' must be a JSON schema (an object), got {}", field, v.type_name());
}

// OpenAI's response_format and vLLM's guided_* fields, read into params.structured_outputs
// (which from_json already filled from vLLM's structured_outputs). At most one may ask.
void read_structured(const Json& body, SamplingParams& params) {
    std::vector<std::string> asked;
    if (params.structured_outputs) asked.push_back("structured_outputs");
    auto set = [&](const char* field, StructuredOutput::Kind kind, std::string text) {
        asked.push_back(field);
        params.structured_outputs = StructuredOutput{.kind = kind,
                                                     .text = std::move(text),
                                                     .choices = {},
                                                     .prefix = {},
                                                     .suffix = {},
                                                     .reasoning_end = {}};
    };
    using enum StructuredOutput::Kind;
    if (const Json rf = body.value("response_format", Json()); !rf.is_null()) {
        if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
            fail("'response_format' must be an object with a string 'type'");
        const std::string type = rf["type"].get<std::string>();
        if (type == "json_object") {
            set("response_format", kJsonObject, "");
        } else if (type == "json_schema") {
            const Json js = rf.value("json_schema", Json());
            if (!js.is_object() || !js.contains("schema"))
                fail("'response_format.json_schema' must be an object with a 'schema'");
            set("response_format", kJsonSchema,
                schema_text(js["schema"], "response_format.json_schema.schema"));
        } else if (type != "text") {
            fail(
                "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", "
                "got \"{}\"",
                type.substr(0, 32));
        }
    }
    if (const Json v = body.value("guided_json", Json()); !v.is_null())
        set("guided_json", kJsonSchema, schema_text(v, "guided_json"));
    for (auto [field, kind] : {std::pair{"guided_regex", kRegex}, {"guided_grammar", kGrammar}})
        if (const Json v = body.value(field, Json()); !v.is_null()) {
            if (!v.is_string() || v.get<std::string>().empty())
                fail("'{}' must be a non-empty string", field);
            set(field, kind, v.get<std::string>());
        }
    if (const Json v = body.value("guided_choice", Json()); !v.is_null()) {
        if (!v.is_array() || v.empty()) fail("'guided_choice' must be a non-empty list of strings");
        set("guided_choice", kChoice, "");
        for (const Json& c : v) {
            if (!c.is_string()) fail("'guided_choice' entries must be strings");
            params.structured_outputs->choices.push_back(c.get<std::string>());
        }
    }
    if (asked.size() > 1)
        fail("only one structured output constraint may be given, got {}", fmt::join(asked, ", "));
}

// Fields both endpoints take: the sampling ones (SamplingParams::from_json), n, stream and the
// response options; the table refuses what is not supported before any is read.
void parse_common(const Json& body, const SamplingParams& defaults, ApiRequest& r,
                  FrontEnd front_end) {
    if (!body.is_object()) fail("the request body must be a JSON object");
    check_request_fields(body, front_end);
    r.model = json_get_or<std::string>(body, "model", "", "request");
    r.params = SamplingParams::from_json(body, defaults);
    read_structured(body, r.params);
    r.params.bad_words_token_ids.clear();  // the engine's, resolved from bad_words
    r.n = json_get_or<int64_t>(body, "n", 1, "request");
    if (r.n < 1 || r.n > 128) fail("'n' must be in [1, 128], got {}", r.n);
    r.stream = json_get_or<bool>(body, "stream", false, "request");
    if (body.contains("stream_options") && !body["stream_options"].is_null()) {
        const Json& options = body["stream_options"];
        if (!options.is_object()) fail("'stream_options' must be an object");
        r.include_usage = json_get_or<bool>(options, "include_usage", false, "stream_options");
        if (json_get_or<bool>(options, "continuous_usage_stats", false, "stream_options"))
            fail("'stream_options.continuous_usage_stats' is not supported");
    }
    r.request_id = json_get_or<std::string>(body, "request_id", "", "request");
    r.return_token_ids = json_get_or<bool>(body, "return_token_ids", false, "request");
    r.tokens_as_ids = json_get_or<bool>(body, "return_tokens_as_token_ids", false, "request");
    r.add_special_tokens = json_get_or<bool>(body, "add_special_tokens",
                                             front_end == FrontEnd::kCompletion, "request");
}

std::string token_text(const Tokenizer* tokenizer, int32_t id) {
    if (!tokenizer) return "token_id:" + std::to_string(id);
    return tokenizer->decode(std::span(&id, 1), false);
}

Json token_bytes(const Tokenizer* tokenizer, int32_t id) {
    Json bytes = Json::array();
    if (tokenizer)
        for (unsigned char c : tokenizer->token_bytes(id)) bytes.push_back(int(c));
    return bytes;
}

}  // namespace

Json ApiError::body() const {
    return {
        {"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", status}}}};
}

ApiRequest parse_completion_request(const Json& body, const SamplingParams& defaults) {
    ApiRequest r;
    parse_common(body, defaults, r, FrontEnd::kCompletion);
    if (!body.contains("prompt") || body["prompt"].is_null()) fail("missing field 'prompt'");
    const Json& p = body["prompt"];
    auto one = [&](const Json& item) {
        if (item.is_string()) {
            if (item.get<std::string>().empty()) fail("the prompt is empty");
            return Prompt::from_text(item.get<std::string>());
        }
        if (item.is_array() && (item.empty() || item[0].is_number_integer())) {
            if (item.empty()) fail("the prompt is empty");
            std::vector<int32_t> ids;
            for (const Json& t : item) {
                if (!t.is_number_integer()) fail("'prompt' token ids must be integers");
                const int64_t id = t.get<int64_t>();
                if (id < 0 || id > INT32_MAX)
                    fail("prompt token id {} is outside the vocabulary", id);
                ids.push_back(int32_t(id));
            }
            return Prompt::from_ids(std::move(ids));
        }
        fail(
            "'prompt' must be a string, a list of strings, a list of token ids, or a list of "
            "those");
    };
    if (p.is_array() && !p.empty() && (p[0].is_string() || p[0].is_array())) {
        for (const Json& item : p) r.prompts.push_back(one(item));
    } else {
        r.prompts.push_back(one(p));
    }
    return r;
}

Json normalise_messages(const Json& messages, bool any_role) {
    if (!messages.is_array() || messages.empty()) fail("'messages' must be a non-empty list");
    Json out = Json::array();
    for (size_t i = 0; i < messages.size(); ++i) {
        const Json& m = messages[i];
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
            fail("message {}: each message must be an object with a string 'role'", i);
        Json n = m;
        std::string role = m["role"].get<std::string>();
        if (role == "developer") role = n["role"] = "system";  // OpenAI's newer name for it
        if (!any_role && std::find(kChatRoles.begin(), kChatRoles.end(), role) == kChatRoles.end())
            fail("message {}: unknown role '{}' (it must be one of {})", i, role.substr(0, 32),
                 fmt::join(kChatRoles, ", "));
        const Json content = m.value("content", Json());
        if (content.is_null()) {
            const bool calls = m.contains("tool_calls") && !m["tool_calls"].is_null();
            if (role != "assistant" && !m.contains("content"))
                fail("message {} ({}): missing 'content'", i, role);
            if (role == "assistant" && !calls && !m.contains("content"))
                fail("message {} (assistant): 'content' or 'tool_calls' is required", i);
            n["content"] = "";
        } else if (content.is_array()) {
            std::string text;
            for (size_t k = 0; k < content.size(); ++k) {
                const Json& part = content[k];
                if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
                    fail("message {} ({}): content part {} must be an object with a 'type'", i,
                         role, k);
                const std::string type = part["type"].get<std::string>();
                if (type != "text")
                    fail(
                        "message {} ({}): content part {} is of type '{}': {}; this server "
                        "takes text only",
                        i, role, k, type.substr(0, 32), missing_input_feature(type));
                if (!part.contains("text") || !part["text"].is_string())
                    fail("message {} ({}): text part {} must have a string 'text'", i, role, k);
                if (k > 0) text += "\n";  // as vLLM joins text parts
                text += part["text"].get<std::string>();
            }
            n["content"] = text;
        } else if (!content.is_string()) {
            fail("message {} ({}): 'content' must be a string or a list of parts", i, role);
        }
        if (m.contains("tool_calls") && !m["tool_calls"].is_null() && !m["tool_calls"].is_array())
            fail("message {} ({}): 'tool_calls' must be a list", i, role);
        out.push_back(std::move(n));
    }
    return out;
}

namespace {

// The template's own words when it refuses (raise_exception), else which message it could not
// render: the shortest prefix of the conversation that fails names it. Its internals (line
// numbers, undefined names) go to the log only.
[[noreturn]] void explain_template_error(
    const Error& e, const Json& messages, const Json& tools, const Json& kwargs,
    const std::function<std::string(const Json&, const Json&, const Json&)>& render_chat) {
    const std::string what = e.what();
    MI_LOG_WARN("chat template error: {}", what);
    constexpr std::string_view kRaised = "raise_exception: ";
    if (const size_t at = what.find(kRaised); at != std::string::npos)
        fail("the chat template refused these messages: {}", what.substr(at + kRaised.size()));
    for (size_t k = 1; k <= messages.size(); ++k) {
        const Json prefix(messages.begin(), messages.begin() + std::ptrdiff_t(k));
        try {
            render_chat(prefix, tools, kwargs);
        } catch (const Error&) {
            fail("message {} ({}) cannot be rendered by this model's chat template", k - 1,
                 messages[k - 1].value("role", "?"));
        }
    }
    fail(
        "this model's chat template cannot render this request (its tools or "
        "chat_template_kwargs)");
}

// tool_choice "required" or {"type": "function", "function": {"name": ...}}: the answer is one
// call, as Qwen's template writes it (<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>),
// its arguments following the tool's parameter schema. Returns whether a call is forced.
bool forced_tool_call(const Json& choice, const Json& tools, SamplingParams& params) {
    if (choice.is_null() || choice == "none" || choice == "auto") return false;
    std::string name;
    if (choice.is_object() && choice.value("type", Json()) == "function" &&
        choice.contains("function") && choice["function"].is_object() &&
        choice["function"].value("name", Json()).is_string())
        name = choice["function"]["name"].get<std::string>();
    else if (choice != "required")
        fail(
            "tool_choice must be \"none\", \"auto\", \"required\" or {{\"type\": \"function\", "
            "\"function\": {{\"name\": ...}}}}");
    if (!tools.is_array() || tools.empty()) fail("tool_choice {} needs 'tools'", choice.dump());
    if (params.structured_outputs)
        fail("tool_choice {} cannot be combined with another structured output constraint",
             choice.dump());
    Json calls = Json::array();
    for (const Json& t : tools) {
        const Json& f = t["function"];
        if (!name.empty() && f["name"] != name) continue;
        Json args = f.value("parameters", Json());
        if (args.is_null()) args = {{"type", "object"}};
        calls.push_back({{"type", "object"},
                         {"properties", {{"name", {{"const", f["name"]}}}, {"arguments", args}}},
                         {"required", {"name", "arguments"}}});
    }
    if (calls.empty()) fail("tool_choice names '{}', which is not one of 'tools'", name);
    params.structured_outputs = StructuredOutput{
        .kind = StructuredOutput::Kind::kJsonSchema,
        .text = calls.size() == 1 ? calls[0].dump() : Json{{"anyOf", calls}}.dump(),
        .choices = {},
        .prefix = "<tool_call>\n",
        .suffix = "\n</tool_call>",
        .reasoning_end = {}};
    return true;
}

}  // namespace

ApiRequest parse_chat_request(
    const Json& body, const SamplingParams& defaults,
    const std::function<std::string(const Json&, const Json&, const Json&)>& render_chat,
    bool any_role, bool auto_tool_choice) {
    ApiRequest r;
    r.chat = true;
    Json adjusted = body;
    if (body.is_object() && body.contains("max_completion_tokens") &&
        !body["max_completion_tokens"].is_null())
        adjusted["max_tokens"] = body["max_completion_tokens"];
    parse_common(adjusted, defaults, r, FrontEnd::kChat);
    r.chat_logprobs = r.params.logprobs.has_value();
    r.include_reasoning = json_get_or<bool>(body, "include_reasoning", true, "request");
    const Json rendered = normalise_messages(body.value("messages", Json()), any_role);
    const Json tools = body.value("tools", Json());
    if (!tools.is_null()) {
        if (!tools.is_array()) fail("'tools' must be a list");
        for (const Json& t : tools)
            if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") ||
                !t["function"].is_object() || !t["function"].contains("name") ||
                !t["function"]["name"].is_string())
                fail(
                    "each tool must be {{\"type\": \"function\", \"function\": {{\"name\": "
                    "...}}}}");
    }
    const Json choice = body.value("tool_choice", Json());
    const bool forced = forced_tool_call(choice, tools, r.params);
    r.parse_tool_calls = tools.is_array() && !tools.empty() && choice != "none";
    if (r.parse_tool_calls && !auto_tool_choice && !forced)
        fail(
            "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to "
            "be set");
    Json kwargs = body.value("chat_template_kwargs", Json::object());
    if (!kwargs.is_object()) fail("'chat_template_kwargs' must be an object");
    const bool add_generation_prompt =
        json_get_or<bool>(body, "add_generation_prompt", true, "request");
    const bool continue_final = json_get_or<bool>(body, "continue_final_message", false, "request");
    if (continue_final && add_generation_prompt)
        fail("'continue_final_message' needs 'add_generation_prompt': false (as vLLM)");
    kwargs["add_generation_prompt"] = add_generation_prompt;
    std::string prompt;
    try {
        prompt = render_chat(rendered, tools, kwargs);
    } catch (const Error& e) {
        explain_template_error(e, rendered, tools, kwargs, render_chat);
    }
    if (continue_final) {  // cut the turn's end off after the final message's text, as vLLM
        const std::string last = rendered.back()["content"].get<std::string>();
        const size_t at = last.empty() ? std::string::npos : prompt.rfind(last);
        if (at == std::string::npos)
            fail(
                "'continue_final_message': the chat template does not render the final "
                "message's content as it is, so it cannot be continued");
        prompt.resize(at + last.size());
    }
    // Qwen3.5's template ends its generation prompt with "<think>\n" when thinking is on.
    const size_t open = prompt.rfind(kThinkOpen);
    r.reasoning_open =
        open != std::string::npos &&
        prompt.find_first_not_of(" \n", open + std::strlen(kThinkOpen)) == std::string::npos;
    // A thinking model writes its reasoning first: the constraint applies from the token after
    // "</think>" (vLLM's reasoning parser). Thinking is on when the prompt opened the block or
    // turning it off changes the prompt (Qwen3's template then closes an empty block itself).
    if (r.params.structured_outputs) {
        Json off = kwargs;
        off["enable_thinking"] = false;
        if (r.reasoning_open || (!continue_final && render_chat(rendered, tools, off) != prompt))
            r.params.structured_outputs->reasoning_end = kThinkClose;
    }
    r.prompts.push_back(Prompt::from_text(std::move(prompt)));
    return r;
}

std::pair<std::string, std::string> ReasoningSplitter::feed(const std::string& text) {
    held_ += text;
    std::string reasoning, content;
    for (;;) {
        if (state_ == State::kAnswer) {
            if (strip_newlines_) {  // the blank line after "</think>", however it is split
                held_.erase(0, std::min(held_.size(), held_.find_first_not_of('\n')));
                if (held_.empty()) break;
                strip_newlines_ = false;
            }
            content += held_;
            held_.clear();
            break;
        }
        const std::string tag = state_ == State::kStart ? kThinkOpen : kThinkClose;
        if (state_ == State::kStart) {
            // Only leading whitespace may come before "<think>"; anything else: no reasoning.
            const size_t first = held_.find_first_not_of(" \n");
            if (first == std::string::npos) break;
            const size_t n = std::min(tag.size(), held_.size() - first);
            if (held_.compare(first, n, tag, 0, n) != 0) {
                state_ = State::kAnswer;
                continue;
            }
            if (held_.size() - first < tag.size()) break;  // a partial "<think>": wait
            held_.erase(0, first + tag.size());
            state_ = State::kThinking;
            continue;
        }
        const size_t close = held_.find(tag);
        if (close != std::string::npos) {
            reasoning += held_.substr(0, close);
            held_.erase(0, close + tag.size());
            strip_newlines_ = true;
            state_ = State::kAnswer;
            continue;
        }
        // Keep back a suffix that could be the start of "</think>".
        size_t keep = 0;
        for (size_t k = std::min(tag.size() - 1, held_.size()); k > 0; --k)
            if (held_.compare(held_.size() - k, k, tag, 0, k) == 0) {
                keep = k;
                break;
            }
        reasoning += held_.substr(0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        break;
    }
    return {reasoning, content};
}

std::pair<std::string, std::string> ReasoningSplitter::finish() {
    std::string rest = std::exchange(held_, {});
    if (state_ == State::kThinking) return {rest, ""};
    return {"", rest};
}

Json completion_logprobs(const std::vector<TokenLogprob>& logprobs, const Tokenizer* tokenizer) {
    Json tokens = Json::array(), values = Json::array(), tops = Json::array(),
         offsets = Json::array();
    int64_t offset = 0;
    for (const TokenLogprob& t : logprobs) {
        const std::string text = token_text(tokenizer, t.token);
        tokens.push_back(text);
        values.push_back(t.logprob);
        offsets.push_back(offset);
        offset += int64_t(text.size());
        Json top = Json::object();
        for (auto [id, lp] : t.top) top[token_text(tokenizer, id)] = lp;
        tops.push_back(top);
    }
    return {{"tokens", tokens},
            {"token_logprobs", values},
            {"top_logprobs", tops},
            {"text_offset", offsets}};
}

Json chat_logprobs(const std::vector<TokenLogprob>& logprobs, const Tokenizer* tokenizer) {
    Json content = Json::array();
    for (const TokenLogprob& t : logprobs) {
        Json top = Json::array();
        for (auto [id, lp] : t.top)
            top.push_back({{"token", token_text(tokenizer, id)},
                           {"logprob", lp},
                           {"bytes", token_bytes(tokenizer, id)}});
        content.push_back({{"token", token_text(tokenizer, t.token)},
                           {"logprob", t.logprob},
                           {"bytes", token_bytes(tokenizer, t.token)},
                           {"top_logprobs", top}});
    }
    return {{"content", content}};
}

Json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
    return {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

}  // namespace miniinfer
