// What the GPU blocks read besides their input: one step's inputs on the device, and the
// model's tools (stream, GEMM, attention backend). Nothing here owns memory: the runner owns
// the staged step inputs, the model its GEMM, the runner the attention backend and KV pool.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace miniinfer::cuda {

class Gemm;
class AttentionBackend;

// One step's inputs: i32 views into the runner's device copy of the batch, and the host-side
// bounds the launch grids are sized with (for a captured graph, the bounds it was captured at).
struct StepInputs {
    int64_t num_tokens = 0, num_seqs = 0, num_logits = 0;
    int64_t max_query_len = 0, max_seq_len = 0;
    Tensor token_ids, positions, slots;  // [num_tokens]
    Tensor query_start, seq_lens;        // [num_seqs + 1], [num_seqs]
    Tensor block_table;                  // [num_seqs, pages per row]
    Tensor logits_indices;               // [num_logits]: the rows that are sampled
    // Hybrids: [num_seqs] each sequence's state slot, and the rows after which its state is
    // snapshot (0: none) into which slot (kernels/cuda/gdn/gated_delta_net.h).
    Tensor state_slots, snapshot_rows, snapshot_slots;
};

// One layer's KV pages: [num_pages, page_size, num_kv_heads, head_dim] bf16 each.
// One layer's paged K/V: bf16, or u8 for an FP8 cache (e4m3 · scale, kv_fp8.cuh).
struct KvLayer {
    Tensor k, v;
    float k_scale = 1.f, v_scale = 1.f;  // an FP8 cache's per-tensor scales
};

// One Gated DeltaNet layer's state pool (a hybrid's; kvcache/state_cache.h has the layout):
// conv [num_slots, kernel - 1, conv_dim] and recurrent [num_slots, value heads, head_k_dim,
// head_v_dim], both f32.
struct StateLayer {
    Tensor conv, recurrent;
};

struct Step {
    const StepInputs& in;
    cudaStream_t stream;
    Gemm& gemm;
    AttentionBackend& attention;
};

// Rows [0, n) of a worst-case activation buffer.
inline Tensor rows(const Tensor& t, int64_t n) {
    return t.slice_rows(0, n);
}

}  // namespace miniinfer::cuda
