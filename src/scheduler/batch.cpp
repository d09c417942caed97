#include "scheduler/batch.h"

#include <algorithm>

#include "core/check.h"

namespace miniinfer {

void build_batch(Batch& b, int64_t page_size) {
    b.max_pages = 0;
    for (const auto& s : b.seqs)
        b.max_pages = std::max<int64_t>(b.max_pages, int64_t(s.request->pages.size()));
    b.query_start = {0};
    for (const auto& s : b.seqs) {
        const Request& r = *s.request;
        MI_CHECK(int64_t(r.pages.size()) * page_size >= s.start + s.num_tokens,
                 "request {}: pages do not cover the step", r.id);
        for (int64_t t = s.start; t < s.start + s.num_tokens; ++t) {
            b.input_ids.push_back(r.token(t));
            b.positions.push_back(int32_t(t));
            b.slot_mapping.push_back(
                int32_t(r.pages[size_t(t / page_size)] * page_size + t % page_size));
        }
        b.query_start.push_back(int32_t(b.input_ids.size()));
        b.seq_lens.push_back(int32_t(s.start + s.num_tokens));
        b.state_slots.push_back(r.state_slot);
        if (r.restore_from >= 0) b.state_restores.push_back({r.restore_from, r.state_slot});
        b.block_table.insert(b.block_table.end(), r.pages.begin(), r.pages.end());
        b.block_table.resize(b.block_table.size() + size_t(b.max_pages) - r.pages.size(), 0);
        if (s.samples) {
            b.logits_indices.push_back(int32_t(b.input_ids.size()) - 1);
            b.sampling.push_back(s.request);
        }
    }
    if (std::any_of(b.seqs.begin(), b.seqs.end(),
                    [](const ScheduledSeq& s) { return s.snapshot_slot >= 0; }))
        for (const auto& s : b.seqs) {
            b.snapshot_rows.push_back(s.snapshot_slot >= 0 ? int32_t(s.snapshot_tokens - s.start)
                                                           : 0);
            b.snapshot_slots.push_back(s.snapshot_slot);
        }
}

}  // namespace miniinfer
