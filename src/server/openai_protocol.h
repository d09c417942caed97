// The OpenAI HTTP API as MiniInfer speaks it: parsing /v1/completions and /v1/chat/completions
// bodies into engine requests, and building the response bodies and stream chunks.
// No I/O here: the HTTP server (http_server.cpp) moves the bytes.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "config/sampling_params.h"
#include "core/json.h"
#include "engine/request_output.h"
#include "tokenizer/tokenizer.h"

namespace miniinfer {

// An error for the client: HTTP status and OpenAI's error body.
struct ApiError {
    int status;
    std::string message;
    std::string type;  // "invalid_request_error", "authentication_error", "not_found_error", ...
    Json body() const;
};

// One client request, fanned out into prompts.size() * n engine requests.
struct ApiRequest {
    bool chat = false;
    std::string model;
    std::vector<Prompt> prompts;  // completions may batch prompts; chat has one
    SamplingParams params;
    int64_t n = 1;
    bool stream = false;
    bool include_usage = false;
    bool chat_logprobs = false;      // chat's logprobs format
    bool parse_tool_calls = false;   // tools given, tool_choice "auto": answers may hold calls
    std::string request_id;          // the client's: the response id is <prefix>-<request_id>
    bool add_special_tokens = true;  // the tokenizer's post-processor tokens (chat: false)
    bool include_reasoning = true;   // false: no reasoning_content in the answer
    // The prompt ends inside an open "<think>" (Qwen3.5's generation prompt): the answer starts
    // with reasoning, without the tag.
    bool reasoning_open = false;
    bool return_token_ids = false;  // prompt_token_ids and each choice's token_ids
    bool tokens_as_ids = false;     // logprobs name tokens "token_id:<id>"
};

// The message roles the model's own (Qwen) chat template renders; any other role would be
// dropped silently by it, so a request carrying one is refused (OpenAI answers 400 too).
inline constexpr std::array<std::string_view, 4> kChatRoles = {"system", "user", "assistant",
                                                               "tool"};

// Throws Error (-> 400) on malformed bodies, wrong types and bad values, and on every field the
// request-field table (server/request_fields.h) refuses. `render_chat` turns chat messages
// (+ tools, kwargs; kwargs carries add_generation_prompt) into a prompt string; an Error it
// throws becomes one that names the message at fault, never the template's internals.
// Messages are normalised first, as vLLM does: text parts joined with "\n", a missing or null
// content "" (a tool-call turn), "developer" read as "system"; a non-text part (image, video,
// audio, file) is refused naming its type and the missing feature ("vision input (images and
// video) is not supported"). `any_role`: accept roles outside kChatRoles (a custom
// --chat-template decides what they mean). `auto_tool_choice`: the server parses tool calls
// (--enable-auto-tool-choice --tool-call-parser hermes); without it a request with tools and
// tool_choice "auto" is refused, as vLLM refuses it. tool_choice "none" renders the tools but
// never parses a call; "required" and a named function force one call through structured
// output (its arguments following the tool's parameters), with or without auto_tool_choice.
ApiRequest parse_completion_request(const Json& body, const SamplingParams& defaults);
ApiRequest parse_chat_request(
    const Json& body, const SamplingParams& defaults,
    const std::function<std::string(const Json& messages, const Json& tools, const Json& kwargs)>&
        render_chat,
    bool any_role = false, bool auto_tool_choice = false);

// The messages as the chat template should see them (see parse_chat_request). Throws Error
// naming the message (its index and role) that is malformed or asks for what is unsupported.
Json normalise_messages(const Json& messages, bool any_role);

// Splits Qwen3's "<think>...</think>" reasoning from the answer, also when the tags arrive
// split across streamed deltas. `reasoning_open` (ApiRequest::reasoning_open): the prompt
// opened the block, so the text is reasoning up to "</think>" (or to its end, when cut off).
class ReasoningSplitter {
  public:
    explicit ReasoningSplitter(bool reasoning_open = false)
        : state_(reasoning_open ? State::kThinking : State::kStart) {}
    // Returns {reasoning delta, content delta} for the next piece of generated text.
    std::pair<std::string, std::string> feed(const std::string& text);
    std::pair<std::string, std::string> finish();  // flushes what was held back

  private:
    enum class State { kStart, kThinking, kAnswer } state_;
    std::string held_;
    bool strip_newlines_ = false;
};

// Logprobs in the two formats ("tokens"/"token_logprobs"/"top_logprobs" for completions,
// "content": [{token, logprob, bytes, top_logprobs}] for chat).
Json completion_logprobs(const std::vector<TokenLogprob>& logprobs, const Tokenizer* tokenizer);
Json chat_logprobs(const std::vector<TokenLogprob>& logprobs, const Tokenizer* tokenizer);

Json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens);

}  // namespace miniinfer
