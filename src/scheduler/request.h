// Request: one generation request as the scheduler sees it.
//
//   kWaiting --schedule--> kRunning --finish/abort--> kFinished
//       ^                      |
//       +------ preempt -------+   (pages freed; recomputed from scratch when readmitted)
//
// Its tokens are prompt_ids followed by output_ids. With overlap scheduling the last output
// id may be a placeholder (negative, ModelRunner::placeholder) for a token a launched step is
// still sampling; the model runner resolves it, and the engine replaces it once known. The K/V of
// the first num_computed of them live in `pages` (pages[i] holds tokens [i * page_size, (i + 1) *
// page_size)); the first num_tree_pages of those belong to the RadixCache (matched at admission,
// locked via cache_node), the rest to the request.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/sampling_params.h"
#include "kvcache/radix_cache.h"

namespace miniinfer {

enum class RequestState { kWaiting, kRunning, kFinished };
enum class FinishReason { kNone, kStop, kLength, kAbort, kError };

const char* finish_reason_name(FinishReason reason);  // "stop", "length", "abort", "error", ""

struct Request {
    std::string id;
    std::vector<int32_t> prompt_ids;
    std::vector<int32_t> output_ids;
    SamplingParams params;
    uint64_t seed = 0;    // params.seed, or drawn at arrival: sampling is per request
    int64_t arrival = 0;  // order of arrival (preemption takes the newest)

    RequestState state = RequestState::kWaiting;
    FinishReason finish_reason = FinishReason::kNone;
    std::string error;

    std::vector<int32_t> pages;
    // Hybrid models: the slot of the state pool holding this request's recurrent state after
    // its num_computed tokens (-1: none; held while running, released with the pages).
    int32_t state_slot = -1;
    // Hybrids with prefix caching: the newest snapshot of this request's state that a launched
    // step takes (after its first snapshot_tokens tokens; goes to the prefix cache with its
    // pages), and the cached snapshot its next step starts from (-1: none).
    int32_t snapshot_slot = -1;
    int64_t snapshot_tokens = 0;
    int32_t restore_from = -1;
    int64_t num_computed = 0;   // tokens whose K/V are in pages
    size_t num_tree_pages = 0;  // leading pages owned by the RadixCache
    RadixCache::Node* cache_node = nullptr;
    int64_t num_cached_tokens = 0;  // prompt tokens served from the prefix cache (first admission)
    // Overlap scheduling: a launched step samples this request's last token (it ends by length
    // whatever the token is), so the scheduler gives it no further step.
    bool last_token_launched = false;
    int64_t num_preemptions = 0;

    int64_t num_tokens() const { return int64_t(prompt_ids.size() + output_ids.size()); }
    int32_t token(int64_t i) const {
        return i < int64_t(prompt_ids.size()) ? prompt_ids[size_t(i)]
                                              : output_ids[size_t(i) - prompt_ids.size()];
    }
    std::vector<int32_t> all_tokens() const;
    bool finished() const { return state == RequestState::kFinished; }
};

}  // namespace miniinfer
