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
//
// The hybrid models (a snapshot allocator given): a cached prefix is of use only with the
// recurrent state after its last token, so nodes may also hold a state snapshot (a slot of the
// state pool) of the prefix that ends with them. match_prefix then returns the longest cached
// prefix that ends at a snapshot; insert takes the request's snapshots with its pages; evict
// frees a leaf's snapshot with its pages, and evict_snapshots frees snapshots alone (LRU,
// unlocked nodes: a locked node's snapshot may still be restored by the request that matched
// it). Each slot is free, a request's, or one node's.
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
        int32_t snapshot = -1;       // with snapshots: the state after the prefix (-1: none)
    };
    // A state snapshot after a prefix's first num_tokens tokens (a multiple of page_size).
    struct Snapshot {
        int64_t num_tokens = 0;
        int32_t slot = -1;
    };

    // snapshot_slots: the state pool's slots, for the hybrids (null: no snapshots).
    RadixCache(int64_t page_size, PageAllocator& allocator,
               PageAllocator* snapshot_slots = nullptr);
    ~RadixCache();
    RadixCache(const RadixCache&) = delete;
    RadixCache& operator=(const RadixCache&) = delete;

    // Longest cached prefix of `tokens` made of whole pages (with snapshots: that ends at one).
    // May split a node; refreshes the LRU clock of the matched path. Never returns more than
    // `max_tokens` (e.g. len - 1, so the last prompt token is always computed and yields
    // logits).
    Match match_prefix(std::span<const int32_t> tokens, int64_t max_tokens = INT64_MAX);

    // Lock / unlock the path from node to the root against eviction. Balanced calls only.
    void lock(Node* node);
    void unlock(Node* node);

    // Caches the whole pages of tokens (pages[i] holds tokens [i * page_size, (i+1) * page_size)).
    // Returns the number of leading tokens that were already cached (see step 4 above).
    // Each snapshot goes to the node that ends where it does, or back to the pool (a node there
    // has one, or it lies past the whole pages).
    int64_t insert(std::span<const int32_t> tokens, std::span<const int32_t> pages,
                   std::span<const Snapshot> snapshots = {});

    // Frees at least num_pages pages if possible (LRU unlocked leaves first); returns how many.
    int64_t evict(int64_t num_pages);
    // Frees up to num_snapshots snapshots of unlocked nodes, least recently used first.
    int64_t evict_snapshots(int64_t num_snapshots);

    int64_t page_size() const { return page_size_; }
    int64_t num_cached_pages() const { return num_cached_pages_; }
    // Cached pages on no locked path (a counter kept by lock / unlock / insert / evict).
    int64_t num_evictable_pages() const { return num_evictable_pages_; }
    int64_t num_snapshots() const { return num_snapshots_; }

    // MI_CHECKs: every page is free, in request_pages, or cached, and only one of them; lock
    // counts equal own locks + children's; the page counters equal a walk of the tree; the same
    // for snapshot slots (request_slots: the state slots requests hold).
    void check_invariants(std::span<const int32_t> request_pages,
                          std::span<const int32_t> request_slots = {}) const;

  private:
    Node* split(Node* node, int64_t num_pages);  // node keeps the first num_pages; returns it
    void free_subtree(Node* node);
    void free_snapshot(Node* node);
    // The node whose path ends after tokens' first num_tokens tokens (cached), splitting one.
    Node* node_ending_at(std::span<const int32_t> tokens, int64_t num_tokens);

    int64_t page_size_;
    PageAllocator& allocator_;
    PageAllocator* snapshot_slots_;
    std::unique_ptr<Node> root_;
    int64_t num_snapshots_ = 0;
    int64_t num_cached_pages_ = 0;
    int64_t num_evictable_pages_ = 0;
    uint64_t clock_ = 0;
};

}  // namespace miniinfer
