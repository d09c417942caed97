// Batch: what the scheduler hands the model runner for one step (DESIGN.md, "Batch"). Prefill
// chunks and decodes mixed; seqs[s] contributes rows [query_start[s], query_start[s+1]).
#pragma once

#include <cstdint>
#include <vector>

#include "layers/forward_batch.h"
#include "scheduler/request.h"

namespace miniinfer {

struct ScheduledSeq {
    Request* request;
    int64_t start;       // first token computed this step (= request's num_computed)
    int64_t num_tokens;  // tokens computed this step
    bool samples;        // this chunk reaches the request's last token: sample the next one
    // Hybrids with prefix caching: the step also snapshots the state after the request's
    // first snapshot_tokens tokens into this state slot (-1: no snapshot).
    int32_t snapshot_slot = -1;
    int64_t snapshot_tokens = 0;
};

struct Batch {
    std::vector<ScheduledSeq> seqs;
    std::vector<int32_t> input_ids;    // [num_tokens]
    std::vector<int32_t> positions;    // [num_tokens]
    std::vector<int32_t> query_start;  // [num_seqs + 1]
    std::vector<int32_t> seq_lens;     // [num_seqs] context length after this step
    std::vector<int32_t> block_table;  // [num_seqs, max_pages]
    int64_t max_pages = 0;
    std::vector<int32_t> slot_mapping;  // [num_tokens]
    std::vector<int32_t> state_slots;   // [num_seqs] each request's state slot (-1: none)
    std::vector<StateRestore> state_restores;
    std::vector<int32_t> snapshot_rows, snapshot_slots;  // [num_seqs] with any snapshot, else empty
    std::vector<int32_t>
        logits_indices;              // [num_sampling_seqs] row of each sampling seq's last token
    std::vector<Request*> sampling;  // [num_sampling_seqs] the requests those rows belong to

    int64_t num_tokens() const { return int64_t(input_ids.size()); }
    bool empty() const { return seqs.empty(); }
};

// Fills the flat arrays from seqs (pages must already cover every scheduled token).
void build_batch(Batch& batch, int64_t page_size);

}  // namespace miniinfer
