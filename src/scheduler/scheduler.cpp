#include "scheduler/scheduler.h"

#include <algorithm>

#include "core/check.h"

namespace miniinfer {

Scheduler::Scheduler(const EngineConfig& config)
    : config_(config),
      allocator_(int32_t(config.num_pages)),
      state_slots_(int32_t(config.num_state_slots)) {
    MI_CHECK(config.page_size > 0 && config.num_pages > 0 && config.max_num_seqs > 0 &&
                 config.max_num_batched_tokens > 0 && config.max_model_len > 0,
             "bad scheduler config");
    if (config.enable_prefix_caching)
        cache_ = std::make_unique<RadixCache>(config.page_size, allocator_,
                                              uses_state() ? &state_slots_ : nullptr);
}

int64_t Scheduler::snapshot_interval() const {
    const int64_t page = config_.page_size;
    return (config_.state_snapshot_interval + page - 1) / page * page;
}

std::optional<int32_t> Scheduler::allocate_state_slot() {
    auto slot = state_slots_.allocate(1);
    if (!slot && cache_ && cache_->evict_snapshots(1) > 0) slot = state_slots_.allocate(1);
    if (!slot) return std::nullopt;
    return slot->front();
}

// A step keeps the state at the last snapshot boundary its tokens pass (one per sequence: the
// delta rule then ends a chunk there), when that is newer than the request's last snapshot.
// The slots they lack are taken from the cache's snapshots in one eviction pass.
void Scheduler::plan_snapshots(Batch& batch) {
    if (!cache_ || !uses_state()) return;
    const int64_t interval = snapshot_interval();
    std::vector<ScheduledSeq*> wanted;
    for (ScheduledSeq& s : batch.seqs) {
        s.snapshot_tokens = (s.start + s.num_tokens) / interval * interval;
        if (s.snapshot_tokens > s.start && s.snapshot_tokens > s.request->snapshot_tokens)
            wanted.push_back(&s);
    }
    const int64_t missing = int64_t(wanted.size()) - state_slots_.num_free();
    if (missing > 0) cache_->evict_snapshots(missing);
    for (ScheduledSeq* s : wanted) {
        const auto slot = state_slots_.allocate(1);
        if (!slot) break;
        s->snapshot_slot = slot->front();
    }
}

void Scheduler::validate_request(const Request& r) const {
    const int64_t prompt_len = int64_t(r.prompt_ids.size()), max_tokens = r.params.max_tokens;
    if (prompt_len == 0) fail("the prompt is empty");
    if (prompt_len + max_tokens > config_.max_model_len)
        fail(
            "this model's maximum context length is {} tokens, but {} were requested ({} in the "
            "prompt, "
            "{} max_tokens)",
            config_.max_model_len, prompt_len + max_tokens, prompt_len, max_tokens);
    const int64_t pages = (prompt_len + max_tokens + config_.page_size - 1) / config_.page_size;
    if (pages > config_.num_pages)
        fail("the request needs {} KV-cache pages ({} tokens) but the cache holds only {}", pages,
             prompt_len + max_tokens, config_.num_pages);
}

void Scheduler::add(Request* r) {
    r->state = RequestState::kWaiting;
    waiting_.push_back(r);
}

Batch Scheduler::schedule() {
    Batch batch;
    int64_t budget = config_.max_num_batched_tokens;
    // Running requests: decodes first, then prompt chunks; oldest first in each pass.
    for (bool decode_pass : {true, false}) {
        for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
            Request* r = running_[i];
            if (r->last_token_launched) continue;  // ends when that token comes back
            const int64_t remaining = r->num_tokens() - r->num_computed;
            if ((remaining == 1) != decode_pass) continue;
            const int64_t chunk = std::min(remaining, budget);
            bool ok = reserve_pages(r, r->num_computed + chunk);
            while (!ok && preempt_newest(r)) {
                // The victim may already be in this batch: take it out and refund its budget.
                auto it =
                    std::find_if(batch.seqs.begin(), batch.seqs.end(), [&](const ScheduledSeq& s) {
                        return s.request->state != RequestState::kRunning;
                    });
                if (it != batch.seqs.end()) {
                    budget += it->num_tokens;
                    batch.seqs.erase(it);
                }
                ok = reserve_pages(r, r->num_computed + chunk);
            }
            if (!ok) {  // r is the newest and still does not fit: it waits instead
                preempt_newest(nullptr);
                break;
            }
            batch.seqs.push_back(
                {r, r->num_computed, chunk, r->num_computed + chunk == r->num_tokens()});
            budget -= chunk;
        }
    }
    while (!waiting_.empty() && int64_t(running_.size()) < config_.max_num_seqs && budget > 0) {
        if (!admit(waiting_.front(), budget, batch)) break;
        running_.push_back(waiting_.front());
        waiting_.pop_front();
    }
    plan_snapshots(batch);
    build_batch(batch, config_.page_size);
    return batch;
}

bool Scheduler::admit(Request* r, int64_t& budget, Batch& batch) {
    if (uses_state()) {
        const auto slot = allocate_state_slot();
        if (!slot) return false;
        r->state_slot = *slot;
    }
    if (cache_) {
        RadixCache::Match m = cache_->match_prefix(r->all_tokens(), r->num_tokens() - 1);
        cache_->lock(m.node);
        r->cache_node = m.node;
        r->pages = m.pages;
        r->num_tree_pages = m.pages.size();
        r->num_computed = m.num_tokens;
        r->restore_from = m.snapshot;  // the node's: kept while the lock holds it
    }
    const int64_t chunk = std::min(r->num_tokens() - r->num_computed, budget);
    if (!reserve_pages(r, r->num_computed + chunk)) {
        release_pages(r);  // only the match: gives nothing back but the lock
        r->num_computed = 0;
        return false;
    }
    if (r->num_preemptions == 0) r->num_cached_tokens = r->num_computed;
    r->state = RequestState::kRunning;
    batch.seqs.push_back({r, r->num_computed, chunk, r->num_computed + chunk == r->num_tokens()});
    budget -= chunk;
    return true;
}

void Scheduler::update(const Batch& batch) {
    for (const auto& s : batch.seqs) {
        Request* r = s.request;
        r->num_computed += s.num_tokens;
        r->restore_from = -1;
        if (s.snapshot_slot < 0) continue;
        if (r->snapshot_slot >= 0) state_slots_.free(std::span(&r->snapshot_slot, 1));
        r->snapshot_slot = s.snapshot_slot;
        r->snapshot_tokens = s.snapshot_tokens;
    }
}

void Scheduler::finish(Request* r, FinishReason reason) {
    if (r->state == RequestState::kRunning)
        running_.erase(std::find(running_.begin(), running_.end(), r));
    if (r->state == RequestState::kWaiting) {
        auto it = std::find(waiting_.begin(), waiting_.end(), r);
        if (it != waiting_.end()) waiting_.erase(it);
    }
    release_pages(r);
    r->state = RequestState::kFinished;
    r->finish_reason = reason;
}

bool Scheduler::reserve_pages(Request* r, int64_t num_tokens) {
    const int64_t need =
        (num_tokens + config_.page_size - 1) / config_.page_size - int64_t(r->pages.size());
    return need <= 0 || try_allocate(r, need);
}

bool Scheduler::try_allocate(Request* r, int64_t num_pages) {
    if (allocator_.num_free() < num_pages && cache_)
        cache_->evict(num_pages - allocator_.num_free());
    auto pages = allocator_.allocate(int32_t(num_pages));
    if (!pages) return false;
    r->pages.insert(r->pages.end(), pages->begin(), pages->end());
    return true;
}

// Full pages with computed K/V go to the prefix cache (so a preempted request, or the next
// request with the same prefix, finds them); the rest go back to the allocator.
void Scheduler::release_pages(Request* r) {
    if (r->state_slot >= 0) {
        state_slots_.free(std::span(&r->state_slot, 1));
        r->state_slot = -1;
    }
    if (cache_ && r->cache_node) {
        const size_t full = size_t(r->num_computed / config_.page_size);
        const std::vector<int32_t> tokens = r->all_tokens();
        std::vector<RadixCache::Snapshot> snapshots;
        if (r->snapshot_slot >= 0) snapshots.push_back({r->snapshot_tokens, r->snapshot_slot});
        const int64_t cached_len =
            cache_->insert(std::span(tokens).first(full * size_t(config_.page_size)),
                           std::span(r->pages).first(full), snapshots);
        const size_t cached_pages = size_t(cached_len / config_.page_size);
        for (size_t i = r->num_tree_pages; i < r->pages.size(); ++i)
            if (i < cached_pages || i >= full) allocator_.free(std::span(&r->pages[i], 1));
        cache_->unlock(r->cache_node);
    } else {
        allocator_.free(r->pages);
    }
    r->pages.clear();
    r->num_tree_pages = 0;
    r->cache_node = nullptr;
    r->snapshot_slot = -1;
    r->snapshot_tokens = 0;
    r->restore_from = -1;
}

// The newest running request (other than `keep`) gives its pages back and waits again.
bool Scheduler::preempt_newest(const Request* keep) {
    if (running_.empty() || running_.back() == keep) return false;
    Request* victim = running_.back();
    running_.pop_back();
    release_pages(victim);
    victim->num_computed = 0;
    victim->state = RequestState::kWaiting;
    ++victim->num_preemptions;
    ++num_preemptions_;
    waiting_.push_front(victim);
    return true;
}

double Scheduler::kv_usage() const {
    const int64_t evictable = cache_ ? cache_->num_evictable_pages() : 0;
    return double(config_.num_pages - allocator_.num_free() - evictable) /
           double(config_.num_pages);
}

void Scheduler::check_invariants() const {
    std::vector<int32_t> owned;
    for (const Request* r : running_) {
        MI_CHECK(r->state == RequestState::kRunning,
                 "request {} in the running list is not running", r->id);
        MI_CHECK(int64_t(r->pages.size()) * config_.page_size >= r->num_computed,
                 "request {} lacks pages", r->id);
        owned.insert(owned.end(), r->pages.begin() + long(r->num_tree_pages), r->pages.end());
    }
    for (const Request* r : waiting_)
        MI_CHECK(r->pages.empty() && r->cache_node == nullptr && r->state_slot < 0 &&
                     r->state == RequestState::kWaiting,
                 "waiting request {} holds pages or a state slot", r->id);
    // Every state slot is free, held by exactly one running request (its state or its newest
    // snapshot) or a snapshot in the prefix cache.
    std::vector<int32_t> slots;
    for (const Request* r : running_) {
        MI_CHECK(uses_state() == (r->state_slot >= 0), "request {}: state slot {}", r->id,
                 r->state_slot);
        for (int32_t s : {r->state_slot, r->snapshot_slot})
            if (s >= 0) slots.push_back(s);
    }
    if (cache_) {
        cache_->check_invariants(owned, slots);
        return;
    }
    std::vector<int> holders(size_t(state_slots_.num_pages()), 0);
    for (int32_t s : slots) ++holders.at(size_t(s));
    for (int32_t s = 0; s < state_slots_.num_pages(); ++s)
        MI_CHECK(holders[size_t(s)] + (state_slots_.is_free(s) ? 1 : 0) == 1,
                 "state slot {} held {} times", s, holders[size_t(s)]);
    std::vector<int> count(size_t(allocator_.num_pages()), 0);
    for (int32_t p : owned) ++count[size_t(p)];
    for (int32_t p = 0; p < allocator_.num_pages(); ++p)
        MI_CHECK(count[size_t(p)] + (allocator_.is_free(p) ? 1 : 0) == 1, "page {} owned {} times",
                 p, count[size_t(p)]);
}

}  // namespace miniinfer
