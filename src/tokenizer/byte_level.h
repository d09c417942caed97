// GPT-2's byte-level alphabet: every byte is shown as one printable Unicode character so that
// byte strings can live in a JSON vocabulary. Printable Latin-1 bytes map to themselves; the
// other 68 bytes (controls, space, DEL, NBSP, soft hyphen) map to U+0100.. in byte order.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace miniinfer::byte_level {

// The character that stands for byte b.
char32_t byte_to_char(uint8_t b);

// The byte that character c stands for, or nullopt when c is not in the alphabet.
std::optional<uint8_t> char_to_byte(char32_t c);

// Byte string → its byte-level spelling (UTF-8).
std::string encode(std::string_view bytes);

// Byte-level spelling → bytes. nullopt when some character is outside the alphabet, the
// caller then keeps the text as it is (what Hugging Face's ByteLevel decoder does).
std::optional<std::string> decode(std::string_view text);

}  // namespace miniinfer::byte_level
