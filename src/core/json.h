// Reading JSON documents users hand us, with errors that name the file and the field.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "core/check.h"

namespace miniinfer {

using Json = nlohmann::json;

// The deepest nesting of arrays and objects accepted from a user (a request body, an input
// line). Parsing is iterative, but dump(), copies, comparisons and our own converters recurse:
// 130 KB of "[[[[..." nests 65,000 levels and overflows a thread's stack. 64 is ample for
// any real request (a chat with tools nests about 8).
inline constexpr int kMaxJsonDepth = 64;

// True if `text` nests arrays/objects deeper than `max_depth` (brackets inside strings do not
// count). A linear scan that never recurses; it does not validate the rest of the syntax.
bool json_nests_deeper_than(std::string_view text, int max_depth);

// Parses JSON from an untrusted source. Too deep nesting or a syntax error (including invalid
// UTF-8) is an Error "<what> is not valid JSON" / "<what> nests deeper than 64 levels"; the
// message never quotes the text. J is Json or nlohmann::ordered_json.
template <typename J = Json>
J parse_untrusted_json(std::string_view text, std::string_view what) {
    if (json_nests_deeper_than(text, kMaxJsonDepth))
        fail("{} nests arrays or objects deeper than {} levels", what, kMaxJsonDepth);
    J j = J::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) fail("{} is not valid JSON", what);
    return j;
}

// The whole file as bytes; a file that cannot be opened is an Error naming the path.
std::string read_text_file(const std::filesystem::path& path);

// Parses a whole file; a missing file or a syntax error is an Error naming the path.
Json read_json_file(const std::filesystem::path& path);

// obj[key] as T. Missing (or null) → Error "<where>: missing field '<key>'"; wrong type →
// Error naming the field and the type found (never the value: it may be huge or nested).
// Json or nlohmann::ordered_json.
template <typename T, typename J>
T json_get(const J& obj, const std::string& key, const std::string& where) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) fail("{}: missing field '{}'", where, key);
    try {
        return it->template get<T>();
    } catch (const nlohmann::json::exception&) {
        fail("{}: field '{}' has the wrong type ({})", where, key, it->type_name());
    }
}

// Like json_get, but absent or null gives `fallback`.
template <typename T, typename J>
T json_get_or(const J& obj, const std::string& key, const T& fallback, const std::string& where) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return fallback;
    return json_get<T>(obj, key, where);
}

}  // namespace miniinfer
