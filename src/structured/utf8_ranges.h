// Code-point sets as byte-level grammar: a class such as [^"\\] or [α-ω] becomes the
// alternation of the UTF-8 byte sequences that encode its members, because the matcher and
// the tokens both work on bytes (a byte-level BPE token may hold half a character).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "structured/grammar.h"

namespace miniinfer::structured {

inline constexpr uint32_t kMaxCodepoint = 0x10FFFF;

struct CodepointRange {
    uint32_t lo;
    uint32_t hi;  // inclusive
};

// Sorted, merged, surrogates (U+D800..U+DFFF) removed.
std::vector<CodepointRange> normalize_ranges(std::vector<CodepointRange> ranges);
// Every code point not in `ranges` (normalized), surrogates excluded.
std::vector<CodepointRange> complement_ranges(const std::vector<CodepointRange>& ranges);
// Matches exactly the UTF-8 encodings of the code points in `ranges`.
ExprPtr utf8_class(const std::vector<CodepointRange>& ranges);
// Decodes one UTF-8 character at text[i], advancing i; Error on invalid UTF-8.
uint32_t decode_utf8(std::string_view text, size_t& i);

}  // namespace miniinfer::structured
