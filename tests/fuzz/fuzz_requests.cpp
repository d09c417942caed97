// A fuzz target over everything a request body goes through before the engine sees it: the
// JSON parse with its nesting limit, the /v1/completions and /v1/chat/completions parsers,
// sampling-parameter validation, the chat template (Qwen3's, from the demo fixture) and the
// pipeline's MessagePack round trip. Built with libFuzzer (clang, -DMINIINFER_FUZZ=ON) or, with
// any compiler, as a replayer of the corpus (replay_main.cpp) that ctest runs.
//
// The contract checked: bad input ends in miniinfer::Error (a 400 for the server), never in
// another exception (which would be a 500), a crash or a sanitizer report.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/json.h"
#include "server/openai_protocol.h"
#include "server/pipeline_messages.h"
#include "tokenizer/chat_template.h"

using namespace miniinfer;

namespace {

const ChatTemplate& qwen3_template() {
    static const ChatTemplate t = ChatTemplate::load(MINIINFER_FIXTURES "/qwen3-demo");
    return t;
}

void exercise(const Json& body) {
    const SamplingParams defaults;
    auto render = [](const Json& messages, const Json& tools, const Json& kwargs) {
        return qwen3_template().render(nlohmann::ordered_json(messages),
                                       nlohmann::ordered_json(tools), true,
                                       nlohmann::ordered_json(kwargs));
    };
    std::optional<ApiRequest> request;
    try {
        request = parse_completion_request(body, defaults);
    } catch (const Error&) {
    }
    try {
        request = parse_chat_request(body, defaults, render);
    } catch (const Error&) {
    }
    if (!request) return;
    try {
        request->params.validate(151936);
    } catch (const Error&) {
        return;
    }
    // What the frontend sends the tokenizer process, and back.
    const Json message = {
        {"type", pipeline::kAdd}, {"id", "x"}, {"params", pipeline::to_json(request->params)}};
    const SamplingParams back =
        pipeline::params_from_json(pipeline::decode(pipeline::encode(message))["params"]);
    if (back.stop != request->params.stop || back.max_tokens != request->params.max_tokens)
        __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    Json body;
    try {
        body = parse_untrusted_json(text, "the request body");
    } catch (const Error&) {
        return 0;
    }
    exercise(body);
    try {  // the pipeline's decoder on arbitrary bytes
        pipeline::decode(text);
    } catch (const Error&) {
    }
    return 0;
}
