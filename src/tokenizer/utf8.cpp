#include "tokenizer/utf8.h"

namespace miniinfer::utf8 {

Scan scan(std::string_view s) {
    const auto b0 = uint8_t(s[0]);
    if (b0 < 0x80) return {Scan::kValid, 1, b0};
    // Lead byte: sequence length and the allowed range of the second byte (Unicode Table 3-7);
    // the narrower ranges exclude overlongs, surrogates and code points above U+10FFFF.
    int len = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF)
        len = 2;
    else if (b0 == 0xE0)
        len = 3, lo = 0xA0;
    else if (b0 >= 0xE1 && b0 <= 0xEC)
        len = 3;
    else if (b0 == 0xED)
        len = 3, hi = 0x9F;
    else if (b0 >= 0xEE && b0 <= 0xEF)
        len = 3;
    else if (b0 == 0xF0)
        len = 4, lo = 0x90;
    else if (b0 >= 0xF1 && b0 <= 0xF3)
        len = 4;
    else if (b0 == 0xF4)
        len = 4, hi = 0x8F;
    else
        return {Scan::kInvalid, 1, 0};
    char32_t cp = b0 & (0x7F >> len);
    for (int i = 1; i < len; ++i) {
        if (size_t(i) >= s.size()) return {Scan::kIncomplete, i, 0};
        const auto b = uint8_t(s[i]);
        if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xBF)) return {Scan::kInvalid, i, 0};
        cp = (cp << 6) | (b & 0x3F);
    }
    return {Scan::kValid, len, cp};
}

void append(std::string& out, char32_t cp) {
    if (cp < 0x80) {
        out += char(cp);
    } else if (cp < 0x800) {
        out += char(0xC0 | (cp >> 6));
        out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += char(0xE0 | (cp >> 12));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    } else {
        out += char(0xF0 | (cp >> 18));
        out += char(0x80 | ((cp >> 12) & 0x3F));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    }
}

bool is_valid(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        if (uint8_t(s[i]) < 0x80) {
            ++i;
            continue;
        }
        Scan r = scan(s.substr(i));
        if (r.kind != Scan::kValid) return false;
        i += r.len;
    }
    return true;
}

std::string to_valid(std::string_view s) {
    if (is_valid(s)) return std::string(s);
    std::string out;
    out.reserve(s.size() + 8);
    for (size_t i = 0; i < s.size();) {
        Scan r = scan(s.substr(i));
        if (r.kind == Scan::kValid)
            out.append(s.substr(i, r.len));
        else
            out.append(kReplacementUtf8);
        i += r.len;
    }
    return out;
}

char32_t next(std::string_view s, size_t& pos) {
    Scan r = scan(s.substr(pos));
    pos += r.len;
    return r.kind == Scan::kValid ? r.cp : kReplacement;
}

}  // namespace miniinfer::utf8
