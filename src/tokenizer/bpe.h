// The BPE "model" of tokenizer.json: a vocabulary (token string → id) and ranked merges.
//
// Encoding a word starts from one symbol per character and repeatedly merges the adjacent
// pair with the lowest merge rank (the leftmost on ties) until no ranked pair is left,
// exactly as Hugging Face's BPE without dropout.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/json.h"

namespace miniinfer {

// Hash for std::string keys that also accepts string_view lookups without a copy.
struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// obj[key] by reference (json_get copies, which costs ~0.1 s on a 150k-entry vocabulary).
// Missing or null → Error "<where>: missing field '<key>'".
const Json& json_child(const Json& obj, const std::string& key, const std::string& where);

class BpeModel {
  public:
    // `spec` is tokenizer.json's "model". Merges may be "a b" strings or ["a", "b"] pairs.
    // Errors: a type other than BPE, dropout, byte_fallback, a subword prefix/suffix, or a
    // merge whose parts or result are missing from the vocabulary.
    static BpeModel from_json(const Json& spec);

    // Appends the ids of `word` (UTF-8; each character is an initial symbol) to `out`.
    // Characters outside the vocabulary become unk_token, or are dropped when there is none.
    void encode_word(std::string_view word, std::vector<int32_t>& out) const;

    const TokenIdMap& vocab() const { return vocab_; }
    std::optional<int32_t> unk_id() const { return unk_id_; }

  private:
    struct Merge {
        int32_t rank;
        int32_t new_id;
    };
    static uint64_t pair_key(int32_t a, int32_t b) {
        return (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
    }
    const Merge* find_merge(int32_t a, int32_t b) const;
    void merge_symbols(std::vector<int32_t>& symbols) const;

    TokenIdMap vocab_;
    std::unordered_map<uint64_t, Merge> merges_;
    std::vector<int32_t> char_ids_;  // id of each code point below U+0800 present in vocab, else -1
    std::optional<int32_t> unk_id_;
    bool fuse_unk_ = false;
    bool ignore_merges_ = false;
};

}  // namespace miniinfer
