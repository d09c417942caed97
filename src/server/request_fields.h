// One rule for every request field a client of vLLM may send, on each front end: the HTTP
// endpoints (/v1/chat/completions, /v1/completions) and the Python package's SamplingParams.
// A field is honoured, accepted only at its default, refused with a 400 naming it, or
// informational (it asks nothing of the engine, as OpenAI's `user`). A field that is not in the
// table is ignored, as vLLM ignores extra fields, with one warning in the log per field name.
// The README's compatibility table lists these rows (a test compares them).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/json.h"

namespace miniinfer {

enum class FrontEnd : uint8_t { kChat = 1, kCompletion = 2, kPython = 4 };

enum class FieldUse : uint8_t {
    kHonoured,       // read and acted upon
    kDefaultOnly,    // accepted at `only` (or null); any other value is refused
    kRefused,        // any value but null (or an empty list/object) is refused
    kInformational,  // accepted; it asks nothing of the engine
};

struct RequestField {
    std::string_view name;
    uint8_t front_ends;  // FrontEnd bits
    FieldUse use;
    std::string_view only;  // kDefaultOnly: the one accepted value, as JSON
    std::string_view note;  // what it does, or why it is refused (the error and the README say it)
};

std::span<const RequestField> request_fields();

// Checks every key of `body` (an object) against the table for `front_end`: throws Error (a 400)
// naming the first refused field or value. Keys not in the table for this front end are
// ignored, each name logged once per process (a warning). Values of honoured fields are checked
// by their readers (SamplingParams::from_json, the protocol parsers), not here.
void check_request_fields(const Json& body, FrontEnd front_end);

// The table as JSON ([{name, front_ends: [...], use, only, note}]) for the README test and the
// Python package.
Json request_fields_json();

}  // namespace miniinfer
