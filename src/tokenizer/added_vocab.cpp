#include "tokenizer/added_vocab.h"

#include <utf8proc.h>

#include "tokenizer/utf8.h"

namespace miniinfer {
namespace {

// Rust's char::is_whitespace (the Unicode White_Space property).
bool is_whitespace(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

// Close to Rust's char::is_alphanumeric (letters and numbers), plus '_' as Hugging Face's
// word test adds it.
bool is_word_char(char32_t c) {
    if (c == '_') return true;
    switch (utf8proc_category(utf8proc_int32_t(c))) {
        case UTF8PROC_CATEGORY_LU:
        case UTF8PROC_CATEGORY_LL:
        case UTF8PROC_CATEGORY_LT:
        case UTF8PROC_CATEGORY_LM:
        case UTF8PROC_CATEGORY_LO:
        case UTF8PROC_CATEGORY_ND:
        case UTF8PROC_CATEGORY_NL:
        case UTF8PROC_CATEGORY_NO:
            return true;
        default:
            return false;
    }
}

char32_t last_char(std::string_view s) {
    size_t i = s.size() - 1;
    while (i > 0 && (uint8_t(s[i]) & 0xC0) == 0x80) --i;
    size_t pos = i;
    return utf8::next(s, pos);
}

}  // namespace

void AddedVocab::Trie::insert(std::string_view s, int32_t token_idx) {
    int32_t node = 0;
    for (char ch : s) {
        const auto b = uint8_t(ch);
        int32_t child = -1;
        for (auto [key, idx] : nodes[node].children)
            if (key == b) child = idx;
        if (child < 0) {
            child = int32_t(nodes.size());
            nodes[node].children.emplace_back(b, child);
            nodes.emplace_back();
        }
        node = child;
    }
    if (nodes[node].token_idx < 0) nodes[node].token_idx = token_idx;
    first_byte[uint8_t(s[0])] = true;
}

std::pair<int32_t, size_t> AddedVocab::Trie::longest_at(std::string_view text, size_t pos) const {
    int32_t node = 0, found = -1;
    size_t found_len = 0;
    for (size_t i = pos; i < text.size(); ++i) {
        int32_t child = -1;
        for (auto [key, idx] : nodes[node].children)
            if (key == uint8_t(text[i])) child = idx;
        if (child < 0) break;
        node = child;
        if (nodes[node].token_idx >= 0) found = nodes[node].token_idx, found_len = i + 1 - pos;
    }
    return {found, found_len};
}

AddedVocab AddedVocab::from_json(const Json& tokens) {
    AddedVocab v;
    if (tokens.is_null()) return v;
    const std::string where = "tokenizer.json added_tokens";
    for (const Json& t : tokens) {
        AddedToken a;
        a.content = json_get<std::string>(t, "content", where);
        a.id = json_get<int32_t>(t, "id", where);
        a.special = json_get_or<bool>(t, "special", false, where);
        a.lstrip = json_get_or<bool>(t, "lstrip", false, where);
        a.rstrip = json_get_or<bool>(t, "rstrip", false, where);
        a.single_word = json_get_or<bool>(t, "single_word", false, where);
        a.normalized = json_get_or<bool>(t, "normalized", !a.special, where);
        if (a.content.empty()) fail("{}: token {} has empty content", where, a.id);
        if (!utf8::is_valid(a.content)) fail("{}: token {} is not valid UTF-8", where, a.id);
        (a.normalized ? v.normalized_trie_ : v.raw_trie_)
            .insert(a.content, int32_t(v.tokens_.size()));
        v.tokens_.push_back(std::move(a));
    }
    return v;
}

void AddedVocab::split(std::string_view text, bool normalized, bool parse_special,
                       std::vector<TextSegment>& out) const {
    const Trie& trie = normalized ? normalized_trie_ : raw_trie_;
    size_t emitted = 0;  // text before this offset is already in `out`
    size_t pos = 0;
    while (pos < text.size()) {
        if (!trie.first_byte[uint8_t(text[pos])]) {
            ++pos;
            continue;
        }
        auto [token_idx, len] = trie.longest_at(text, pos);
        if (token_idx < 0) {
            ++pos;
            continue;
        }
        const AddedToken& tok = tokens_[token_idx];
        size_t start = pos, stop = pos + len;
        pos = stop;  // the matcher resumes after the match even when the match is discarded
        if (tok.special && !parse_special) continue;
        if (tok.single_word) {
            const bool word_before = start > 0 && is_word_char(last_char(text.substr(0, start)));
            size_t after = stop;
            const bool word_after = stop < text.size() && is_word_char(utf8::next(text, after));
            if (word_before || word_after) continue;
        }
        if (tok.lstrip) {
            while (start > emitted) {
                size_t i = start - 1;
                while (i > emitted && (uint8_t(text[i]) & 0xC0) == 0x80) --i;
                size_t p = i;
                if (!is_whitespace(utf8::next(text, p))) break;
                start = i;
            }
        }
        if (tok.rstrip) {
            for (size_t p = stop; p < text.size();) {
                size_t q = p;
                if (!is_whitespace(utf8::next(text, q))) break;
                stop = p = q;
            }
        }
        if (start > emitted) out.push_back({emitted, start, -1});
        out.push_back({start, stop, tok.id});
        emitted = stop;
        pos = std::max(pos, stop);
    }
    if (emitted < text.size()) out.push_back({emitted, text.size(), -1});
}

}  // namespace miniinfer
