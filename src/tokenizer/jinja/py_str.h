// Python's str semantics for the interpreter: strings are UTF-8, but lengths, indices and
// whitespace are Python's (code points; str.isspace() characters).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace miniinfer::jinja::py {

bool is_space(char32_t c);  // str.isspace() for one character
std::vector<char32_t> code_points(const std::string& s);
std::string from_code_points(const std::vector<char32_t>& cps, size_t begin, size_t end);

// str.strip / lstrip / rstrip: `chars` absent or None strips whitespace.
std::string strip(const std::string& s, const std::optional<Value>& chars, bool left, bool right);
// str.split(sep=None, maxsplit=-1).
List split(const std::string& s, const std::optional<Value>& sep, int64_t maxsplit);
// str.replace(old, new, count=-1); an empty `old` is an Error.
std::string replace(const std::string& s, const std::string& old, const std::string& repl,
                    int64_t count);
// str.startswith / endswith; `arg` may be a tuple (list) of candidates.
bool starts_or_ends(const std::string& s, const Value& arg, bool starts);

// markupsafe.escape: & < > ' " as HTML entities.
std::string html_escape(const std::string& s);

enum class Case { kLower, kUpper, kTitle, kCapitalize };
std::string map_case(const std::string& s, Case mode);

}  // namespace miniinfer::jinja::py
