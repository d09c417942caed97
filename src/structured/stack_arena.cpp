#include "structured/stack_arena.h"

#include <algorithm>

namespace miniinfer::structured {

namespace {

constexpr uint64_t kEmptyKey = ~uint64_t(0);

uint64_t node_key(int32_t pos, int32_t parent) {
    return (uint64_t(uint32_t(pos)) << 32) | uint32_t(parent);
}

size_t slot_of(uint64_t key, size_t mask) {
    return size_t((key * 0x9E3779B97F4A7C15ull) >> 20) & mask;
}

void sort_unique(std::vector<int32_t>& v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
}

}  // namespace

StackArena::StackArena(const Grammar& grammar) : grammar_(grammar) {
    table_keys_.assign(1024, kEmptyKey);
    table_ids_.assign(1024, -1);
}

void StackArena::grow_table() {
    std::vector<uint64_t> keys(table_keys_.size() * 2, kEmptyKey);
    std::vector<int32_t> ids(keys.size(), -1);
    const size_t mask = keys.size() - 1;
    for (size_t i = 0; i < table_keys_.size(); ++i) {
        if (table_keys_[i] == kEmptyKey) continue;
        size_t s = slot_of(table_keys_[i], mask);
        while (keys[s] != kEmptyKey) s = (s + 1) & mask;
        keys[s] = table_keys_[i];
        ids[s] = table_ids_[i];
    }
    table_keys_ = std::move(keys);
    table_ids_ = std::move(ids);
}

int32_t StackArena::intern(int32_t pos, int32_t parent) {
    const uint64_t key = node_key(pos, parent);
    size_t mask = table_keys_.size() - 1;
    for (size_t s = slot_of(key, mask);; s = (s + 1) & mask) {
        if (table_keys_[s] == key) return table_ids_[s];
        if (table_keys_[s] != kEmptyKey) continue;
        const auto id = int32_t(nodes_.size());
        nodes_.push_back({pos, parent});
        closures_.emplace_back();
        closure_done_.push_back(0);
        table_keys_[s] = key;
        table_ids_[s] = id;
        if (nodes_.size() * 2 > table_keys_.size()) grow_table();
        return id;
    }
}

void StackArena::merge(const StackState& from, StackState& into) {
    into.tops.insert(into.tops.end(), from.tops.begin(), from.tops.end());
    into.can_end |= from.can_end;
    into.base_done |= from.base_done;
}

void StackArena::collect(int32_t pos, int32_t parent, StackState& out) {
    using K = Grammar::ElemKind;
    const Grammar::Elem& e = grammar_.elems[pos];
    switch (e.kind) {
        case K::kBytes:
            out.tops.push_back(intern(pos, parent));
            return;
        case K::kBytesStar:
            out.tops.push_back(intern(pos, parent));
            collect(pos + 1, parent, out);
            return;
        case K::kEnd:
            if (parent == kRootParent) {
                out.can_end = true;
            } else if (parent == kBaseParent) {
                out.base_done = true;
            } else {
                merge(closure(parent), out);
            }
            return;
        case K::kRef: {
            const bool tail = grammar_.elems[pos + 1].kind == K::kEnd;
            const int32_t cont = tail ? parent : intern(pos + 1, parent);
            for (int32_t alt_pos : grammar_.rule_alts[e.arg]) collect(alt_pos, cont, out);
            return;
        }
    }
}

const StackState& StackArena::closure(int32_t id) {
    if (!closure_done_[id]) {
        StackState s;
        collect(nodes_[id].pos, nodes_[id].parent, s);
        sort_unique(s.tops);
        closures_[id] = std::move(s);
        closure_done_[id] = 1;
    }
    return closures_[id];
}

void StackArena::start_state(StackState& out) {
    out.clear();
    for (int32_t alt_pos : grammar_.rule_alts[grammar_.root]) collect(alt_pos, kRootParent, out);
    sort_unique(out.tops);
}

void StackArena::advance(const StackState& in, uint8_t byte, StackState& out) {
    out.clear();
    int num_sources = 0;
    for (int32_t t : in.tops) {
        const Node n = nodes_[t];
        if (!grammar_.byte_class(n.pos)[byte]) continue;
        const bool star = grammar_.elems[n.pos].kind == Grammar::ElemKind::kBytesStar;
        merge(closure(star ? t : intern(n.pos + 1, n.parent)), out);
        ++num_sources;
    }
    if (num_sources > 1) sort_unique(out.tops);
}

bool StackArena::accepts(StackState state, std::string_view bytes) {
    StackState* cur = &scratch_[0];
    StackState* next = &scratch_[1];
    *cur = std::move(state);
    for (char c : bytes) {
        advance(*cur, uint8_t(c), *next);
        if (next->empty()) return false;
        std::swap(cur, next);
    }
    return true;
}

}  // namespace miniinfer::structured
