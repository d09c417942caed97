// How the fa2 decode splits a step's keys, from the step's own lengths: one function that the
// host (tests) and the decode kernels (every block, from two integers the backend's plan() copies
// to the device) both run, so a captured decode graph splits each replay by that replay's
// lengths, not by the bounds it was captured at.
//
// The launch grid has max_splits blocks per (sequence, KV head) (from the host-side bounds,
// attention_decode.cu: plan_splits). Each sequence takes keys in chunks of chunk_keys: sequence i
// uses ceil(len_i / chunk_keys) of its blocks and the rest leave at once. The chunk is
//   - at least min_keys (a split's fixed cost: its Q, the first loads' latency, the merge);
//   - at least total_keys * blocks_per_key / slots: about one wave of equally long blocks, so a
//     batch that fills the GPU unsplit is not split at all (the 30B-A3B's decode256 ran 5.8%
//     faster with one split than with the three its bounds asked for; and with three equal
//     splits of its real lengths, which would fill its 2.6 waves of blocks better, 9,068 tok/s
//     against 9,407 unsplit on the H200);
//   - at least ceil(max_keys / max_splits), so the longest sequence fits the grid;
// rounded up to a multiple of granule keys (a block step of every decode kernel divides it).
// No dependencies; compiles for the host and, under nvcc, the device.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define MI_DECODE_SPLIT_FN __host__ __device__ inline
#else
#define MI_DECODE_SPLIT_FN inline
#endif

namespace miniinfer::cuda {

inline constexpr int kDecodeChunkGranule = 64;

// total_keys: Σ of the step's sequence lengths; max_keys: the longest; blocks_per_key: blocks a
// key range is read by (KV heads x head chunks); slots: blocks the GPU holds at once;
// max_splits >= 1: the grid's splits per sequence; min_keys >= 1.
MI_DECODE_SPLIT_FN int64_t decode_chunk_keys(int64_t total_keys, int64_t max_keys,
                                             int64_t blocks_per_key, int64_t slots,
                                             int64_t max_splits, int64_t min_keys) {
    int64_t chunk = min_keys;
    const int64_t wave = (total_keys * blocks_per_key + slots - 1) / (slots > 0 ? slots : 1);
    if (wave > chunk) chunk = wave;
    const int64_t fit = (max_keys + max_splits - 1) / (max_splits > 0 ? max_splits : 1);
    if (fit > chunk) chunk = fit;
    return (chunk + kDecodeChunkGranule - 1) / kDecodeChunkGranule * kDecodeChunkGranule;
}

}  // namespace miniinfer::cuda
