// DecodeGraphs: the CUDA runner's decode steps as CUDA graphs, one per batch size of a ladder
// (1, 2, 4, 8, 16, ... every 8 up to 64, then every 16, and max_num_seqs), replayed with
// padding up to the next captured size.
//
// A graph bakes in the addresses it was captured with, so every step writes its inputs to the
// same places: the runner's one i32 input buffer (pinned host staging, copied to the device),
// at the offsets of StepInputLayout. Padded rows decode one token of a one-token sequence in a
// reserved dummy KV page, so they touch no real request's K/V; the graphs read the block table
// at a fixed stride (max_pages_per_seq) in their own region of the buffer.
//
// The memory the graphs hold does not depend on the KV pool's size, so the runner captures the
// ladder once against a minimal pool, measures it (capture() returns the bytes), clear()s it
// (which says how much of it the device got back), sizes the KV cache with what the real
// capture will need, and captures again for real.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "layers/forward_batch.h"

namespace miniinfer {

// Offsets (in int32s) of the step inputs in the runner's input buffer; the token ids are at 0.
struct StepInputLayout {
    StepInputLayout() = default;
    // For steps of up to max_tokens tokens and max_seqs sequences of up to max_pages_per_seq
    // pages: [ids | positions | slots] x max_tokens, query_start (max_seqs + 1), seq_lens,
    // logits_indices, state_slots, snapshot_rows, snapshot_slots, then the two block tables.
    StepInputLayout(int64_t max_tokens, int64_t max_seqs, int64_t max_pages_per_seq)
        : positions(max_tokens),
          slots(2 * max_tokens),
          query_start(3 * max_tokens),
          seq_lens(query_start + max_seqs + 1),
          logits_indices(seq_lens + max_seqs),
          state_slots(logits_indices + max_seqs),
          snapshot_rows(state_slots + max_seqs),
          snapshot_slots(snapshot_rows + max_seqs),
          table(snapshot_slots + max_seqs),
          graph_table(table + max_seqs * max_pages_per_seq),
          max_pages_per_seq(max_pages_per_seq),
          total(graph_table + max_seqs * max_pages_per_seq) {}

    // Writes a batch's inputs to `host` at these offsets, its block table at its own stride at
    // `table` (a batch without snapshots gets snapshot_rows 0); returns how many ints from the
    // start the device copy needs.
    int64_t write(const ForwardBatch& b, int32_t* host) const;

    int64_t positions = 0, slots = 0, query_start = 0, seq_lens = 0, logits_indices = 0;
    int64_t state_slots = 0, snapshot_rows = 0, snapshot_slots = 0;
    int64_t table = 0;        // eager steps' block table, at the batch's own stride
    int64_t graph_table = 0;  // the graphs' block table: [max_num_seqs, max_pages_per_seq]
    int64_t max_pages_per_seq = 0;
    int64_t total = 0;  // ints in the buffer
};

// The device memory f() gives back (destroying graphs): the rise in cudaMemGetInfo's free
// memory, the device synchronised before and after; 0 if it fell. The driver may keep some.
size_t device_memory_freed_by(const std::function<void()>& f);
// The device memory f() takes (capturing and uploading graphs): the fall in free memory, measured
// the same way; 0 if it rose.
size_t device_memory_taken_by(const std::function<void()>& f);

class DecodeGraphs {
  public:
    // Nothing is captured yet. device_inputs: the runner's input buffer on the device, which it
    // keeps alive and which must be graph_table + max_num_seqs * max_pages_per_seq ints long
    // (as must the host stagings capture() and stage() write). dummy_state_slot: the hybrids'
    // state slot that padded rows use (one past the scheduler's), like the dummy KV page.
    DecodeGraphs(StepInputLayout layout, int64_t max_num_seqs, int64_t page_size,
                 int32_t* device_inputs, int32_t dummy_state_slot = 0);
    ~DecodeGraphs();
    DecodeGraphs(const DecodeGraphs&) = delete;
    DecodeGraphs& operator=(const DecodeGraphs&) = delete;

    const std::vector<int64_t>& batch_sizes() const { return sizes_; }
    // The hybrids' dummy state slot, when the runner sizes its pool after construction (before
    // the captures that bake it in).
    void set_dummy_state_slot(int32_t slot) { dummy_state_slot_ = slot; }
    // Kernels in the captured graph of batch size B (0 if none): one decode step's launches.
    int64_t num_kernels(int64_t batch_size) const;
    bool empty() const { return graphs_.empty(); }

    // Captures one graph per batch size, largest first. Every row's inputs become a one-token
    // sequence in dummy_page. For each size B: plan(B) does the host work the step needs
    // (outside the capture), step(B) launches the step's kernels on `stream` (captured; it must
    // not allocate or sync). With warm_up, every step first runs eagerly once (GEMM algorithms,
    // kernel attributes and lazily loaded modules are set up outside the measurement).
    // Returns the device memory the instantiated, uploaded graphs hold, in bytes
    // (cudaMemGetInfo before / after, synchronised). Replaces any earlier graphs.
    // `host`: pinned staging, free to write (nothing in flight reads it).
    size_t capture(int64_t dummy_page, bool warm_up, int32_t* host,
                   const std::function<void(int64_t)>& plan,
                   const std::function<void(int64_t)>& step, cudaStream_t stream);
    // Destroys every graph. Returns the device memory that came back (cudaMemGetInfo after /
    // before; the driver may keep some of it for the next graphs, which then reuse it).
    size_t clear();

    // For a decode-only batch that fits the ladder: writes its inputs, padded to the smallest
    // captured size B >= its size, to the pinned staging `host` and copies them to the device on
    // `stream`; returns B. Returns 0 (writing nothing) for any other batch.
    int64_t stage(const ForwardBatch& b, int64_t dummy_page, int32_t* host, cudaStream_t stream);
    // Replays the graph of size B (one stage() returned) on `stream`.
    void launch(int64_t batch_size, cudaStream_t stream) const;

  private:
    struct Graph {
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        int64_t kernels = 0;
    };
    void destroy();
    StepInputLayout layout_;
    int64_t max_num_seqs_, page_size_;
    int32_t dummy_state_slot_;
    int32_t* device_;
    std::vector<int64_t> sizes_;
    std::map<int64_t, Graph> graphs_;  // batch size -> graph
};

}  // namespace miniinfer
