// ForwardBatch: one model step's input, as DESIGN.md's Batch describes it. Prefill chunks and
// decodes are mixed: each sequence contributes the rows [query_start[s], query_start[s+1]).
// Views of host memory owned by the caller (the scheduler's Batch, or a test).
#pragma once

#include <cstdint>
#include <span>

namespace miniinfer {

// The hybrids' prefix cache: a sequence resuming a cached prefix starts from a copy of the
// prefix's state snapshot.
struct StateRestore {
    int32_t from, to;  // state slots: the cached snapshot, the sequence's own slot
};

struct ForwardBatch {
    std::span<const int32_t> input_ids;       // [num_tokens]
    std::span<const int32_t> positions;       // [num_tokens]
    std::span<const int32_t> query_start;     // [num_seqs + 1]
    std::span<const int32_t> seq_lens;        // [num_seqs] context length after this step
    std::span<const int32_t> block_table;     // [num_seqs, max_pages] page ids
    int64_t max_pages = 0;                    // row stride of block_table
    std::span<const int32_t> slot_mapping;    // [num_tokens] where each token's K/V goes
    std::span<const int32_t> logits_indices;  // [num_logits] rows whose logits are wanted
    // Hybrid models: [num_seqs] each sequence's slot in the state pool; a sequence whose first
    // row is position 0 starts from a zero state, the others continue the slot's.
    std::span<const int32_t> state_slots = {};
    std::span<const StateRestore> state_restores = {};  // done before the step, in order
    // Hybrids with prefix caching, [num_seqs] or empty: sequence s also copies its state after its
    // first snapshot_rows[s] rows of this step (0: none) into slot snapshot_slots[s], for later
    // requests (kernels/cpu/gated_delta_net.h takes them as they are).
    std::span<const int32_t> snapshot_rows = {};
    std::span<const int32_t> snapshot_slots = {};

    int64_t num_tokens() const { return int64_t(input_ids.size()); }
    int64_t num_seqs() const { return int64_t(seq_lens.size()); }
};

}  // namespace miniinfer
