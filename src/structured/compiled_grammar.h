// A Grammar joined to a Vocabulary: for every terminal position, which tokens it accepts,
// decided once (xgrammar's split of context-independent and context-dependent tokens).
//
// The precompute runs each position p from the stack (p, unknown parent) over the vocabulary
// trie. A token is accepted if some stack consumes all its bytes without returning into the
// unknown parent (or returns exactly at its last byte); rejected if every stack dies before
// any returns; uncertain if a stack returned with bytes left: those bytes (the suffix) depend
// on what called p's rule and are checked at run time from the real parent. Uncertain tokens
// are few (a JSON string's body ends in its own rule, so only tokens such as `",` are) and
// are kept as trie subtrees, walked at run time only below bytes the real caller accepts.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "structured/grammar.h"
#include "structured/vocabulary.h"

namespace miniinfer::structured {

// Tokens whose stack returned into p's caller with bytes left: every token below trie node
// `node` (at `depth`), whose bytes [return_depth, depth) come right after the return.
struct UncertainSubtree {
    int32_t node;
    int32_t return_depth;
    int32_t depth;
};

struct PositionMask {
    // The accepted tokens: as ids when few, else as a mask ([num_mask_words] uint32; an OR of
    // 4,748 words beats setting tens of thousands of bits one by one).
    std::vector<int32_t> ids;
    std::vector<uint32_t> bits;
    // Sorted by the first byte after the return; bucket_begin[b]..bucket_begin[b + 1] is the
    // run for byte b, so the run time looks only at bytes the caller can take next.
    std::vector<UncertainSubtree> uncertain;
    std::vector<int32_t> bucket_begin;  // [257] when uncertain is not empty
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
