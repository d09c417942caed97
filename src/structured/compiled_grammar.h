// A Grammar joined to a Vocabulary: for every terminal position, which tokens it accepts,
// decided once (xgrammar's split of context-independent and context-dependent tokens).
//
// The precompute runs each position p from the stack (p, unknown parent) over the vocabulary
// trie. A token is accepted if some stack consumes all its bytes without returning into the
// unknown parent (or returns exactly at its last byte); rejected if every stack dies before
// any returns; uncertain if a stack returned with bytes left: those bytes (the suffix) depend
// on what called p's rule and are checked at run time from the real parent. Uncertain tokens
// are few (a JSON string's body ends in its own rule, so only tokens such as `",` are).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "structured/grammar.h"
#include "structured/vocabulary.h"

namespace miniinfer::structured {

struct PositionMask {
    bool lists_rejected =
        false;  // ids are the rejected tokens (the rest accepted), else the accepted
    std::vector<int32_t> ids;
    // Context-dependent tokens: (token id, index into suffixes) pairs; a token may appear
    // once per byte offset at which its stack returned.
    std::vector<std::pair<int32_t, int32_t>> uncertain;
    std::vector<std::string> suffixes;
};

class CompiledGrammar {
  public:
    // Precomputes every terminal position. Takes about a trie walk per broad position.
    CompiledGrammar(Grammar grammar, std::shared_ptr<const Vocabulary> vocab);

    const Grammar& grammar() const { return grammar_; }
    const Vocabulary& vocab() const { return *vocab_; }
    // The precompute of terminal position pos.
    const PositionMask& mask_at(int32_t pos) const { return masks_[mask_index_[pos]]; }
    double compile_ms() const { return compile_ms_; }

  private:
    Grammar grammar_;
    std::shared_ptr<const Vocabulary> vocab_;
    std::vector<int32_t> mask_index_;  // by position; -1 for non-terminals
    std::vector<PositionMask> masks_;
    double compile_ms_ = 0;
};

}  // namespace miniinfer::structured
