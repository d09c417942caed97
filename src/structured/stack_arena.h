// The parser stacks of a Grammar, shared and never copied (a tree of stacks, as xgrammar's
// paper describes). A node is (pos, parent): pos is the element to match next, parent the node
// to continue with once pos's rule alternative ends. Nodes are interned, so equal stacks have
// equal ids, and immutable, so a state is a small set of node ids and rolling back a token is
// dropping a set. A rule reference in last position passes its own parent on (tail call), so
// loops written as right recursion run in constant stack depth.
#pragma once

#include <cstdint>
#include <deque>
#include <string_view>
#include <vector>

#include "structured/grammar.h"

namespace miniinfer::structured {

inline constexpr int32_t kRootParent = -1;  // below the root rule: returning here ends the text
inline constexpr int32_t kBaseParent = -2;  // an unknown context (the token-mask precompute)

// The stacks alive after some bytes.
struct StackState {
    std::vector<int32_t> tops;  // node ids at terminal positions, sorted and unique
    bool can_end = false;       // some stack returned into kRootParent: the text may end here
    bool base_done = false;     // some stack returned into kBaseParent
    bool empty() const { return tops.empty() && !can_end && !base_done; }
    void clear() {
        tops.clear();
        can_end = base_done = false;
    }
};

class StackArena {
  public:
    explicit StackArena(const Grammar& grammar);

    int32_t intern(int32_t pos, int32_t parent);
    int32_t pos(int32_t id) const { return nodes_[id].pos; }
    int32_t parent(int32_t id) const { return nodes_[id].parent; }
    size_t num_nodes() const { return nodes_.size(); }

    // Every terminal reachable from node id without consuming a byte (memoized; the reference
    // stays valid for the arena's life).
    const StackState& closure(int32_t id);
    // The state at the start of the grammar (the root rule's alternatives).
    void start_state(StackState& out);
    // The stacks of `in` that take `byte`, moved past it. `out` must not be `in`.
    void advance(const StackState& in, uint8_t byte, StackState& out);
    // Advances `state` (a copy) over bytes; true if any stack survives all of them.
    bool accepts(StackState state, std::string_view bytes);

  private:
    struct Node {
        int32_t pos;
        int32_t parent;
    };
    void collect(int32_t pos, int32_t parent, StackState& out);
    static void merge(const StackState& from, StackState& into);
    void grow_table();

    const Grammar& grammar_;
    std::vector<Node> nodes_;
    std::deque<StackState> closures_;  // by node id; a deque keeps references stable
    std::vector<char> closure_done_;
    std::vector<uint64_t> table_keys_;  // open addressing: (pos, parent) -> id
    std::vector<int32_t> table_ids_;
    StackState scratch_[2];
};

}  // namespace miniinfer::structured
