#include "structured/compiled_grammar.h"

#include <chrono>
#include <map>

#include "structured/stack_arena.h"

namespace miniinfer::structured {

namespace {

// Walks the vocabulary trie from one terminal position with its parent unknown.
class PositionWalker {
  public:
    PositionWalker(const Grammar& grammar, const Vocabulary& vocab, StackArena& arena)
        : grammar_(grammar), vocab_(vocab), arena_(arena) {}

    PositionMask run(int32_t pos) {
        accepted_.clear();
        uncertain_.clear();
        suffix_index_.clear();
        result_ = PositionMask{};
        states_.resize(2);
        states_[0].clear();
        states_[0].tops.push_back(arena_.intern(pos, kBaseParent));
        walk(0, 0);
        finish();
        return std::move(result_);
    }

  private:
    void walk(int32_t node, size_t depth) {
        const auto& trie = vocab_.trie();
        const auto& tokens = vocab_.trie_tokens();
        const Vocabulary::TrieNode& n = trie[node];
        for (int32_t i = n.self_begin; i < n.self_end; ++i) accepted_.push_back(tokens[i]);
        if (states_.size() < depth + 2) states_.resize(depth + 2);
        const bool popped_here = states_[depth].base_done;
        if (popped_here) pops_.push_back(depth);
        ByteSet allowed;
        for (int32_t t : states_[depth].tops) allowed |= grammar_.byte_class(arena_.pos(t));
        for (int32_t c = node + 1; c < n.end; c = trie[c].end) {
            if (allowed[trie[c].byte]) {
                arena_.advance(states_[depth], trie[c].byte, states_[depth + 1]);
                if (!states_[depth + 1].empty()) {
                    walk(c, depth + 1);
                    continue;
                }
            }
            for (int32_t i = trie[c].self_begin; i < trie[c].tokens_end && !pops_.empty(); ++i) {
                for (size_t p : pops_) add_uncertain(tokens[i], p);
            }
        }
        if (popped_here) pops_.pop_back();
    }

    void add_uncertain(int32_t token, size_t offset) {
        std::string suffix(vocab_.bytes(token).substr(offset));
        auto [it, inserted] = suffix_index_.try_emplace(suffix, int32_t(result_.suffixes.size()));
        if (inserted) result_.suffixes.push_back(std::move(suffix));
        result_.uncertain.emplace_back(token, it->second);
    }

    void finish() {
        const int32_t num_valid = int32_t(vocab_.trie_tokens().size());
        if (int32_t(accepted_.size()) * 2 <= num_valid) {
            result_.ids = std::move(accepted_);
            return;
        }
        std::vector<char> is_accepted(vocab_.size(), 0);
        for (int32_t id : accepted_) is_accepted[id] = 1;
        result_.lists_rejected = true;
        for (int32_t id : vocab_.trie_tokens())
            if (!is_accepted[id]) result_.ids.push_back(id);
    }

    const Grammar& grammar_;
    const Vocabulary& vocab_;
    StackArena& arena_;
    std::vector<StackState> states_;  // by trie depth
    std::vector<size_t> pops_;        // depths at which a stack returned, on the current path
    std::vector<int32_t> accepted_;
    std::vector<int32_t> uncertain_;
    std::map<std::string, int32_t> suffix_index_;
    PositionMask result_;
};

}  // namespace

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const Vocabulary> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)) {
    const auto t0 = std::chrono::steady_clock::now();
    StackArena arena(grammar_);
    PositionWalker walker(grammar_, *vocab_, arena);
    mask_index_.assign(grammar_.elems.size(), -1);
    for (int32_t pos = 0; pos < int32_t(grammar_.elems.size()); ++pos) {
        if (!grammar_.is_terminal(pos)) continue;
        mask_index_[pos] = int32_t(masks_.size());
        masks_.push_back(walker.run(pos));
    }
    compile_ms_ =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace miniinfer::structured
