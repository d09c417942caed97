// Qwen's (Hermes-style) tool calls in generated text, as vLLM's `--tool-call-parser hermes`
// reads them: each call is a block
//
//   <tool_call>
//   {"name": "get_weather", "arguments": {"city": "Paris"}}
//   </tool_call>
//
// and the text outside the blocks is the message's content. A block whose body is not a JSON
// object with a string "name" (and an object "arguments", if any) is not a call: it stays in the
// content, as written. The arguments are returned as a JSON string (OpenAI's format).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace miniinfer {

struct ToolCall {
    std::string id;  // "call_" + a per-response counter and index
    std::string name;
    std::string arguments;  // JSON text of the arguments object ("{}" if absent)
};

struct ToolCallText {
    std::string content;  // the text outside the calls (trimmed of the blank lines around them)
    std::vector<ToolCall> calls;
};

// The whole generated text at once (non-streaming responses). id_prefix names the calls
// (id_prefix + index).
ToolCallText parse_tool_calls(const std::string& text, const std::string& id_prefix);

// The same, a streamed delta at a time: content is released as soon as it cannot be the start
// of a "<tool_call>" tag; a call is released whole when its closing tag arrives (then OpenAI's
// stream sends its name and its arguments as two deltas).
class ToolCallStreamer {
  public:
    explicit ToolCallStreamer(std::string id_prefix) : id_prefix_(std::move(id_prefix)) {}
    struct Delta {
        std::string content;
        std::vector<ToolCall> calls;  // calls completed by this piece, in order
    };
    Delta feed(const std::string& text);
    Delta finish();  // an unclosed block is content after all
    int num_calls() const { return num_calls_; }

  private:
    std::string id_prefix_;
    std::string held_;  // text that may still be (part of) a tag or a block
    bool in_block_ = false;
    int num_calls_ = 0;
};

}  // namespace miniinfer
