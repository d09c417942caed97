// Paged attention on the GPU, backend `flashinfer`: FlashInfer's plan/run design, our own code.
//
// Semantics are cpu::paged_attention's and the fa2 backend's (kernels/cuda/attention/attention.h):
// a flattened varlen batch, causal, GQA with any num_heads / num_kv_heads ratio, bf16 in and out,
// fp32 softmax, head_dim 64 or 128, any page size.
//
// plan() (host, once per step): every (sequence, KV head, tile of 64 packed query rows) is a
// unit of work over the keys it needs (causal: up to its last row's limit). When those units
// are fewer than the thread blocks the GPU holds at once, their key ranges are cut into equal
// chunks (a multiple of 64 keys, at least 128) so that there are about as many work items as
// blocks; the items are then spread over the fixed grid by longest-processing-time-first
// (each goes to the least loaded block), and the plan (per-block item lists, item
// descriptors, merge list) is copied to the device in one asynchronous pinned copy.
//
// run() (device): a persistent kernel, one block per resident slot, walks its item list with
// the fa2 prefill tile loop (tensor-core mma, online softmax, cp.async paged gathers); an item
// of at most 16 packed rows (decode) instead has its 4 warps split the keys, each with its own
// double-buffered 16-key slices, merging their softmax states at the end. An item
// covering a whole row tile writes the output; a chunk writes (normalised partial output,
// log-sum-exp) to the workspace and a merge kernel combines the chunks of each row tile.
// Both grids are fixed at construction, so run() can be captured in a CUDA graph and replayed
// after later plan() calls.
// On an sm_90 device (H100 / H200) at head_dim 128, a batch in which some sequence prefills
// (more than one query row) and whose row tiles fill the grid without splitting goes to the fa2
// backend's wgmma prefill kernel instead (attention_prefill_sm90.h, about twice the work
// kernel's mma.sync rate; its grid runs a mixed step's decode rows beside the prompts), as
// FlashInfer dispatches prefill to FlashAttention-3 on Hopper; decode-only batches and batches
// of few row tiles keep the planned items. (Mixed steps on the planned items took about three
// times the wgmma kernel's time for their decode rows: bench/RESULTS.md#flashinfer-mixed-hopper.)
// Such batches are never
// captured (graphs hold decode steps), so a replay never meets a plan of the other kind. The
// AttentionParams bounds (num_seqs, max_*_len) are not used by run(), whose plan carries the
// shapes, except for such a batch: the wgmma kernel's grid comes from them, as with fa2.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "core/cuda/device_buffer.h"
#include "core/cuda/pinned_upload.h"
#include "kernels/cuda/attention/attention.h"

namespace miniinfer::cuda {

class FlashInferAttention {
  public:
    FlashInferAttention(int64_t max_tokens, int64_t max_seqs, int64_t num_heads,
                        int64_t num_kv_heads, int64_t head_dim, int64_t page_size);
    ~FlashInferAttention();
    FlashInferAttention(const FlashInferAttention&) = delete;
    FlashInferAttention& operator=(const FlashInferAttention&) = delete;

    // Host side, before run(): plans from the batch's host arrays (query_start [num_seqs+1],
    // seq_lens [num_seqs]) and copies the plan to the device on `stream` (async, pinned).
    // Waits (host) only for the previous plan's copy to have left the pinned buffer.
    void plan(std::span<const int32_t> query_start, std::span<const int32_t> seq_lens,
              cudaStream_t stream);
    // Device side: the planned work, then the merge of split partial results. Reads p.q, the
    // caches, p.block_table, p.query_start, p.seq_lens; writes p.out. No host sync, no
    // allocation. The device arrays must hold the values plan() saw.
    void run(const AttentionParams& p, cudaStream_t stream);

    // What the last plan() decided (for tests and benchmarks).
    int64_t num_ctas() const { return num_ctas_; }
    int64_t planned_items() const { return planned_items_; }
    int64_t planned_merges() const { return planned_merges_; }
    int64_t planned_chunk() const { return planned_chunk_; }  // keys per chunk; 0: no split
    // Whether run() hands this batch to the Hopper prefill kernel instead (see the top).
    bool planned_hopper_prefill() const { return hopper_prefill_; }

  private:
    int64_t max_tokens_, max_seqs_, num_heads_, num_kv_heads_, head_dim_, page_size_;
    int64_t num_ctas_ = 0;                // fixed grid of the work kernel (and the merge kernel)
    int64_t max_items_ = 0;               // capacity of the plan's item list
    int64_t max_partial_rows_ = 0;        // capacity of the workspace, in (packed row) slots
    size_t plan_ints_ = 0;                // capacity of the plan buffer, in int32
    std::unique_ptr<PinnedUpload> plan_;  // int32 [plan_ints_]
    DeviceBuffer partial_o_;              // f32 [max_partial_rows_, head_dim]
    DeviceBuffer partial_lse_;            // f32 [max_partial_rows_]
    int64_t planned_items_ = 0, planned_merges_ = 0, planned_chunk_ = 0;
    bool hopper_prefill_supported_ = false, hopper_prefill_ = false;
};

}  // namespace miniinfer::cuda
