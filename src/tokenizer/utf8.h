// UTF-8 helpers shared by the tokenizer, the detokenizer and the chat-template interpreter.
//
// Invalid input is never an error here: it is replaced with U+FFFD following Unicode's
// "substitution of maximal subparts" (one U+FFFD per maximal invalid prefix), which is what
// Rust's String::from_utf8_lossy and Python's bytes.decode(errors="replace") both do, so our
// output matches Hugging Face's on the same bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace miniinfer::utf8 {

inline constexpr char32_t kReplacement = 0xFFFD;
inline constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

// Result of looking at the bytes starting at some position.
struct Scan {
    enum Kind { kValid, kInvalid, kIncomplete } kind;
    int len;      // kValid: bytes of the character; kInvalid: bytes one U+FFFD replaces;
                  // kIncomplete: bytes present (a valid prefix cut off by the end)
    char32_t cp;  // the code point when kValid
};

// Classifies the character at the start of s (s non-empty).
Scan scan(std::string_view s);

// Appends the UTF-8 encoding of cp (cp must be a Unicode scalar value).
void append(std::string& out, char32_t cp);

// True when s is entirely well-formed UTF-8.
bool is_valid(std::string_view s);

// s with every invalid or truncated sequence replaced by U+FFFD (maximal subparts).
std::string to_valid(std::string_view s);

// Decodes the code point at s[pos] of valid UTF-8 and advances pos.
char32_t next(std::string_view s, size_t& pos);

}  // namespace miniinfer::utf8
