#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

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

std::string_view Normalizer::apply(std::string_view text, std::string& out) const {
    if (forms_.empty()) return text;
    std::string_view cur = text;
    for (Form form : forms_) {
        const bool compat = form == Form::kNFKC || form == Form::kNFKD;
        if (!compat && trivially_normalized(cur)) continue;
        int options = UTF8PROC_STABLE | (compat ? UTF8PROC_COMPAT : 0);
        options |= (form == Form::kNFC || form == Form::kNFKC) ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE;
        utf8proc_uint8_t* result = nullptr;
        const utf8proc_ssize_t len =
            utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(cur.data()), utf8proc_ssize_t(cur.size()),
                         &result, utf8proc_option_t(options));
        std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(result, &std::free);
        // Input is valid UTF-8 (the tokenizer sanitises first), so utf8proc cannot fail here.
        MI_CHECK(len >= 0, "utf8proc_map: {}", utf8proc_errmsg(len));
        out.assign(reinterpret_cast<const char*>(result), size_t(len));
        cur = out;
    }
    return cur;
}

}  // namespace miniinfer
