// A model's vocabulary as a grammar sees it: the bytes each token id stands for, arranged in
// a trie (shared prefixes walked once) for the token-mask precompute.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace miniinfer {
class Tokenizer;
}

namespace miniinfer::structured {

class Vocabulary {
  public:
    struct TrieNode {
        uint8_t byte;        // the edge from the parent (unused at the root, node 0)
        int32_t end;         // one past the last node of the subtree (preorder)
        int32_t self_begin;  // tokens ending exactly here: trie_tokens()[self_begin, self_end)
        int32_t self_end;
        int32_t tokens_end;  // the subtree's tokens: trie_tokens()[self_begin, tokens_end)
    };

    // token_bytes[id]: what id decodes to. An empty entry is never allowed by a grammar
    // (special tokens, ids beyond the tokenizer's). stop_ids: allowed exactly when the
    // grammar is complete (end of sequence).
    Vocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> stop_ids);
    // Every non-special token of `tokenizer`, padded with empty entries to vocab_size (the
    // model's embedding rows, which may exceed the tokenizer's ids).
    static std::shared_ptr<const Vocabulary> from_tokenizer(const Tokenizer& tokenizer,
                                                            int32_t vocab_size,
                                                            std::vector<int32_t> stop_ids);

    int32_t size() const { return int32_t(token_bytes_.size()); }
    int32_t num_mask_words() const { return (size() + 31) / 32; }  // a mask's uint32 words
    std::string_view bytes(int32_t id) const { return token_bytes_[id]; }
    const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
    const std::vector<TrieNode>& trie() const { return trie_; }
    const std::vector<int32_t>& trie_tokens() const { return trie_tokens_; }
    // Bit per token with non-empty bytes ([num_mask_words] uint32).
    const std::vector<uint32_t>& nonempty_mask() const { return nonempty_mask_; }
    // Identifies the contents (compiled grammars are cached per vocabulary).
    uint64_t fingerprint() const { return fingerprint_; }

  private:
    void build_trie(std::vector<int32_t>& sorted, size_t lo, size_t hi, size_t depth, uint8_t byte);

    std::vector<std::string> token_bytes_;
    std::vector<int32_t> stop_ids_;
    std::vector<TrieNode> trie_;
    std::vector<int32_t> trie_tokens_;
    std::vector<uint32_t> nonempty_mask_;
    uint64_t fingerprint_ = 0;
};

}  // namespace miniinfer::structured
