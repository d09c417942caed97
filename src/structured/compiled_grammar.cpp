#include "structured/compiled_grammar.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <unordered_map>

#include "core/check.h"
#include "structured/stack_arena.h"

namespace miniinfer::structured {

namespace {

// The compile budget in trie nodes visited (about 10 ns each): a grammar of a request must
// not occupy a core for minutes.
constexpr int64_t kMaxVisitedNodes = 300'000'000;

// For every rule, the bytes that may come right after it returns (FOLLOW, over bytes): a
// token's bytes after its stack returned into the unknown caller can only start with these.
std::vector<ByteSet> follow_sets(const Grammar& g) {
    using K = Grammar::ElemKind;
    const size_t num_rules = g.rule_alts.size();
    std::vector<char> nullable(num_rules, 0);
    std::vector<ByteSet> first(num_rules), follow(num_rules);
    // FIRST of the elements from q to the alternative's end; whether they may be empty.
    auto first_from = [&](int32_t q, ByteSet& out) {
        for (;; ++q) {
            const Grammar::Elem& e = g.elems[q];
            if (e.kind == K::kEnd) return true;
            if (e.kind == K::kRef) {
                out |= first[e.arg];
                if (!nullable[e.arg]) return false;
            } else {
                out |= g.classes[e.arg];
                if (e.kind == K::kBytes) return false;
            }
        }
    };
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < num_rules; ++r) {
            for (int32_t a : g.rule_alts[r]) {
                ByteSet f = first[r];
                const bool empty = first_from(a, f);
                if (f != first[r] || (empty && !nullable[r])) changed = true;
                first[r] = f;
                nullable[r] |= char(empty);
            }
        }
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t s = 0; s < num_rules; ++s) {
            for (int32_t a : g.rule_alts[s]) {
                for (int32_t q = a; g.elems[q].kind != K::kEnd; ++q) {
                    if (g.elems[q].kind != K::kRef) continue;
                    ByteSet f = follow[g.elems[q].arg];
                    if (first_from(q + 1, f)) f |= follow[s];
                    if (f != follow[g.elems[q].arg]) changed = true;
                    follow[g.elems[q].arg] = f;
                }
            }
        }
    }
    return follow;
}

// Parser states interned with their transitions: a walk over many tokens that stay in one
// state (a string's body) costs one table lookup per trie node.
class StateTable {
  public:
    StateTable(const Grammar& grammar, StackArena& arena) : grammar_(grammar), arena_(arena) {}

    int32_t intern(const StackState& s) {
        if (s.empty()) return -1;
        std::string key(reinterpret_cast<const char*>(s.tops.data()),
                        s.tops.size() * sizeof(int32_t));
        key += char(s.can_end) + 2 * char(s.base_done);
        auto [it, inserted] = ids_.try_emplace(std::move(key), int32_t(states_.size()));
        if (inserted) {
            states_.push_back(s);
            ByteSet allowed;
            for (int32_t t : s.tops) allowed |= grammar_.byte_class(arena_.pos(t));
            allowed_.push_back(allowed);
        }
        return it->second;
    }

    // The state after `byte`, or -1 when no stack takes it.
    int32_t next(int32_t state, uint8_t byte) {
        if (!allowed_[state][byte]) return -1;
        const uint64_t key = (uint64_t(state) << 8) | byte;
        if (auto it = transitions_.find(key); it != transitions_.end()) return it->second;
        arena_.advance(states_[state], byte, scratch_);
        const int32_t n = intern(scratch_);
        transitions_.emplace(key, n);
        return n;
    }

    const StackState& state(int32_t id) const { return states_[id]; }
    const ByteSet& allowed(int32_t id) const { return allowed_[id]; }

  private:
    const Grammar& grammar_;
    StackArena& arena_;
    std::unordered_map<std::string, int32_t> ids_;
    std::vector<StackState> states_;
    std::vector<ByteSet> allowed_;
    std::unordered_map<uint64_t, int32_t> transitions_;
    StackState scratch_;
};

// Walks the vocabulary trie from one terminal position with its parent unknown.
class PositionWalker {
  public:
    PositionWalker(const Vocabulary& vocab, StackArena& arena, StateTable& table)
        : vocab_(vocab), arena_(arena), table_(table) {}

    // follow: the bytes that may come after pos's rule returns.
    PositionMask run(int32_t pos, const ByteSet& follow) {
        follow_ = follow;
        accepted_.clear();
        result_ = PositionMask{};
        StackState start;
        start.tops.push_back(arena_.intern(pos, kBaseParent));
        walk(0, 0, table_.intern(start));
        finish();
        return std::move(result_);
    }

  private:
    void walk(int32_t node, size_t depth, int32_t state) {
        const auto& trie = vocab_.trie();
        const auto& tokens = vocab_.trie_tokens();
        const Vocabulary::TrieNode& n = trie[node];
        for (int32_t i = n.self_begin; i < n.self_end; ++i) accepted_.push_back(tokens[i]);
        if (++num_visited_ > kMaxVisitedNodes)
            fail(
                "grammar: too large to compile against this vocabulary (over {} trie steps; "
                "long bounded repetitions such as maxLength cost one vocabulary walk each)",
                kMaxVisitedNodes);
        const bool popped_here = table_.state(state).base_done;
        if (popped_here) pops_.push_back(depth);
        if (path_.size() <= depth) path_.resize(depth + 1);
        for (int32_t c = node + 1; c < n.end; c = trie[c].end) {
            path_[depth] = trie[c].byte;
            const int32_t next = table_.next(state, trie[c].byte);
            if (next >= 0) {
                walk(c, depth + 1, next);
                continue;
            }
            for (size_t p : pops_)
                if (follow_[path_[p]])
                    result_.uncertain.push_back({c, int32_t(p), int32_t(depth + 1)});
        }
        if (popped_here) pops_.pop_back();
    }

    // The first byte after the return, for the run-time buckets.
    uint8_t first_returned_byte(const UncertainSubtree& u) const {
        const int32_t token = vocab_.trie_tokens()[vocab_.trie()[u.node].self_begin];
        return uint8_t(vocab_.bytes(token)[u.return_depth]);
    }

    void finish() {
        if (!result_.uncertain.empty()) {
            auto& u = result_.uncertain;
            std::stable_sort(u.begin(), u.end(),
                             [this](const UncertainSubtree& a, const UncertainSubtree& b) {
                                 return first_returned_byte(a) < first_returned_byte(b);
                             });
            result_.bucket_begin.assign(257, 0);
            for (const UncertainSubtree& e : u) ++result_.bucket_begin[first_returned_byte(e) + 1];
            for (int b = 0; b < 256; ++b) result_.bucket_begin[b + 1] += result_.bucket_begin[b];
        }
        if (int32_t(accepted_.size()) <= vocab_.num_mask_words() / 4) {
            result_.ids = std::move(accepted_);
            return;
        }
        result_.bits.assign(vocab_.num_mask_words(), 0);
        for (int32_t id : accepted_) result_.bits[id / 32] |= 1u << (id % 32);
    }

    const Vocabulary& vocab_;
    StackArena& arena_;
    StateTable& table_;
    std::vector<size_t> pops_;   // depths at which a stack returned, on the current path
    std::vector<uint8_t> path_;  // the current path's bytes
    int64_t num_visited_ = 0;    // over all positions: the compile budget
    ByteSet follow_;             // depths at which a stack returned, on the current path
    std::vector<int32_t> accepted_;
    PositionMask result_;
};

}  // namespace

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const Vocabulary> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)) {
    const auto t0 = std::chrono::steady_clock::now();
    StackArena arena(grammar_);
    StateTable table(grammar_, arena);
    PositionWalker walker(*vocab_, arena, table);
    const std::vector<ByteSet> follow = follow_sets(grammar_);
    mask_index_.assign(grammar_.elems.size(), -1);
    for (size_t r = 0; r < grammar_.rule_alts.size(); ++r) {
        for (int32_t pos : grammar_.rule_alts[r]) {
            for (; grammar_.elems[pos].kind != Grammar::ElemKind::kEnd; ++pos) {
                if (!grammar_.is_terminal(pos)) continue;
                mask_index_[pos] = int32_t(masks_.size());
                masks_.push_back(walker.run(pos, follow[r]));
            }
        }
    }
    compile_ms_ =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace miniinfer::structured
