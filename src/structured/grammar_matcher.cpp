#include "structured/grammar_matcher.h"

#include <algorithm>

#include "core/check.h"

namespace miniinfer::structured {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), arena_(grammar_->grammar()) {
    history_.emplace_back();
    arena_.start_state(history_.back().state);
}

bool GrammarMatcher::accept_token(int32_t id) {
    const Vocabulary& vocab = grammar_->vocab();
    if (id < 0 || id >= vocab.size() || terminated()) return false;
    const auto& stops = vocab.stop_ids();
    if (std::find(stops.begin(), stops.end(), id) != stops.end()) {
        if (!can_end()) return false;
        history_.push_back({StackState{}, true});
        return true;
    }
    return !vocab.bytes(id).empty() && accept_bytes(vocab.bytes(id));
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
    if (terminated()) return false;
    Entry next{current(), false};
    StackState tmp;
    for (char c : bytes) {
        arena_.advance(next.state, uint8_t(c), tmp);
        if (tmp.empty()) return false;
        std::swap(next.state, tmp);
    }
    history_.push_back(std::move(next));
    return true;
}

void GrammarMatcher::rollback(int num_tokens) {
    MI_CHECK(num_tokens >= 0 && num_tokens <= num_accepted(), "rollback of {} tokens, {} accepted",
             num_tokens, num_accepted());
    history_.resize(history_.size() - num_tokens);
}

bool GrammarMatcher::allows_bytes(std::string_view bytes) {
    return !terminated() && arena_.accepts(current(), bytes);
}

void GrammarMatcher::mark_subtree(int32_t node, size_t level, std::span<uint32_t> mask) {
    const Vocabulary& vocab = grammar_->vocab();
    const auto& trie = vocab.trie();
    const auto& tokens = vocab.trie_tokens();
    for (int32_t i = trie[node].self_begin; i < trie[node].self_end; ++i)
        mask[tokens[i] / 32] |= 1u << (tokens[i] % 32);
    if (walk_states_.size() < level + 2) walk_states_.resize(level + 2);
    for (int32_t c = node + 1; c < trie[node].end; c = trie[c].end) {
        arena_.advance(walk_states_[level], trie[c].byte, walk_states_[level + 1]);
        if (!walk_states_[level + 1].empty()) mark_subtree(c, level + 1, mask);
    }
}

void GrammarMatcher::mark_uncertain(const PositionMask& pm, int32_t parent,
                                    std::span<uint32_t> mask) {
    if (parent == kRootParent || pm.uncertain.empty()) return;  // the document ended, bytes left
    const Vocabulary& vocab = grammar_->vocab();
    const StackState cont = arena_.closure(parent);
    ByteSet first;
    for (int32_t t : cont.tops) first |= grammar_->grammar().byte_class(arena_.pos(t));
    if (walk_states_.size() < 2) walk_states_.resize(2);
    for (int b = 0; b < 256; ++b) {
        if (!first[b]) continue;
        for (int32_t i = pm.bucket_begin[b]; i < pm.bucket_begin[b + 1]; ++i) {
            const UncertainSubtree& u = pm.uncertain[i];
            const int32_t token = vocab.trie_tokens()[vocab.trie()[u.node].self_begin];
            const std::string_view path =
                vocab.bytes(token).substr(u.return_depth, u.depth - u.return_depth);
            walk_states_[0] = cont;
            bool alive = true;
            for (char c : path) {
                arena_.advance(walk_states_[0], uint8_t(c), walk_states_[1]);
                std::swap(walk_states_[0], walk_states_[1]);
                if (walk_states_[0].empty()) {
                    alive = false;
                    break;
                }
            }
            if (alive) mark_subtree(u.node, 0, mask);
        }
    }
}

void GrammarMatcher::fill_next_token_mask(std::span<uint32_t> mask) {
    const Vocabulary& vocab = grammar_->vocab();
    MI_CHECK(int32_t(mask.size()) == vocab.num_mask_words(),
             "mask of {} words, vocabulary needs {}", mask.size(), vocab.num_mask_words());
    std::fill(mask.begin(), mask.end(), 0u);
    if (terminated()) return;
    auto set = [&mask](int32_t id) { mask[id / 32] |= 1u << (id % 32); };
    const StackState state = current();  // a copy: the arena grows below
    for (int32_t top : state.tops) {
        const PositionMask& pm = grammar_->mask_at(arena_.pos(top));
        if (!pm.bits.empty()) {
            for (size_t w = 0; w < mask.size(); ++w) mask[w] |= pm.bits[w];
        } else {
            for (int32_t id : pm.ids) set(id);
        }
        mark_uncertain(pm, arena_.parent(top), mask);
    }
    if (state.can_end)
        for (int32_t id : vocab.stop_ids()) set(id);
}

}  // namespace miniinfer::structured
