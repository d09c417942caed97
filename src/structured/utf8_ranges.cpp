#include "structured/utf8_ranges.h"

#include <algorithm>

#include "core/check.h"
#include "tokenizer/utf8.h"

namespace miniinfer::structured {

namespace {

int encoded_len(uint32_t cp) {
    return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

std::string encode(uint32_t cp) {
    std::string s;
    utf8::append(s, char32_t(cp));
    return s;
}

// [lo, hi] of one encoded length, split until every byte position is a plain range.
void split_range(uint32_t lo, uint32_t hi, std::vector<ExprPtr>& out) {
    const int n = encoded_len(lo);
    for (int i = 1; i < n; ++i) {
        const uint32_t m = (1u << (6 * i)) - 1;  // the low i continuation bytes
        if ((lo & ~m) == (hi & ~m)) continue;
        if ((lo & m) != 0) {
            split_range(lo, lo | m, out);
            split_range((lo | m) + 1, hi, out);
            return;
        }
        if ((hi & m) != m) {
            split_range(lo, (hi & ~m) - 1, out);
            split_range(hi & ~m, hi, out);
            return;
        }
    }
    const std::string a = encode(lo), b = encode(hi);
    std::vector<ExprPtr> parts;
    for (int i = 0; i < n; ++i) parts.push_back(byte_range(uint8_t(a[i]), uint8_t(b[i])));
    out.push_back(parts.size() == 1 ? parts[0] : seq(std::move(parts)));
}

}  // namespace

std::vector<CodepointRange> normalize_ranges(std::vector<CodepointRange> ranges) {
    std::vector<CodepointRange> split;
    for (CodepointRange r : ranges) {
        r.hi = std::min(r.hi, kMaxCodepoint);
        if (r.lo > r.hi) continue;
        if (r.lo < 0xD800 && r.hi >= 0xD800) {
            split.push_back({r.lo, 0xD7FF});
            if (r.hi > 0xDFFF) split.push_back({0xE000, r.hi});
        } else if (r.lo >= 0xD800 && r.lo <= 0xDFFF) {
            if (r.hi > 0xDFFF) split.push_back({0xE000, r.hi});
        } else {
            split.push_back(r);
        }
    }
    std::sort(split.begin(), split.end(),
              [](const CodepointRange& a, const CodepointRange& b) { return a.lo < b.lo; });
    std::vector<CodepointRange> out;
    for (const CodepointRange& r : split) {
        if (!out.empty() && r.lo <= out.back().hi + 1) {
            out.back().hi = std::max(out.back().hi, r.hi);
        } else {
            out.push_back(r);
        }
    }
    return out;
}

std::vector<CodepointRange> complement_ranges(const std::vector<CodepointRange>& ranges) {
    std::vector<CodepointRange> out;
    uint32_t next = 0;
    for (const CodepointRange& r : normalize_ranges(ranges)) {
        if (r.lo > next) out.push_back({next, r.lo - 1});
        next = r.hi + 1;
    }
    if (next <= kMaxCodepoint) out.push_back({next, kMaxCodepoint});
    return normalize_ranges(out);
}

ExprPtr utf8_class(const std::vector<CodepointRange>& ranges) {
    std::vector<ExprPtr> branches;
    ByteSet ascii;
    for (CodepointRange r : normalize_ranges(ranges)) {
        for (uint32_t bound : {0x7Fu, 0x7FFu, 0xFFFFu}) {
            if (r.lo <= bound && r.hi > bound) {
                if (bound == 0x7F) {
                    for (uint32_t c = r.lo; c <= bound; ++c) ascii.set(c);
                } else {
                    split_range(r.lo, bound, branches);
                }
                r.lo = bound + 1;
            }
        }
        if (r.hi < 0x80) {
            for (uint32_t c = r.lo; c <= r.hi; ++c) ascii.set(c);
        } else {
            split_range(r.lo, r.hi, branches);
        }
    }
    if (ascii.any()) branches.insert(branches.begin(), bytes_expr(ascii));
    if (branches.size() == 1) return branches[0];
    return alt(std::move(branches));
}

uint32_t decode_utf8(std::string_view text, size_t& i) {
    const auto b0 = uint8_t(text[i]);
    const int n = b0 < 0x80         ? 1
                  : (b0 >> 5) == 6  ? 2
                  : (b0 >> 4) == 14 ? 3
                  : (b0 >> 3) == 30 ? 4
                                    : 0;
    if (n == 0 || i + n > text.size()) fail("invalid UTF-8 at byte {}", i);
    uint32_t cp = n == 1 ? b0 : b0 & (0x7F >> n);
    for (int k = 1; k < n; ++k) {
        const auto b = uint8_t(text[i + k]);
        if ((b & 0xC0) != 0x80) fail("invalid UTF-8 at byte {}", i);
        cp = (cp << 6) | (b & 0x3F);
    }
    i += n;
    return cp;
}

}  // namespace miniinfer::structured
