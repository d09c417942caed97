// Reading JSON documents users hand us, with errors that name the file and the field.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

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
// An integer T takes a JSON integer or a whole float within T's range (2.0 is 2); anything
// else is an Error naming the field (a float's conversion out of range would be undefined).
template <typename T, typename J>
T json_get(const J& obj, const std::string& key, const std::string& where) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) fail("{}: missing field '{}'", where, key);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        using Limits = std::numeric_limits<T>;
        bool in_range = true;
        if (it->is_number_float()) {
            const double d = it->template get<double>();
            in_range =
                d == std::trunc(d) && d >= double(Limits::min()) && d < double(Limits::max()) + 1.0;
        } else if (it->is_number_unsigned()) {
            in_range = it->template get<uint64_t>() <= uint64_t(Limits::max());
        } else if (it->is_number_integer()) {
            const int64_t v = it->template get<int64_t>();
            in_range = v >= int64_t(Limits::min()) && (Limits::is_signed || v >= 0) &&
                       uint64_t(std::max<int64_t>(v, 0)) <= uint64_t(Limits::max());
        }
        if (!in_range) fail("{}: field '{}' is not an integer in range", where, key);
    }
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
