#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace miniinfer::byte_level {
namespace {

struct Tables {
    std::array<char32_t, 256> to_char{};
    std::array<int16_t, 512> to_byte{};  // every alphabet character is below U+0200

    Tables() {
        to_byte.fill(-1);
        int shifted = 0;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
            to_char[b] = printable ? char32_t(b) : char32_t(256 + shifted++);
            to_byte[to_char[b]] = int16_t(b);
        }
    }
};

const Tables& tables() {
    static const Tables t;
    return t;
}

}  // namespace

char32_t byte_to_char(uint8_t b) {
    return tables().to_char[b];
}

std::optional<uint8_t> char_to_byte(char32_t c) {
    if (c >= 512 || tables().to_byte[c] < 0) return std::nullopt;
    return uint8_t(tables().to_byte[c]);
}

std::string encode(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size() * 2);
    for (char b : bytes) utf8::append(out, byte_to_char(uint8_t(b)));
    return out;
}

std::optional<std::string> decode(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (size_t pos = 0; pos < text.size();) {
        auto b = char_to_byte(utf8::next(text, pos));
        if (!b) return std::nullopt;
        out += char(*b);
    }
    return out;
}

}  // namespace miniinfer::byte_level
