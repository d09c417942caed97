// The fa2 decode's plan, in two parts: the launch's shape from host-side bounds (plan_decode:
// the splits and whether they merge in a cluster), and how each block finds its keys from the
// step's own lengths (decode_chunk_keys). Plain arithmetic, unit-tested without a GPU.
//
// How the fa2 decode splits a step's keys, from the step's own lengths: one function that the
// host (tests) and the decode kernels (every block, from two integers the backend's plan() copies
// to the device) both run, so a captured decode graph splits each replay by that replay's
// lengths, not by the bounds it was captured at.
//
// The launch grid has max_splits blocks per (sequence, KV head) (from the host-side bounds,
// plan_decode below). Each sequence takes keys in chunks of chunk_keys: sequence i
// uses ceil(len_i / chunk_keys) of its blocks and the rest leave at once. The chunk is
//   - at least min_keys (a split's fixed cost: its Q, the first loads' latency, the merge);
//   - at least total_keys * blocks_per_key / slots: about one wave of equally long blocks, so a
//     batch that fills the GPU unsplit is not split at all (the 30B-A3B's decode256 ran 5.8%
//     faster with one split than with the three its bounds asked for; and with three equal
//     splits of its real lengths, which would fill its 2.6 waves of blocks better, 9,068 tok/s
//     against 9,407 unsplit on the H200);
//   - at least ceil(max_keys / max_splits), so the longest sequence fits the grid;
// rounded up to a multiple of granule keys (a block step of every decode kernel divides it).
// No dependencies; decode_chunk_keys compiles for the host and, under nvcc, the device.
#pragma once

#include <cmath>
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

// The host side of the plan: attention_decode.cu's launch_decode measures the kernel's
// occupancy, then asks plan_decode, which asks the three functions below.

// Splits of at least min_keys (>= 1) keys each that the longest sequence, of max_seq_len keys,
// allows.
inline int64_t decode_splits_the_keys_allow(int64_t max_seq_len, int64_t min_keys) {
    return (max_seq_len + min_keys - 1) / min_keys;
}

// The cluster form's splits: up to bound (the cluster size) of them, as many as the keys allow
// (keys_allow), when every one of the num_seqs x blocks_per_key clusters fits on the GPU at
// once (max_clusters: the clusters of the bound's size it holds). 0 (the plain form, with the
// workspace and the combine kernel) when they do not, when fewer than 2 splits result, or when
// bound < 2.
inline int decode_cluster_splits(int64_t bound, int64_t num_seqs, int64_t blocks_per_key,
                                 int64_t max_clusters, int64_t keys_allow) {
    if (bound < 2 || num_seqs * blocks_per_key > max_clusters) return 0;
    const int64_t splits = keys_allow < bound ? keys_allow : bound;
    return splits >= 2 ? int(splits) : 0;
}

// The plain form's splits, 1 to max_splits (>= 1; already bounded by the keys and the
// workspace): the blocks of a decode step take about equally long, so the GPU idles in a last
// wave that is only partly full. The fewest splits whose blocks_per_split x splits blocks fill
// whole waves of slots (the blocks the GPU holds at once) to within 10%, else the best-filled
// count.
inline int decode_plain_splits(int64_t max_splits, int64_t blocks_per_split, int64_t slots) {
    const double wave_blocks = double(slots > 1 ? slots : 1);
    int64_t best = 1;
    double best_fill = 0;
    for (int64_t splits = 1; splits <= max_splits; ++splits) {
        const double waves = double(blocks_per_split * splits) / wave_blocks;
        const double fill = waves / std::ceil(waves);
        if (fill >= 0.9) return int(splits);
        if (fill > best_fill) best = splits, best_fill = fill;
    }
    return int(best);
}

// What a decode kernel instance gets from the GPU (measured once per instance): the SMs, the
// blocks of it an SM holds, the clusters of max_cluster_splits blocks the GPU holds at once.
struct DecodeOccupancy {
    int64_t num_sms = 0, blocks_per_sm = 0, max_clusters = 0;
    int64_t slots() const { return num_sms * blocks_per_sm; }
};

// One decode launch's bounds: num_seqs sequences, the longest max_seq_len keys, blocks_per_key
// blocks reading a key range (KV heads x head chunks); min_keys (Tuning::decode_min_keys) keys
// a split at least; cluster_bound: the most splits a cluster merges (0: the plain form only);
// max_splits: the grid's and the workspace's bound on the plain form's splits (>= 1).
struct DecodeBounds {
    int64_t num_seqs = 0, max_seq_len = 0, blocks_per_key = 1;
    int64_t min_keys = 64, cluster_bound = 0, max_splits = 1;
};

// num_splits blocks per (sequence, KV-head block); cluster: they merge through distributed
// shared memory inside the launch, else (num_splits > 1) through the workspace and the combine
// kernel.
struct DecodePlan {
    int num_splits = 1;
    bool cluster = false;
};

// The cluster form when every (sequence, KV-head block) can have its splits as one cluster and
// all of them run at once; else the plain form's wave-filling split count.
inline DecodePlan plan_decode(const DecodeBounds& b, const DecodeOccupancy& gpu) {
    const int64_t keys_allow = decode_splits_the_keys_allow(b.max_seq_len, b.min_keys);
    const int cluster = decode_cluster_splits(b.cluster_bound, b.num_seqs, b.blocks_per_key,
                                              gpu.max_clusters, keys_allow);
    if (cluster > 1) return {cluster, true};
    const int64_t max_splits = keys_allow < b.max_splits ? keys_allow : b.max_splits;
    return {decode_plain_splits(max_splits > 1 ? max_splits : 1, b.num_seqs * b.blocks_per_key,
                                gpu.slots()),
            false};
}

}  // namespace miniinfer::cuda
