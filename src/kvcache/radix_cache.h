// RadixCache: reuse of KV pages across requests that share a token prefix (SGLang's design,
// at page granularity).
//
// A radix tree over token ids whose edges hold whole pages: an edge of k pages carries
// k * page_size tokens and the k KV pages that hold them. A request:
//   1. match_prefix(prompt)  -> the pages of its longest cached prefix, and a node;
//   2. lock(node)            -> those pages cannot be evicted while the request runs;
//   3. ... computes the rest of its prompt into pages of its own ...
//   4. insert(tokens, pages) -> when it finishes (or is preempted): its full pages join the
//      tree. insert returns how many leading tokens were already cached. Pages in that range
//      that the request computed itself (past its own match, because another request cached
//      the same tokens meanwhile) are duplicates the caller frees; pages it got from
//      match_prefix are the tree's. Pages past the returned length now belong to the tree;
//   5. unlock(node).
// evict(n) frees least-recently-used unlocked leaves back to the PageAllocator.
//
// Every page is exactly one of: free (in the allocator), owned by a request, or cached (in
// the tree). check_invariants verifies that and the lock counts; tests call it after each step.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "kvcache/page_allocator.h"

namespace miniinfer {

class RadixCache {
  public:
    struct Node;

    struct Match {
        std::vector<int32_t> pages;  // the cached pages of the prefix, in order
        int64_t num_tokens = 0;      // pages.size() * page_size
        Node* node = nullptr;        // the deepest matched node; pass to lock / unlock
    };

    RadixCache(int64_t page_size, PageAllocator& allocator);
    ~RadixCache();
    RadixCache(const RadixCache&) = delete;
    RadixCache& operator=(const RadixCache&) = delete;

    // Longest cached prefix of `tokens` made of whole pages. May split a node; refreshes the
    // LRU clock of the matched path. Never returns more than `max_tokens` (e.g. len - 1, so the
    // last prompt token is always computed and yields logits).
    Match match_prefix(std::span<const int32_t> tokens, int64_t max_tokens = INT64_MAX);

    // Lock / unlock the path from node to the root against eviction. Balanced calls only.
    void lock(Node* node);
    void unlock(Node* node);

    // Caches the whole pages of tokens (pages[i] holds tokens [i * page_size, (i+1) * page_size)).
    // Returns the number of leading tokens that were already cached (see step 4 above).
    int64_t insert(std::span<const int32_t> tokens, std::span<const int32_t> pages);

    // Frees at least num_pages pages if possible (LRU unlocked leaves first); returns how many.
    int64_t evict(int64_t num_pages);

    int64_t page_size() const { return page_size_; }
    int64_t num_cached_pages() const { return num_cached_pages_; }
    // Cached pages on no locked path (a counter kept by lock / unlock / insert / evict).
    int64_t num_evictable_pages() const { return num_evictable_pages_; }

    // MI_CHECKs: every page is free, in request_pages, or cached, and only one of them; lock
    // counts equal own locks + children's; the page counters equal a walk of the tree.
    // request_pages: all pages requests hold now.
    void check_invariants(std::span<const int32_t> request_pages) const;

  private:
    Node* split(Node* node, int64_t num_pages);  // node keeps the first num_pages; returns it
    void free_subtree(Node* node);

    int64_t page_size_;
    PageAllocator& allocator_;
    std::unique_ptr<Node> root_;
    int64_t num_cached_pages_ = 0;
    int64_t num_evictable_pages_ = 0;
    uint64_t clock_ = 0;
};

}  // namespace miniinfer
