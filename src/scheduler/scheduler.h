// Scheduler: continuous batching with chunked prefill (Sarathi-Serve's stall-free batches)
// and preemption by recompute.
//
// Each step has a token budget (max_num_batched_tokens) and a sequence limit (max_num_seqs):
//   1. running requests that decode (one token each) go first, oldest first;
//   2. running requests still in their prompt continue with a chunk of what budget is left;
//   3. waiting requests are admitted (oldest first): their longest cached prefix is reused,
//      and a chunk of the rest is scheduled.
// Pages come from the PageAllocator; when it runs dry, unreferenced cached pages are evicted,
// then the newest running request is preempted (its full pages go to the prefix cache, the
// rest are freed, it waits again at the head of the queue).
//
// Hybrid models (EngineConfig::num_state_slots > 0) also give each running request a state
// slot: admission waits for a free one, preemption and finish give it back. Their prefix cache
// needs the state at a cached prefix's end: a step snapshots a sequence's state at the last
// multiple of snapshot_interval() its tokens pass (into a free slot, or one an LRU snapshot of
// the cache gives back), the request keeps its newest snapshot and hands it to the cache with
// its pages; an admitted request resumes from the longest cached prefix that has one (its
// first step restores it). A cached prefix is thus at most one interval shorter than the
// whole pages a Qwen3 request would reuse.
//
// Requests are owned by the caller (the engine); the scheduler keeps pointers until they
// finish. It never sees a kernel or a layer: it hands out a Batch and gets tokens back.
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "config/engine_config.h"
#include "kvcache/page_allocator.h"
#include "kvcache/radix_cache.h"
#include "scheduler/batch.h"

namespace miniinfer {

class Scheduler {
  public:
    // Reads max_num_seqs, max_num_batched_tokens, max_model_len, page_size, num_pages and
    // enable_prefix_caching of a resolved config.
    explicit Scheduler(const EngineConfig& config);

    // Queues a validated request (see validate_request).
    void add(Request* request);
    // Error (naming the numbers) if the request can never run: empty prompt, longer than
    // max_model_len with its max_tokens, or more pages than the whole cache.
    void validate_request(const Request& request) const;

    // The next step's batch (empty when nothing can run). Mutates queues and page ownership.
    Batch schedule();
    // After the runner ran `batch`: the scheduled tokens now have K/V. The caller appends
    // sampled tokens to output_ids itself and calls finish() for requests that are done.
    void update(const Batch& batch);
    // Ends a request in any state, releasing its pages (full pages go to the prefix cache).
    void finish(Request* request, FinishReason reason);

    size_t num_waiting() const { return waiting_.size(); }
    size_t num_running() const { return running_.size(); }
    bool has_unfinished() const { return !waiting_.empty() || !running_.empty(); }
    int64_t num_preemptions() const { return num_preemptions_; }
    const PageAllocator& allocator() const { return allocator_; }
    const RadixCache* prefix_cache() const { return cache_.get(); }
    const EngineConfig& config() const { return config_; }
    // Tokens between state snapshots: EngineConfig::state_snapshot_interval in whole pages.
    int64_t snapshot_interval() const;
    // Free pages plus evictable cached pages, as a fraction of all pages in use (for metrics).
    double kv_usage() const;

    // MI_CHECKs the page-ownership and reference-count invariants (tests call it every step).
    void check_invariants() const;

  private:
    bool reserve_pages(Request* r, int64_t num_tokens);  // pages for tokens [0, num_tokens)
    bool uses_state() const { return state_slots_.num_pages() > 0; }
    bool try_allocate(Request* r, int64_t num_pages);
    void release_pages(Request* r);  // to the prefix cache or the allocator
    bool preempt_newest(const Request* keep);
    bool admit(Request* r, int64_t& budget, Batch& batch);
    // A free state slot, evicting the prefix cache's least recently used snapshot if needed.
    std::optional<int32_t> allocate_state_slot();
    void plan_snapshots(Batch& batch);

    EngineConfig config_;
    PageAllocator allocator_;
    PageAllocator state_slots_;          // EngineConfig::num_state_slots slots (hybrid models)
    std::unique_ptr<RadixCache> cache_;  // null when prefix caching is off
    std::deque<Request*> waiting_;
    std::vector<Request*> running_;  // in admission order
    int64_t num_preemptions_ = 0;
};

}  // namespace miniinfer
