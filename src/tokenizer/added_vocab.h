// Added tokens (tokenizer.json "added_tokens"): strings matched in the text before BPE and
// mapped straight to their ids, like <|im_start|> or <think>.
//
// Matching follows Hugging Face: leftmost-longest, non-overlapping, over the raw text for
// tokens with normalized=false and over the normalized text for the others; single_word
// tokens match only between non-word characters; lstrip / rstrip tokens swallow whitespace
// on their left / right. With parse_special=false, tokens flagged special are not matched
// (their text is encoded as ordinary text); non-special added tokens still are.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"

namespace miniinfer {

struct AddedToken {
    std::string content;
    int32_t id = -1;
    bool special = false;
    bool lstrip = false;
    bool rstrip = false;
    bool single_word = false;
    bool normalized = false;
};

// A run of text: either an added token (id >= 0) or plain text to normalize and encode.
struct TextSegment {
    size_t begin, end;  // byte offsets into the text given to split()
    int32_t id;         // -1 for plain text
};

class AddedVocab {
  public:
    // `tokens` is tokenizer.json's "added_tokens" array (may be null).
    static AddedVocab from_json(const Json& tokens);

    const std::vector<AddedToken>& tokens() const { return tokens_; }

    // Splits valid UTF-8 `text` by the tokens with the given `normalized` flag. Appends to out.
    void split(std::string_view text, bool normalized, bool parse_special,
               std::vector<TextSegment>& out) const;

  private:
    // A byte trie over one group of token contents.
    struct Trie {
        struct Node {
            std::vector<std::pair<uint8_t, int32_t>> children;
            int32_t token_idx = -1;  // index into tokens_ when a content ends here
        };
        std::vector<Node> nodes{Node{}};
        bool first_byte[256] = {};
        void insert(std::string_view s, int32_t token_idx);
        // Index of the longest token starting at text[pos] and its length, or -1.
        std::pair<int32_t, size_t> longest_at(std::string_view text, size_t pos) const;
    };

    std::vector<AddedToken> tokens_;
    Trie raw_trie_, normalized_trie_;
};

}  // namespace miniinfer
