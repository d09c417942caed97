// One request's position in its grammar: accepts tokens, fills the next token's mask, rolls
// back. Not thread-safe (one matcher per request; the CompiledGrammar it holds is shared).
//
// A mask is [vocab.num_mask_words()] uint32: bit (id % 32) of word (id / 32) set when token id
// may come next. Stop ids are allowed exactly when the text may end; after a stop token is
// accepted the matcher is terminated and allows nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "structured/compiled_grammar.h"
#include "structured/stack_arena.h"

namespace miniinfer::structured {

class GrammarMatcher {
  public:
    explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

    // Advances over token id if allowed and returns true; otherwise false, state unchanged.
    bool accept_token(int32_t id);
    // Advances over raw bytes (counts as one token for rollback); false and unchanged if the
    // grammar does not allow them.
    bool accept_bytes(std::string_view bytes);
    // Undoes the last num_tokens accepted tokens (speculative tokens that were rejected).
    void rollback(int num_tokens);
    int num_accepted() const { return int(history_.size()) - 1; }

    // The text so far is a complete document.
    bool can_end() const { return !terminated() && current().can_end; }
    // Nothing but the end may follow (a stop token is the only choice).
    bool must_end() const { return can_end() && current().tops.empty(); }
    bool terminated() const { return history_.back().terminated; }

    // Writes the mask of tokens allowed next. mask.size() == vocab().num_mask_words().
    void fill_next_token_mask(std::span<uint32_t> mask);
    // Whether `bytes` could come next (the reference the masks are tested against).
    bool allows_bytes(std::string_view bytes);

    const CompiledGrammar& compiled() const { return *grammar_; }

  private:
    struct Entry {
        StackState state;
        bool terminated = false;
    };
    const StackState& current() const { return history_.back().state; }
    // Adds the context-dependent tokens of a top whose real caller is `parent`.
    void mark_uncertain(const PositionMask& pm, int32_t parent, std::span<uint32_t> mask);
    // Sets every token below trie node whose bytes the stacks in walk_states_[level] take.
    void mark_subtree(int32_t node, size_t level, std::span<uint32_t> mask);

    std::shared_ptr<const CompiledGrammar> grammar_;
    StackArena arena_;
    std::vector<Entry> history_;           // history_[0]: the start; one entry per accepted token
    std::vector<StackState> walk_states_;  // by depth below an uncertain subtree
};

}  // namespace miniinfer::structured
