// A constraint on a request's output text (vLLM's StructuredOutputsParams): the one description
// the request carries (SamplingParams::structured_outputs) and the grammar engine compiles
// (src/structured/, which keys its cache on key()). Plain data: no grammar code here.
#pragma once

#include <string>
#include <vector>

#include "core/json.h"

namespace miniinfer {

struct StructuredOutput {
    enum class Kind { kJsonSchema, kJsonObject, kRegex, kGrammar, kChoice };
    Kind kind = Kind::kJsonObject;
    std::string text;                  // the schema (JSON text), the regex or the GBNF grammar
    std::vector<std::string> choices;  // kChoice: the output is exactly one of these
    // kJsonSchema: texts around the document; the server's forced tool call ("<tool_call>\n",
    // "\n</tool_call>"). JSON keys json_prefix / json_suffix (MiniInfer's own).
    std::string prefix, suffix;
    // A reasoning model's end of thinking ("</think>"), the text of one added token: the output
    // is free up to and including that token, and the constraint (after up to two newlines,
    // the blank line Qwen writes there) applies to the rest, as vLLM's reasoning parser does.
    // Empty, or a text the tokenizer has no token for: the constraint starts at the first
    // token. The server sets it when the chat template leaves the model thinking. JSON key
    // reasoning_end (MiniInfer's own).
    std::string reasoning_end;

    // vLLM's names: exactly one of {"json": <schema object or its text>}, {"json_object": true},
    // {"regex": "..."}, {"grammar": "<GBNF>"}, {"choice": ["a", "b"]}, plus json_prefix,
    // json_suffix and reasoning_end. Error naming the key.
    static StructuredOutput from_json(const Json& json);
    Json to_json() const;
    // Identifies the grammar the constraint compiles to (GrammarCache's key).
    std::string key() const;
    bool operator==(const StructuredOutput&) const = default;
};

}  // namespace miniinfer
