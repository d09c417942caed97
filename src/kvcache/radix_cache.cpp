#include "kvcache/radix_cache.h"

#include <algorithm>
#include <queue>
#include <unordered_map>

#include "core/check.h"

namespace miniinfer {

struct RadixCache::Node {
    Node* parent = nullptr;
    std::vector<int32_t> tokens;  // this edge's tokens, a whole number of pages
    std::vector<int32_t> pages;   // tokens.size() / page_size pages
    std::map<std::vector<int32_t>, std::unique_ptr<Node>>
        children;            // key: child's first page of tokens
    int64_t lock_count = 0;  // locks on this node or below it
    int64_t own_locks = 0;   // locks taken on this very node
    uint64_t last_access = 0;
    int32_t snapshot = -1;  // the state after this node's last token (-1: none)
};

RadixCache::RadixCache(int64_t page_size, PageAllocator& allocator, PageAllocator* snapshot_slots)
    : page_size_(page_size),
      allocator_(allocator),
      snapshot_slots_(snapshot_slots),
      root_(std::make_unique<Node>()) {
    MI_CHECK(page_size > 0, "page size {}", page_size);
}

RadixCache::~RadixCache() = default;

RadixCache::Node* RadixCache::split(Node* node, int64_t num_pages) {
    const size_t num_tokens = size_t(num_pages * page_size_);
    auto upper = std::make_unique<Node>();
    upper->parent = node->parent;
    upper->tokens.assign(node->tokens.begin(), node->tokens.begin() + num_tokens);
    upper->pages.assign(node->pages.begin(), node->pages.begin() + num_pages);
    upper->lock_count = node->lock_count;  // every lock below passes through the upper part
    upper->last_access = node->last_access;
    node->tokens.erase(node->tokens.begin(), node->tokens.begin() + num_tokens);
    node->pages.erase(node->pages.begin(), node->pages.begin() + num_pages);

    auto& slot = node->parent->children.at(
        std::vector<int32_t>(upper->tokens.begin(), upper->tokens.begin() + page_size_));
    std::unique_ptr<Node> lower = std::move(slot);
    node->parent = upper.get();
    upper->children.emplace(
        std::vector<int32_t>(node->tokens.begin(), node->tokens.begin() + page_size_),
        std::move(lower));
    slot = std::move(upper);
    return slot.get();
}

RadixCache::Match RadixCache::match_prefix(std::span<const int32_t> tokens, int64_t max_tokens) {
    const size_t P = size_t(page_size_);
    const size_t limit =
        std::min<size_t>(tokens.size(), size_t(std::max<int64_t>(max_tokens, 0))) / P * P;
    Match match;
    Node* node = root_.get();
    size_t pos = 0;
    while (pos + P <= limit) {
        auto it = node->children.find(
            std::vector<int32_t>(tokens.begin() + pos, tokens.begin() + pos + P));
        if (it == node->children.end()) break;
        Node* child = it->second.get();
        size_t k = 1;  // the key matched the first page
        while (k < child->pages.size() && pos + (k + 1) * P <= limit &&
               std::equal(tokens.begin() + pos + k * P, tokens.begin() + pos + (k + 1) * P,
                          child->tokens.begin() + k * P))
            ++k;
        child->last_access = ++clock_;
        if (k < child->pages.size()) child = split(child, int64_t(k));
        match.pages.insert(match.pages.end(), child->pages.begin(), child->pages.end());
        pos += k * P;
        node = child;
    }
    if (snapshot_slots_) {  // back to the deepest node with the state after it
        for (; node != root_.get() && node->snapshot < 0; node = node->parent)
            pos -= node->tokens.size();
        match.pages.resize(pos / P);
        match.snapshot = node->snapshot;
    }
    match.num_tokens = int64_t(pos);
    match.node = node;
    return match;
}

RadixCache::Node* RadixCache::node_ending_at(std::span<const int32_t> tokens, int64_t num_tokens) {
    const size_t P = size_t(page_size_), end = size_t(num_tokens);
    Node* node = root_.get();
    for (size_t pos = 0; pos < end;) {
        Node* child = node->children
                          .at(std::vector<int32_t>(tokens.begin() + long(pos),
                                                   tokens.begin() + long(pos + P)))
                          .get();
        if (pos + child->tokens.size() > end) child = split(child, int64_t((end - pos) / P));
        pos += child->tokens.size();
        node = child;
    }
    return node;
}

void RadixCache::lock(Node* node) {
    MI_CHECK(node != nullptr, "lock(null)");
    ++node->own_locks;
    for (Node* n = node; n != nullptr; n = n->parent)
        if (n->lock_count++ == 0) num_evictable_pages_ -= int64_t(n->pages.size());
}

void RadixCache::unlock(Node* node) {
    MI_CHECK(node != nullptr && node->own_locks > 0, "unlock without lock");
    --node->own_locks;
    for (Node* n = node; n != nullptr; n = n->parent) {
        MI_CHECK(n->lock_count > 0, "lock count below zero");
        if (--n->lock_count == 0) num_evictable_pages_ += int64_t(n->pages.size());
    }
}

int64_t RadixCache::insert(std::span<const int32_t> tokens, std::span<const int32_t> pages,
                           std::span<const Snapshot> snapshots) {
    const size_t P = size_t(page_size_);
    const size_t num_pages = std::min(pages.size(), tokens.size() / P);
    Node* node = root_.get();
    size_t page = 0;
    while (page < num_pages) {
        const auto first = tokens.begin() + page * P;
        auto it = node->children.find(std::vector<int32_t>(first, first + P));
        if (it == node->children.end()) {
            auto leaf = std::make_unique<Node>();
            leaf->parent = node;
            leaf->tokens.assign(first, tokens.begin() + num_pages * P);
            leaf->pages.assign(pages.begin() + page, pages.begin() + num_pages);
            leaf->last_access = ++clock_;
            num_cached_pages_ += int64_t(leaf->pages.size());
            num_evictable_pages_ += int64_t(leaf->pages.size());  // a new leaf is unlocked
            node->children.emplace(std::vector<int32_t>(first, first + P), std::move(leaf));
            break;
        }
        Node* child = it->second.get();
        size_t k = 1;
        while (k < child->pages.size() && page + k < num_pages &&
               std::equal(first + k * P, first + (k + 1) * P, child->tokens.begin() + k * P))
            ++k;
        child->last_access = ++clock_;
        if (k < child->pages.size()) child = split(child, int64_t(k));
        page += k;
        node = child;
    }
    // Tokens already cached: everything walked before a new leaf (or all of it).
    int64_t cached = 0;
    for (Node* n = node; n != root_.get(); n = n->parent) cached += int64_t(n->tokens.size());
    for (const Snapshot& s : snapshots) {
        MI_CHECK(snapshot_slots_ && s.num_tokens > 0 && s.num_tokens % page_size_ == 0,
                 "snapshot after {} tokens", s.num_tokens);
        Node* at =
            s.num_tokens <= int64_t(num_pages * P) ? node_ending_at(tokens, s.num_tokens) : nullptr;
        if (at && at->snapshot < 0) {
            at->snapshot = s.slot;
            ++num_snapshots_;
        } else {
            snapshot_slots_->free(std::span(&s.slot, 1));
        }
    }
    return std::min<int64_t>(cached, int64_t(num_pages * P));
}

void RadixCache::free_snapshot(Node* node) {
    if (node->snapshot < 0) return;
    snapshot_slots_->free(std::span(&node->snapshot, 1));
    node->snapshot = -1;
    --num_snapshots_;
}

int64_t RadixCache::evict_snapshots(int64_t num_snapshots) {
    std::vector<Node*> held;
    std::vector<Node*> stack = {root_.get()};
    while (!stack.empty()) {
        Node* n = stack.back();
        stack.pop_back();
        for (auto& [_, child] : n->children) stack.push_back(child.get());
        if (n->snapshot >= 0 && n->lock_count == 0) held.push_back(n);
    }
    std::sort(held.begin(), held.end(),
              [](const Node* a, const Node* b) { return a->last_access < b->last_access; });
    const int64_t freed = std::min<int64_t>(num_snapshots, int64_t(held.size()));
    for (int64_t i = 0; i < freed; ++i) free_snapshot(held[size_t(i)]);
    return freed;
}

void RadixCache::free_subtree(Node* node) {
    free_snapshot(node);
    allocator_.free(node->pages);
    num_cached_pages_ -= int64_t(node->pages.size());
    if (node->lock_count == 0) num_evictable_pages_ -= int64_t(node->pages.size());
}

int64_t RadixCache::evict(int64_t num_pages) {
    auto older = [](Node* a, Node* b) { return a->last_access > b->last_access; };
    std::priority_queue<Node*, std::vector<Node*>, decltype(older)> leaves(older);
    std::vector<Node*> stack = {root_.get()};
    while (!stack.empty()) {
        Node* n = stack.back();
        stack.pop_back();
        for (auto& [_, child] : n->children) stack.push_back(child.get());
        if (n != root_.get() && n->children.empty() && n->lock_count == 0) leaves.push(n);
    }
    int64_t freed = 0;
    while (freed < num_pages && !leaves.empty()) {
        Node* leaf = leaves.top();
        leaves.pop();
        freed += int64_t(leaf->pages.size());
        free_subtree(leaf);
        Node* parent = leaf->parent;
        parent->children.erase(
            std::vector<int32_t>(leaf->tokens.begin(), leaf->tokens.begin() + page_size_));
        if (parent != root_.get() && parent->children.empty() && parent->lock_count == 0)
            leaves.push(parent);
    }
    return freed;
}

void RadixCache::check_invariants(std::span<const int32_t> request_pages,
                                  std::span<const int32_t> request_slots) const {
    std::vector<int> slot_owners(size_t(snapshot_slots_ ? snapshot_slots_->num_pages() : 0), 0);
    for (int32_t s = 0; s < int32_t(slot_owners.size()); ++s)
        slot_owners[size_t(s)] = (snapshot_slots_->is_free(s) ? 1 : 0);
    for (int32_t s : request_slots) ++slot_owners.at(size_t(s));
    int64_t snapshots = 0;
    std::vector<int> owners(size_t(allocator_.num_pages()), 0);
    for (int32_t p = 0; p < allocator_.num_pages(); ++p)
        owners[size_t(p)] += allocator_.is_free(p) ? 1 : 0;
    for (int32_t p : request_pages) {
        MI_CHECK(p >= 0 && p < allocator_.num_pages(), "request page {} out of range", p);
        ++owners[size_t(p)];
    }
    int64_t cached = 0, evictable = 0;
    std::vector<const Node*> stack = {root_.get()};
    while (!stack.empty()) {
        const Node* node = stack.back();
        stack.pop_back();
        MI_CHECK(node->tokens.size() == node->pages.size() * size_t(page_size_),
                 "edge of {} tokens, {} pages", node->tokens.size(), node->pages.size());
        MI_CHECK(node == root_.get() || !node->pages.empty(), "empty non-root node");
        int64_t child_locks = 0;
        for (const auto& [key, child] : node->children) {
            MI_CHECK(child->parent == node, "broken parent pointer");
            MI_CHECK(std::equal(key.begin(), key.end(), child->tokens.begin()),
                     "child key is not its first page");
            child_locks += child->lock_count;
            stack.push_back(child.get());
        }
        MI_CHECK(node->own_locks >= 0 && node->lock_count == node->own_locks + child_locks,
                 "lock count {} != own {} + children {}", node->lock_count, node->own_locks,
                 child_locks);
        for (int32_t p : node->pages) ++owners[size_t(p)];
        if (node->snapshot >= 0) {
            ++slot_owners.at(size_t(node->snapshot));
            ++snapshots;
        }
        cached += int64_t(node->pages.size());
        if (node->lock_count == 0) evictable += int64_t(node->pages.size());
    }
    MI_CHECK(cached == num_cached_pages_, "cached pages {} != counter {}", cached,
             num_cached_pages_);
    MI_CHECK(evictable == num_evictable_pages_, "evictable pages {} != counter {}", evictable,
             num_evictable_pages_);
    for (size_t p = 0; p < owners.size(); ++p)
        MI_CHECK(owners[p] == 1, "page {} has {} owners (free / request / cached)", p, owners[p]);
    MI_CHECK(snapshots == num_snapshots_, "snapshots {} != counter {}", snapshots, num_snapshots_);
    for (size_t s = 0; s < slot_owners.size(); ++s)
        MI_CHECK(slot_owners[s] == 1, "state slot {} has {} owners (free / request / snapshot)", s,
                 slot_owners[s]);
}

}  // namespace miniinfer
