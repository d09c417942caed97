#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "tokenizer/hf_unicode.h"
#include "tokenizer/utf8.h"

namespace miniinfer {
namespace {

// Below U+0300 every character is its own NFC/NFD form and nothing there combines, so pure
// runs of such characters (all ASCII and Latin-1 text) skip utf8proc entirely.
bool trivially_normalized(std::string_view text) {
    for (char c : text) {
        const auto b = uint8_t(c);
        if (b >= 0xCC) return false;  // lead bytes of U+0300 and above
    }
    return true;
}

// True when no normalization form changes text made only of this code point and others like
// it: a starter (class 0) without any decomposition that is never the second half of a
// canonical composition. Most CJK, emoji and letters of alphabetic scripts qualify, which
// lets typical text skip utf8proc entirely.
bool is_inert(char32_t c, bool compat) {
    if (c < 0x80 || (!compat && c < 0x300)) return true;
    if (c >= 0x1100 && c <= 0x11FF) return false;  // Hangul jamo compose algorithmically
    // Seconds of canonical compositions that are starters themselves (e.g. U+09BE in
    // U+09C7 U+09BE → U+09CB), found once from utf8proc's decompositions.
    static const std::vector<bool> starter_seconds = [] {
        std::vector<bool> seconds(0x110000);
        for (char32_t cp = 0; cp < 0x110000; ++cp) {
            if (utf8proc_get_property(utf8proc_int32_t(cp))->decomp_seqindex == UINT16_MAX)
                continue;
            utf8proc_int32_t buf[8];
            const utf8proc_ssize_t n =
                utf8proc_decompose_char(utf8proc_int32_t(cp), buf, 8, UTF8PROC_DECOMPOSE, nullptr);
            for (utf8proc_ssize_t i = 1; i < n && n <= 8; ++i)
                if (utf8proc_get_property(buf[i])->combining_class == 0)
                    seconds[size_t(buf[i])] = true;
        }
        return seconds;
    }();
    const utf8proc_property_t* p = utf8proc_get_property(utf8proc_int32_t(c));
    return p->combining_class == 0 && p->decomp_seqindex == UINT16_MAX && !starter_seconds[c];
}

std::string utf8proc_normalize(std::string_view text, int options) {
    utf8proc_uint8_t* result = nullptr;
    const utf8proc_ssize_t len =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                     utf8proc_ssize_t(text.size()), &result, utf8proc_option_t(options));
    std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(result, &std::free);
    // Input is valid UTF-8 (the tokenizer sanitises first), so utf8proc cannot fail here.
    MI_CHECK(len >= 0, "utf8proc_map: {}", utf8proc_errmsg(len));
    return std::string(reinterpret_cast<const char*>(result), size_t(len));
}

// Normalizes the runs between characters unknown to Hugging Face (and U+11A7), keeping those
// as they are.
std::string normalize_like_hf(std::string_view text, int options) {
    std::string out;
    size_t run_begin = 0;
    for (size_t pos = 0; pos < text.size();) {
        const size_t start = pos;
        const char32_t c = utf8::next(text, pos);
        // U+11A7 sits just below the Hangul trailing consonants; utf8proc 2.8 composes a
        // syllable with it and drops it, while Unicode (and Hugging Face) leave it alone.
        if (!hf_unicode::unknown_to_normalizer(c) && c != 0x11A7) continue;
        out += utf8proc_normalize(text.substr(run_begin, start - run_begin), options);
        out.append(text.substr(start, pos - start));
        run_begin = pos;
    }
    if (run_begin == 0) return utf8proc_normalize(text, options);
    out += utf8proc_normalize(text.substr(run_begin), options);
    return out;
}

}  // namespace

Normalizer Normalizer::from_json(const Json& spec) {
    Normalizer n;
    if (spec.is_null()) return n;
    const std::string type = json_get<std::string>(spec, "type", "tokenizer.json normalizer");
    if (type == "Sequence") {
        for (const Json& step : json_get<Json>(spec, "normalizers", "normalizer Sequence")) {
            Normalizer inner = from_json(step);
            n.forms_.insert(n.forms_.end(), inner.forms_.begin(), inner.forms_.end());
        }
    } else if (type == "NFC") {
        n.forms_.push_back(Form::kNFC);
    } else if (type == "NFD") {
        n.forms_.push_back(Form::kNFD);
    } else if (type == "NFKC") {
        n.forms_.push_back(Form::kNFKC);
    } else if (type == "NFKD") {
        n.forms_.push_back(Form::kNFKD);
    } else {
        fail("tokenizer.json: normalizer '{}' is not supported", type);
    }
    return n;
}

// Normalizes only the runs that need it: from the last inert starter before a non-inert
// character up to the next inert one. Inert starters block reordering and composition, so
// normalizing runs separately gives the same text as normalizing everything.
std::string_view Normalizer::apply(std::string_view text, std::string& out) const {
    std::string_view cur = text;
    for (Form form : forms_) {
        const bool compat = form == Form::kNFKC || form == Form::kNFKD;
        if (!compat && trivially_normalized(cur)) continue;
        int options = UTF8PROC_STABLE | (compat ? UTF8PROC_COMPAT : 0);
        options |=
            (form == Form::kNFC || form == Form::kNFKC) ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE;
        std::string result;
        size_t copied = 0, last_inert = 0;
        for (size_t pos = 0; pos < cur.size();) {
            const size_t start = pos;
            if (is_inert(utf8::next(cur, pos), compat)) {
                last_inert = start;
                continue;
            }
            const size_t run_begin = std::max(last_inert, copied);
            for (size_t next = pos; next < cur.size(); next = pos) {
                if (is_inert(utf8::next(cur, next), compat)) break;
                pos = next;
            }
            result.append(cur.substr(copied, run_begin - copied));
            result += normalize_like_hf(cur.substr(run_begin, pos - run_begin), options);
            copied = pos;
        }
        if (copied == 0) continue;  // every character inert: nothing changes
        result.append(cur.substr(copied));
        out = std::move(result);
        cur = out;
    }
    return cur;
}

}  // namespace miniinfer
