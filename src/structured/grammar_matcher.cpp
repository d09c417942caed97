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

bool GrammarMatcher::suffix_allowed(int32_t parent, const std::string& suffix) {
    if (parent == kRootParent) return false;  // the document ended with bytes left
    return arena_.accepts(arena_.closure(parent), suffix);
}

void GrammarMatcher::fill_next_token_mask(std::span<uint32_t> mask) {
    const Vocabulary& vocab = grammar_->vocab();
    MI_CHECK(int32_t(mask.size()) == vocab.num_mask_words(),
             "mask of {} words, vocabulary needs {}", mask.size(), vocab.num_mask_words());
    std::fill(mask.begin(), mask.end(), 0u);
    if (terminated()) return;
    auto set = [&mask](int32_t id) { mask[id / 32] |= 1u << (id % 32); };
    auto is_set = [&mask](int32_t id) { return (mask[id / 32] >> (id % 32)) & 1u; };
    const StackState state = current();  // a copy: the arena grows below
    for (int32_t top : state.tops) {
        const PositionMask& pm = grammar_->mask_at(arena_.pos(top));
        if (pm.lists_rejected) {
            scratch_ = vocab.nonempty_mask();
            for (int32_t id : pm.ids) scratch_[id / 32] &= ~(1u << (id % 32));
            for (size_t w = 0; w < mask.size(); ++w) mask[w] |= scratch_[w];
        } else {
            for (int32_t id : pm.ids) set(id);
        }
        if (pm.uncertain.empty()) continue;
        const int32_t parent = arena_.parent(top);
        suffix_results_.assign(pm.suffixes.size(), -1);
        for (auto [id, suffix_idx] : pm.uncertain) {
            if (is_set(id)) continue;
            int8_t& r = suffix_results_[suffix_idx];
            if (r < 0) r = suffix_allowed(parent, pm.suffixes[suffix_idx]) ? 1 : 0;
            if (r) set(id);
        }
    }
    if (state.can_end)
        for (int32_t id : vocab.stop_ids()) set(id);
}

}  // namespace miniinfer::structured
