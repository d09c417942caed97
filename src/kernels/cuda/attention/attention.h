// Paged attention on the GPU, backend `fa2`: FlashAttention-2's algorithm over a paged KV cache.
//
// Semantics are cpu::paged_attention's (kernels/cpu/ops.h): a flattened varlen batch; the query
// rows of sequence s are the last q_len rows of its seq_lens[s]-token context; causal; grouped-
// query attention with any num_heads / num_kv_heads ratio. bf16 in and out, fp32 softmax.
//
//   prefill (attention_prefill.cu): any query length, cached prefix; tensor-core (mma.sync)
//     tiles of 64 query rows x 64 keys with online softmax. Used whenever a sequence has more
//     than one query row.
//   decode (attention_decode.cu): one query row per sequence; the KV length of each sequence is
//     split across thread blocks when the batch alone cannot fill the GPU ("flash decoding"),
//     each split writing (log-sum-exp, normalised partial output) to the workspace, then a
//     combine kernel merges them.
//
// No host synchronisation and no allocation inside paged_attention: grid sizes come from the
// host-side bounds only, so a decode step can be captured in a CUDA graph and replayed with other
// lengths (up to the same bounds). The first call of each kernel instance queries its occupancy
// and shared-memory limit (host-side, no stream work); warm up eagerly before capturing anyway.
// Lengths above max_seq_len at replay stay correct (the splits just get longer).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "config/tuning.h"
#include "core/tensor.h"

namespace miniinfer::cuda {

// The step between the QKV GEMM and attention (qk_norm_rope.h: q/k per-head RMSNorm, rotary,
// the K/V store), for an fa2 decode that does it itself (AttentionParams::qkv_step). Shapes as
// qk_norm_rope_store takes them; tensors on the device.
struct DecodeQkvStep {
    const Tensor* qkv;           // [num_tokens, (num_heads + 2 * num_kv_heads) * head_dim] bf16
    const Tensor* q_norm;        // [head_dim] bf16, or null with k_norm (Qwen2: no norm)
    const Tensor* k_norm;        // [head_dim] bf16, or null
    float eps;                   // the norms' epsilon
    const Tensor* positions;     // [num_tokens] i32
    const Tensor* inv_freq;      // [head_dim / 2] f32
    const Tensor* slot_mapping;  // [num_tokens] i32: where each token's K/V goes
    float rope_scale = 1.f;      // cos/sin multiplier (qk_norm_rope_store's rope_scale)
};

struct AttentionParams {
    const Tensor* q;        // [num_tokens, num_heads, head_dim] bf16
    const Tensor* k_cache;  // [num_pages, page_size, num_kv_heads, head_dim] bf16, or u8
    const Tensor* v_cache;  // same                                (FP8 e4m3, kv_fp8.cuh)
    // The step's sequences.
    const Tensor* query_start = nullptr;                       // [num_seqs + 1] i32 (device)
    const Tensor* seq_lens = nullptr;                          // [num_seqs] i32 (device)
    const Tensor* block_table = nullptr;                       // [num_seqs, max_pages] i32 (device)
    int64_t num_seqs = 0, max_query_len = 0, max_seq_len = 0;  // host-side bounds for the grid
    float scale;
    Tensor* out;  // [num_tokens, num_heads * head_dim] bf16
    // An FP8 cache's per-tensor scales: element value = e4m3 · scale (ignored for bf16).
    float k_scale = 1.f, v_scale = 1.f;
    // Optional, device [2]: the step's Σ seq_lens and its longest seq_len, as the device will
    // hold them when the launch runs (the fa2 backend's plan() copies them). The decode then
    // splits each sequence by these lengths (decode_plan.h), not by the host-side bounds:
    // what a captured graph needs to split each replay by its own lengths. nullptr: by the
    // bounds.
    const int32_t* decode_lengths = nullptr;
    // Optional, device [num_seqs]: the order in which the decode takes the sequences (a
    // permutation of 0 .. num_seqs - 1; the fa2 backend's plan() lists them longest first, so
    // the longest blocks start in the first wave and the short ones fill the last). Changes no
    // output bit. nullptr: in batch order.
    const int32_t* decode_order = nullptr;
    // Optional, decode steps only (max_query_len 1; paged_attention checks it): the decode does
    // qk_norm_rope_store's work itself instead of reading q and a cache that already holds the
    // step's K/V. Every block normalises and rotates its query heads from qkv; the block whose
    // split holds a sequence's last key computes that key's K and V, stores them in the cache
    // (the same bits qk_norm_rope_store writes) and adds the key to its softmax from shared
    // memory. p.q is then only a shape (not read). One kernel fewer a layer; summation order
    // differs from the separate step's, so outputs may differ in the last bits. Only for heads
    // that decode_supports_qkv_step accepts (checked).
    const DecodeQkvStep* qkv_step = nullptr;
    // The most KV splits of a decode that one thread-block cluster may merge itself, through
    // its blocks' shared memory, instead of the combine kernel (attention_decode.cu: the cluster
    // form, taken when the batch's clusters all fit on the GPU at once): Tuning's field of the
    // name. Changes which kernel merges the splits, and how many there are, not what they
    // compute.
    int decode_cluster_splits = Tuning{}.decode_cluster_splits;
    // A decode split takes at least this many keys (Tuning::decode_min_keys, >= 1).
    int decode_min_keys = Tuning{}.decode_min_keys;
};

// Whether the decode of num_heads query heads over num_kv_heads KV heads takes
// AttentionParams::qkv_step: the CUDA-core decode's GQA groups (1 to 3), not the tensor-core
// decode of groups 4 to 16, where it measured slower (bench/RESULTS.md#decode-qkv-step).
bool decode_supports_qkv_step(int64_t num_heads, int64_t num_kv_heads);

// The launchers' common validation of p (both backends): dtypes, ranks, contiguity, head_dim 64,
// 128 or 256, K/V shapes, GQA ratio, the lengths against num_seqs, out's shape and the host-side
// bounds. Aborts with a message (MI_LAUNCH_CHECK) on a violation: a caller's bug.
void check_attention_params(const AttentionParams& p);

// Workspace bytes the split-KV decode needs for up to max_tokens query rows (allocate once).
// A smaller workspace is allowed: the decode then uses fewer splits (none with 0 bytes).
size_t attention_workspace_bytes(int64_t max_tokens, int64_t num_heads, int64_t head_dim);

// Prefill (any query length, cached prefix, causal) and decode (query length 1, split-KV
// "flash decoding" with a combine step) in one call; picks the kernel per the batch shape:
// max_query_len == 1 takes the decode kernels where one is compiled for the shape
// (attention_decode_supported), anything else the prefill kernel.
// Writes p.out; reads everything else. head_dim 64, 128 or 256; any page size; a bf16 or FP8
// cache.
void paged_attention(const AttentionParams& p, void* workspace, size_t workspace_bytes,
                     cudaStream_t stream);

// The kernels behind paged_attention (the launchers trust the dispatcher's checks).
struct AttentionLaunch {
    const void* q;               // [num_tokens, num_heads, head_dim] bf16
    const void* k_cache;         // [num_pages, page_size, num_kv_heads, head_dim] bf16 or e4m3
    const void* v_cache;         // same
    const int32_t* query_start;  // [num_seqs + 1]
    const int32_t* seq_lens;     // [num_seqs]
    const int32_t* block_table;  // [num_seqs, max_pages]
    int64_t num_tokens, num_seqs, max_query_len, max_seq_len, max_pages;
    int64_t num_heads, num_kv_heads, head_dim, page_size;
    float scale;
    void* out;               // [num_tokens, num_heads * head_dim] bf16
    bool fp8_cache = false;  // k_cache, v_cache hold e4m3 bytes, value = e4m3 · k_scale / v_scale
    float k_scale = 1.f, v_scale = 1.f;
    const int32_t* decode_lengths = nullptr;         // AttentionParams::decode_lengths
    const int32_t* decode_order = nullptr;           // AttentionParams::decode_order
    int decode_cluster_splits = -1;                  // AttentionParams::decode_cluster_splits
    int decode_min_keys = Tuning{}.decode_min_keys;  // AttentionParams::decode_min_keys
    // AttentionParams::qkv_step as pointers (qkv null: none), the decode kernels' argument; the
    // inverse scales as qk_norm_rope_store computes them.
    struct QkvStep {
        const void* qkv = nullptr;  // bf16
        const void* q_norm = nullptr;
        const void* k_norm = nullptr;
        float eps = 0.f;
        const int32_t* positions = nullptr;
        const float* inv_freq = nullptr;
        const int32_t* slot_mapping = nullptr;
        float k_inv_scale = 1.f, v_inv_scale = 1.f;
        float rope_scale = 1.f;
    } qkv_step;
};
// The launch arguments of p (checked by check_attention_params first); both backends build them
// here.
AttentionLaunch make_attention_launch(const AttentionParams& p);
// Any batch with max_query_len > 1 (decode rows too): the wgmma kernel on an sm_90 device at
// head_dim 128 (attention_prefill_sm90.h), else mma.sync.
void launch_attention_prefill(const AttentionLaunch& a, cudaStream_t stream);
// Plans the KV splits from the host-side bounds and the workspace size (it may be 0: no
// splits) — each sequence's share of them from a.decode_lengths when given — then launches the
// decode and, with splits, the combine kernel.
void launch_attention_decode(const AttentionLaunch& a, void* workspace, size_t workspace_bytes,
                             cudaStream_t stream);
// Whether a decode kernel is compiled for the shape (head_dim 64 and 128: every group; 256: GQA
// groups of 4 to 8); the others decode in the prefill kernel.
bool attention_decode_supported(int64_t head_dim, bool fp8_cache, int64_t group);

}  // namespace miniinfer::cuda
