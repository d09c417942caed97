// Reading JSON documents users hand us, with errors that name the file and the field.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>

#include "core/check.h"

namespace miniinfer {

using Json = nlohmann::json;

// The whole file as bytes; a file that cannot be opened is an Error naming the path.
std::string read_text_file(const std::filesystem::path& path);

// Parses a whole file; a missing file or a syntax error is an Error naming the path.
Json read_json_file(const std::filesystem::path& path);

// obj[key] as T. Missing (or null) → Error "<where>: missing field '<key>'"; wrong type →
// Error naming the field and the type found. Json or nlohmann::ordered_json.
template <typename T, typename J>
T json_get(const J& obj, const std::string& key, const std::string& where) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) fail("{}: missing field '{}'", where, key);
    try {
        return it->template get<T>();
    } catch (const nlohmann::json::exception&) {
        fail("{}: field '{}' has the wrong type ({}: {})", where, key, it->type_name(), it->dump());
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
