// Paged attention, decode: one query row per sequence, split-KV ("flash decoding").
//
// Decode reads every cached K/V byte once and does little arithmetic per byte, so the kernel is
// built for memory bandwidth: a thread block owns one (sequence, KV head, split) and up to 8 of
// the query heads sharing that KV head, so each K/V row is read once for the whole GQA group.
// head_dim / 8 lanes hold one key row (16 bytes each, one load), so a warp reads 2 (head_dim
// 128) or 4 (64) keys per load; each lane issues 4 to 8 K and as many V loads before using any, to
// keep enough bytes in flight. Softmax is online per (lane slot, head) and merged across slots and
// warps at the end.
//
// When the batch alone gives too few blocks to fill the GPU, or fills its last wave badly, each
// sequence's keys are split across up to num_splits blocks (decode_plan.h: plan_decode, from the
// host-side bounds); each writes its normalised partial output and log-sum-exp (base 2) to the
// workspace and combine_kernel merges them. With one split the output is written directly. Given
// the step's lengths on the device (AttentionLaunch::decode_lengths, from the fa2 backend's
// plan()), every sequence takes chunks of one size chosen from them (decode_plan.h) and uses only
// as many of its blocks as its length needs: a graph captured at a bound of 4,096 keys no longer
// cuts a 384-key sequence into 24 splits of 16 keys, nor splits a batch that fills the GPU.
// Given an order (AttentionLaunch::decode_order, the fa2 plan's longest first), grid row y
// takes sequence order[y]: the GPU starts blocks in grid order, so the longest start first and
// the shortest fill the last wave's gaps, instead of a long sequence late in the batch running
// alone at the end. The kernels read the lengths, order and block table before the PDL wait
// (launch.cuh): only copies write them. The cluster form merges the splits without a global
// round trip: at small batches the splits of a (sequence, KV head) are one thread-block cluster,
// each leaves its partial output in its shared memory and the cluster's blocks merge them
// through distributed shared memory (cluster_merge; plan_decode says when,
// bench/RESULTS.md#decode-clusters for which kernel).
//
// GQA groups of 4 to 16 query heads a KV head take decode_mma_kernel instead: the group's heads
// are the rows of one 16-row tensor-core tile (attention_tile.cuh: attend_narrow), since the
// CUDA-core dot products above grow with the group. Same grid, splits and combine.
//
// An FP8 cache (uint8_t elements, e4m3 · scale) is read the same way, a step reading half the
// bytes; its scales are applied once per head (k_scale to q, v_scale to the output). Per byte it
// does twice the work of bf16 (the widening, and the same shuffles and softmax per key over half
// the bytes), so it is bound by instructions, not bytes. Hence: with up to two heads a block a
// lane holds 16 dims (one 16-byte load), so a key's dot product is summed over 8 lanes instead
// of 16; one block-table lookup a lane step; and each lane's part of q·k and each step's P·V run
// in f16 (e4m3 pairs widen to f16x2 in one instruction, HFMA2 does two products), added to fp32
// accumulators once a step (bench/RESULTS.md#decode-fp8-half).
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "kernels/cuda/attention/attention.h"
#include "kernels/cuda/attention/attention_tile.cuh"
#include "kernels/cuda/attention/decode_plan.h"
#include "kernels/cuda/attention/kv_fp8.cuh"
#include "kernels/cuda/attention/paged_kv.cuh"
#include "kernels/cuda/norm/qk_norm_rope.cuh"
#include "kernels/cuda/primitives/launch.cuh"
#include "kernels/cuda/primitives/mma_bf16.cuh"
#include "kernels/cuda/primitives/reduce.cuh"

namespace miniinfer::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kMaxHeadsPerBlock = 8;
constexpr int kMaxSplits = 64;
constexpr int64_t kMaxPartialRows = 2048;  // (token, split) pairs the workspace is sized for
// The most splits one thread-block cluster merges (the cluster form, launch_decode): the H200
// runs clusters of up to 16 blocks (above 8 a non-portable size).
constexpr int kMaxClusterSplits = 16;

__device__ __forceinline__ void bf16x8_to_float(const uint4& v, float (&f)[8]) {
    const auto* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 p = __bfloat1622float2(h[i]);
        f[2 * i] = p.x;
        f[2 * i + 1] = p.y;
    }
}

// The kLaneDims cache elements of one key row a lane loads at once (8 bf16: 16 bytes; 8 or 16
// e4m3: 8 or 16 bytes, widened to f16 by the steps below, unscaled: the kernel applies the
// tensor's scales once, to q and to the output).
template <typename Cache, int kLaneDims>
using LaneVec = std::conditional_t<sizeof(Cache) * kLaneDims == 16, uint4, uint2>;
// A bf16 cache's 8 elements in fp32.
__device__ __forceinline__ void cache_to_float(const uint4& v, float (&f)[8]) {
    bf16x8_to_float(v, f);
}

// Brings the 128-byte line of p into this SM's L1 (no register written, nothing waited for).
__device__ __forceinline__ void prefetch_l1(const void* p) {
    asm volatile("prefetch.global.L1 [%0];\n" ::"l"(p));
}

// How a decode block finds its sequence and keys (decode_plan.h): lengths (device [2]: the
// step's Σ seq_lens and longest seq_len) give every sequence chunks of one size; without them a
// sequence's keys are cut into num_splits equal parts. order (device [num_seqs], or nullptr:
// batch order) maps the grid's sequence index to the batch's. blocks_per_key: blocks per
// (sequence, split).
struct DecodeSplitArgs {
    const int32_t* lengths;
    const int32_t* order;
    int slots, min_keys, blocks_per_key;
    // The cluster form: the grid's splits of a (sequence, block heads) are one thread-block
    // cluster that merges them itself (cluster_merge); no workspace, no combine_kernel.
    bool cluster;

    // The sequence of grid row y (blockIdx.y).
    __device__ __forceinline__ int seq(int y) const { return order != nullptr ? order[y] : y; }
};

// Keys [x, y) of a sequence of seq_len keys for split `split` of num_splits; x >= seq_len: none.
// kGranule: the kernel's block step (divides kDecodeChunkGranule).
template <int kGranule>
__device__ __forceinline__ int2 split_range(const DecodeSplitArgs& ds, int seq_len, int split,
                                            int num_splits) {
    static_assert(kDecodeChunkGranule % kGranule == 0);
    const int split_len =
        ds.lengths != nullptr
            ? int(decode_chunk_keys(ds.lengths[0], ds.lengths[1], ds.blocks_per_key, ds.slots,
                                    num_splits, ds.min_keys))
            : ((seq_len + num_splits - 1) / num_splits + kGranule - 1) / kGranule * kGranule;
    const int begin = split * split_len;
    return make_int2(begin, min(seq_len, begin + split_len));
}

// What qkv_step leaves in shared memory: the block's query heads, normalised and rotated (bf16,
// as qk_norm_rope_store writes q), and in the block that holds its sequence's last key, that
// key's K and V as the cache holds them (qk_norm_rope.cuh: store_cache's values; an FP8 cache's
// unscaled) and each head's score for it.
template <int kHeadDim, int kHeads>
struct QkvStepShared {
    bf16 q[kHeads][kHeadDim];
    float k[kHeadDim], v[kHeadDim];
    float score[kHeads];
};

// A decode block's share of qk_norm_rope_store (AttentionParams::qkv_step), after the PDL wait:
// the block's num_block_heads query heads (from head_begin) and, when new_key (the block's split
// holds the last key), the new token's K and V heads of kv_head are dealt to the warps, q into
// s.q, K and V into the cache at the token's slot and into s.k, s.v (a group split into head
// chunks has one such block a chunk: they store the same bits). A warp loads all of its heads
// before working on any (one round trip for up to kTasks heads) and computes the rotary angles
// once. Then, after a block barrier, s.score[h] = (q_h · k) · score_scale for the new key. Every
// thread calls it; s.q may be read after it returns, s.score after one more barrier.
template <int kHeadDim, int kHeads, typename Cache>
__device__ __forceinline__ void qkv_step(const AttentionLaunch::QkvStep& f, int token,
                                         int num_heads, int num_kv_heads, int head_begin,
                                         int num_block_heads, int kv_head, bool new_key,
                                         float score_scale, Cache* k_cache, Cache* v_cache,
                                         QkvStepShared<kHeadDim, kHeads>& s) {
    constexpr int kPerLane = kHeadDim / 32;
    constexpr int kTasks = (kHeads + 2 + kWarps - 1) / kWarps;  // heads a warp takes at most
    const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
    const auto* q_norm = static_cast<const bf16*>(f.q_norm);
    const auto* k_norm = static_cast<const bf16*>(f.k_norm);
    const bf16* row = static_cast<const bf16*>(f.qkv) +
                      int64_t(token) * (num_heads + 2 * num_kv_heads) * kHeadDim;
    const int tasks = num_block_heads + (new_key ? 2 : 0);  // q heads, then K, then V
    // Task t's head in the row.
    const auto head_of = [&](int t) {
        return t < num_block_heads
                   ? head_begin + t
                   : num_heads + (t == num_block_heads ? 0 : num_kv_heads) + kv_head;
    };
    float x[kTasks][kPerLane];
#pragma unroll
    for (int i = 0; i < kTasks; ++i) {
        const int t = warp + i * kWarps;
        if (t < tasks) load_head<kHeadDim>(row + int64_t(head_of(t)) * kHeadDim, x[i]);
    }
    if (warp < tasks) {
        const RopeAngles<kHeadDim> angles =
            rope_angles<kHeadDim>(float(f.positions[token]), f.inv_freq, f.rope_scale);
#pragma unroll
        for (int i = 0; i < kTasks; ++i) {
            const int t = warp + i * kWarps;
            if (t >= tasks) break;
            if (t < num_block_heads) {
                if (q_norm) norm_head<kHeadDim>(q_norm, f.eps, x[i]);
                rotate_head<kHeadDim>(angles, x[i]);
#pragma unroll
                for (int j = 0; j < kPerLane; ++j)
                    s.q[t][lane + 32 * j] = __float2bfloat16(x[i][j]);
                continue;
            }
            const bool is_k = t == num_block_heads;  // then V, stored as it is
            if (is_k) {
                if (k_norm) norm_head<kHeadDim>(k_norm, f.eps, x[i]);
                rotate_head<kHeadDim>(angles, x[i]);
            }
            Cache* dst = (is_k ? k_cache : v_cache) +
                         (int64_t(f.slot_mapping[token]) * num_kv_heads + kv_head) * kHeadDim;
            float* kept = is_k ? s.k : s.v;
            const float inv_scale = is_k ? f.k_inv_scale : f.v_inv_scale;
#pragma unroll
            for (int j = 0; j < kPerLane; ++j)
                kept[lane + 32 * j] = store_cache(dst + lane + 32 * j, x[i][j], inv_scale);
        }
    }
    __syncthreads();
    if (!new_key) return;
    for (int h = warp; h < num_block_heads; h += kWarps) {
        float dot = 0.f;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j)
            dot += __bfloat162float(s.q[h][lane + 32 * j]) * s.k[lane + 32 * j];
        dot = warp_sum(dot);
        if (lane == 0) s.score[h] = dot * score_scale;
    }
}

// Merges the splits of each (token, head): out = Σ 2^(lse_s - M) o_s / Σ 2^(lse_s - M).
// partial_o: [rows, num_splits, head_dim]; partial_lse: [rows, num_splits]; out: [rows, head_dim].
// A warp per row: its lanes read the (at most kMaxSplits) log-sum-exps at once, then each lane
// sums its kHeadDim / 32 dims over the live splits, all of a pass's loads issued together (a
// thread per dim walking the splits one dependent load at a time made it latency-bound: 11 µs
// for 8,192 rows of 3 splits on the H200, 3x its bytes).
template <int kHeadDim>
__device__ __forceinline__ void combine_row(const float* __restrict__ partial_o,
                                            const float* __restrict__ partial_lse, int num_splits,
                                            int64_t row, bf16* __restrict__ out) {
    static_assert(kMaxSplits <= 64 && kHeadDim % 64 == 0);
    constexpr int kDims = kHeadDim / 32;  // 2, 4 or 8 a lane
    // A lane's dims of one split: one float2 or float4, two float4 at head_dim 256.
    struct Vec {
        std::conditional_t<kDims == 2, float2, float4> part[kDims <= 4 ? 1 : kDims / 4];
    };
    const int lane = threadIdx.x % 32;
    const float* lse = partial_lse + row * num_splits;
    // Split s's log-sum-exp in lane s % 32 of lse_lo (s < 32) or lse_hi.
    const float lse_lo = lane < num_splits ? lse[lane] : -INFINITY;
    const float lse_hi = lane + 32 < num_splits ? lse[lane + 32] : -INFINITY;
    const float m = warp_max(fmaxf(lse_lo, lse_hi));  // > -inf: split 0 always has keys
    const float w_lo = lse_lo == -INFINITY ? 0.f : exp2f(lse_lo - m);
    const float w_hi = lse_hi == -INFINITY ? 0.f : exp2f(lse_hi - m);
    const float sum = warp_sum(w_lo + w_hi);
    // Splits past the last one with keys need no pass: a captured graph's grid has up to
    // kMaxSplits of them, and a short sequence uses a few.
    const unsigned live_lo = __ballot_sync(0xffffffffu, lse_lo != -INFINITY);
    const unsigned live_hi = __ballot_sync(0xffffffffu, lse_hi != -INFINITY);
    const int used = live_hi != 0 ? 64 - __clz(live_hi) : 32 - __clz(live_lo);
    const float* o = partial_o + row * num_splits * kHeadDim + lane * kDims;
    float a[kDims] = {};
    constexpr int kUnroll = 4;
    for (int s0 = 0; s0 < used; s0 += kUnroll) {
        float w[kUnroll];
        Vec v[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int s = s0 + u;
            // Every lane takes the same weight: the branch below is uniform.
            w[u] = __shfl_sync(0xffffffffu, s < 32 ? w_lo : w_hi, s % 32);
            if (s < used && w[u] > 0.f)  // an empty split's o may be anything
                v[u] = *reinterpret_cast<const Vec*>(o + int64_t(s) * kHeadDim);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            if (s0 + u >= used || w[u] == 0.f) continue;
            const float* f = reinterpret_cast<const float*>(&v[u]);
#pragma unroll
            for (int e = 0; e < kDims; ++e) a[e] += w[u] * f[e];
        }
    }
    bf16* out_row = out + row * kHeadDim + lane * kDims;
#pragma unroll
    for (int e = 0; e < kDims; ++e) out_row[e] = __float2bfloat16(a[e] / sum);
}

// grid: ceil(rows / kCombineWarps) blocks of kCombineWarps warps, a warp per row.
constexpr int kCombineWarps = 4;
template <int kHeadDim>
__global__ void __launch_bounds__(kCombineWarps * 32)
    combine_kernel(const float* __restrict__ partial_o, const float* __restrict__ partial_lse,
                   int num_splits, int64_t rows, bf16* __restrict__ out) {
    pdl_wait();
    pdl_trigger();
    const int64_t row = int64_t(blockIdx.x) * kCombineWarps + threadIdx.x / 32;
    if (row >= rows) return;  // whole warp
    combine_row<kHeadDim>(partial_o, partial_lse, num_splits, row, out);
}

// A split's result in the cluster form, in its block's shared memory instead of the workspace:
// per row (query head), the normalised partial output and the log-sum-exp (base 2; -inf: the
// split saw no key).
template <int kHeadDim, int kRows>
struct SplitPartial {
    float o[kRows][kHeadDim];
    float lse[kRows];
};

// The cluster form's combine, inside the decode launch: the blocks of a cluster are the splits of
// one (sequence, block heads), each has left its SplitPartial in `mine` (rows below num_rows),
// and after a cluster barrier block c of C merges elements c * kThreads + t, + C * kThreads, ...
// of the num_rows x kHeadDim outputs, reading every split's state from its block's shared memory
// (distributed shared memory: no global round trip) as combine_row does from the workspace, and
// writes out[row_of(r)]. A second barrier keeps each block's shared memory alive until the others
// have read it. Every thread of every block of the cluster calls it (a block without keys too,
// its lse set to -inf); split 0 always has keys.
template <int kHeadDim, int kRows, typename RowOf>
__device__ __forceinline__ void cluster_merge(SplitPartial<kHeadDim, kRows>& mine, int num_rows,
                                              const RowOf& row_of, bf16* __restrict__ out) {
    namespace cg = cooperative_groups;
    const cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    const int splits = int(cluster.num_blocks()), rank = int(cluster.block_rank());
    for (int idx = rank * kThreads + int(threadIdx.x); idx < num_rows * kHeadDim;
         idx += splits * kThreads) {
        const int r = idx / kHeadDim, d = idx % kHeadDim;
        float lse[kMaxClusterSplits], o[kMaxClusterSplits];
#pragma unroll
        for (int s = 0; s < kMaxClusterSplits; ++s) {
            lse[s] = -INFINITY;
            o[s] = 0.f;
            if (s < splits) {
                const SplitPartial<kHeadDim, kRows>* p = cluster.map_shared_rank(&mine, s);
                lse[s] = p->lse[r];
                o[s] = p->o[r][d];
            }
        }
        float m = -INFINITY;
#pragma unroll
        for (int s = 0; s < kMaxClusterSplits; ++s) m = fmaxf(m, lse[s]);
        float sum = 0.f, a = 0.f;
#pragma unroll
        for (int s = 0; s < kMaxClusterSplits; ++s) {
            if (lse[s] == -INFINITY) continue;  // an empty split's o may be anything
            const float w = exp2f(lse[s] - m);
            sum += w;
            a += w * o[s];
        }
        out[row_of(r) * kHeadDim + d] = __float2bfloat16(a / sum);
    }
    cluster.sync();
}

// q: [num_tokens, num_heads, head_dim]; k_cache, v_cache: [num_pages, page_size, num_kv_heads,
// head_dim] of Cache (bf16, or e4m3 bytes scaled by k_scale / v_scale); query_start: [num_seqs +
// 1]; seq_lens: [num_seqs]; block_table: [num_seqs, max_pages]; out: [num_tokens, num_heads,
// head_dim] (num_splits == 1); partial_o: [num_tokens * num_heads, num_splits, head_dim] f32;
// partial_lse: [num_tokens * num_heads, num_splits] f32 (num_splits > 1). grid: (num_kv_heads *
// head_chunks, num_seqs, num_splits): split-major, so that the blocks a short sequence leaves
// empty come last, into the last wave's idle SMs; kHeads: query heads per block. A block with no
// keys writes its rows' log-sum-exp as -inf (combine_kernel skips it) and leaves.
// decode_kernel's shape for (kHeadDim, kHeads, Cache): how a warp covers its keys.
template <int kHeadDim, int kHeads, typename Cache>
struct DecodeShape {
    // An FP8 cache multiplies each lane's part of q·k and each step's P·V in f16 (e4m3 pairs
    // widen to f16x2 in one instruction, HFMA2 does two products); a bf16 cache, fp32.
    static constexpr bool kFp8 = std::is_same_v<Cache, uint8_t>;
    // Dims a lane holds: from an FP8 cache with up to 2 heads, 16 (one 16-byte load), so a key's
    // dot product is summed over half as many lanes, since that kernel is bound by instructions,
    // not bytes; with more heads 16 dims take too many registers.
    static constexpr int kLaneDims = kFp8 && kHeads <= 2 ? 16 : 8;
    static constexpr int kLanesPerKey = kHeadDim / kLaneDims;
    static constexpr int kSlots = 32 / kLanesPerKey;  // keys a warp loads at once
    // Keys each lane group loads before computing: more bytes in flight where registers allow.
    static constexpr int kKeysPerSlot = kHeads <= 2 && kLaneDims == 8 ? 8 : 4;
    static constexpr int kWarpKeys = kSlots * kKeysPerSlot;
    using Vec = LaneVec<Cache, kLaneDims>;
};

// f16 q·k: q is stored divided by 16 (exact: a power of two) so that a lane's partial dot stays
// far below f16's 65,504 (|q| · 448 · 16 terms), and the sum is multiplied back.
constexpr float kQkHalfScale = 16.f;

// Step 0: this lane's dims of each of the block's query heads (head h's at q_head0 + h x
// kHeadDim), pre-scaled for exp2 (q_scale): fp32 in q_reg, and for f16 math also as f16 pairs
// divided by kQkHalfScale in q_half. Heads past num_block_heads are zeros. The kernel calls it
// once with a global and once with a shared pointer, so each call's loads know their space.
template <class S, int kHeadDim, int kHeads>
__device__ __forceinline__ void load_queries(const bf16* q_head0, int num_block_heads,
                                             float q_scale, float (&q_reg)[kHeads][S::kLaneDims],
                                             __half2 (&q_half)[kHeads][S::kLaneDims / 2]) {
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
        if (h < num_block_heads) {
#pragma unroll
            for (int c = 0; c < S::kLaneDims / 8; ++c) {
                float f[8];
                bf16x8_to_float(*reinterpret_cast<const uint4*>(q_head0 + h * kHeadDim + 8 * c), f);
#pragma unroll
                for (int e = 0; e < 8; ++e) q_reg[h][8 * c + e] = f[e] * q_scale;
            }
        } else {
#pragma unroll
            for (int e = 0; e < S::kLaneDims; ++e) q_reg[h][e] = 0.f;
        }
        if constexpr (S::kFp8) {
#pragma unroll
            for (int j = 0; j < S::kLaneDims / 2; ++j)
                q_half[h][j] = __floats2half2_rn(q_reg[h][2 * j] / kQkHalfScale,
                                                 q_reg[h][2 * j + 1] / kQkHalfScale);
        }
    }
}

// Step 1: the K and V rows (this lane's dims) of kKeysPerSlot consecutive keys from `first`;
// zeros past key_end. one_page: the keys share a page (one block-table lookup); offset: the
// lane's first element within a cache row (kv_head * kHeadDim + dim0).
template <class S, typename Cache>
__device__ __forceinline__ void load_keys(const Cache* __restrict__ k_cache,
                                          const Cache* __restrict__ v_cache, const int32_t* pages,
                                          int first, int key_end, int page_size, int page_shift,
                                          bool one_page, int64_t row_stride, int offset,
                                          typename S::Vec (&k_raw)[S::kKeysPerSlot],
                                          typename S::Vec (&v_raw)[S::kKeysPerSlot]) {
    using Vec = typename S::Vec;
    const int64_t first_row =
        one_page && first < key_end ? cache_row(pages, first, page_size, page_shift) : 0;
#pragma unroll
    for (int i = 0; i < S::kKeysPerSlot; ++i) {
        const int key = first + i;
        if (key < key_end) {
            const int64_t row =
                one_page ? first_row + i : cache_row(pages, key, page_size, page_shift);
            const int64_t at = row * row_stride + offset;
            k_raw[i] = __ldg(reinterpret_cast<const Vec*>(k_cache + at));
            v_raw[i] = __ldg(reinterpret_cast<const Vec*>(v_cache + at));
        } else {
            k_raw[i] = v_raw[i] = Vec{};
        }
    }
}

// Step 2: each head's score of each loaded key, summed over the key's lane group.
template <class S, int kHeads>
__device__ __forceinline__ void score_keys(const typename S::Vec (&k_raw)[S::kKeysPerSlot],
                                           const float (&q_reg)[kHeads][S::kLaneDims],
                                           const __half2 (&q_half)[kHeads][S::kLaneDims / 2],
                                           float (&score)[kHeads][S::kKeysPerSlot]) {
    constexpr int kLaneDims = S::kLaneDims;
#pragma unroll
    for (int i = 0; i < S::kKeysPerSlot; ++i) {
        if constexpr (S::kFp8) {
            // e4m3 pairs widen to f16 exactly; each head's 16 products in two f16 chains of 8
            // (rounded to 11 bits, against e4m3's 4), summed in fp32.
            uint4 k16[kLaneDims / 8];
            const uint2* k8 = reinterpret_cast<const uint2*>(&k_raw[i]);
#pragma unroll
            for (int c = 0; c < kLaneDims / 8; ++c) k16[c] = e4m3x8_to_f16x8(k8[c]);
            const __half2* k2 = reinterpret_cast<const __half2*>(k16);
#pragma unroll
            for (int h = 0; h < kHeads; ++h) {
                __half2 dot = __hmul2(q_half[h][0], k2[0]);
#pragma unroll
                for (int j = 1; j < kLaneDims / 2; ++j) dot = __hfma2(q_half[h][j], k2[j], dot);
                const float2 f = __half22float2(dot);
                score[h][i] = (f.x + f.y) * kQkHalfScale;
            }
        } else {
            float k_val[kLaneDims];
            cache_to_float(k_raw[i], k_val);
#pragma unroll
            for (int h = 0; h < kHeads; ++h) {
                float dot = 0.f;
#pragma unroll
                for (int e = 0; e < kLaneDims; ++e) dot += q_reg[h][e] * k_val[e];
                score[h][i] = dot;
            }
        }
    }
    // Sum each key's partial dots over its lane group (aligned, so xor stays inside it).
    warp_sum_each<S::kLanesPerKey>(score);
}

// Step 3: the online softmax over the step's keys (those from `first` below key_end): each
// head's running max m and sum l, acc rescaled to the new max, and score turned into the keys'
// weights p = 2^(score - m).
template <class S, int kHeads>
__device__ __forceinline__ void update_softmax(int first, int key_end,
                                               float (&score)[kHeads][S::kKeysPerSlot],
                                               float (&m)[kHeads], float (&l)[kHeads],
                                               float (&acc)[kHeads][S::kLaneDims]) {
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
        float step_max = -INFINITY;
#pragma unroll
        for (int i = 0; i < S::kKeysPerSlot; ++i) {
            if (first + i >= key_end) score[h][i] = -INFINITY;
            step_max = fmaxf(step_max, score[h][i]);
        }
        const Rescale w = merge_weights(m[h], step_max);
        l[h] *= w.self;
        // An FP8 step is bound by instructions: skip the rescale when the maximum held (w.self
        // is then exactly 1, so the bits are the same), as it does after the first steps.
        if (!S::kFp8 || w.self != 1.f) {
#pragma unroll
            for (int e = 0; e < S::kLaneDims; ++e) acc[h][e] *= w.self;
        }
#pragma unroll
        for (int i = 0; i < S::kKeysPerSlot; ++i)
            score[h][i] = exp2f(score[h][i] - (m[h] == -INFINITY ? 0.f : m[h]));
#pragma unroll
        for (int i = 0; i < S::kKeysPerSlot; ++i) l[h] += score[h][i];
    }
}

// Step 4: acc += p · V over the step's keys.
template <class S, int kHeads>
__device__ __forceinline__ void accumulate_values(const typename S::Vec (&v_raw)[S::kKeysPerSlot],
                                                  const float (&p)[kHeads][S::kKeysPerSlot],
                                                  float (&acc)[kHeads][S::kLaneDims]) {
    constexpr int kLaneDims = S::kLaneDims;
    if constexpr (S::kFp8) {
        // This step's P·V in f16: p in [0, 1] and e4m3 values (at most 448 unscaled) make
        // products and sums of kKeysPerSlot of them (at most 1,792) that f16 holds, each rounded
        // to 11 bits against e4m3's 4; the fp32 accumulators take the step's sum.
        __half2 part[kHeads][kLaneDims / 2];
#pragma unroll
        for (int h = 0; h < kHeads; ++h)
#pragma unroll
            for (int j = 0; j < kLaneDims / 2; ++j) part[h][j] = __float2half2_rn(0.f);
#pragma unroll
        for (int i = 0; i < S::kKeysPerSlot; ++i) {
            uint4 v16[kLaneDims / 8];  // kLaneDims f16, 8 to a vector
            const uint2* v8 = reinterpret_cast<const uint2*>(&v_raw[i]);
#pragma unroll
            for (int c = 0; c < kLaneDims / 8; ++c) v16[c] = e4m3x8_to_f16x8(v8[c]);
            const __half2* v2 = reinterpret_cast<const __half2*>(v16);
#pragma unroll
            for (int h = 0; h < kHeads; ++h) {
                const __half2 ph = __float2half2_rn(p[h][i]);
#pragma unroll
                for (int j = 0; j < kLaneDims / 2; ++j) part[h][j] = __hfma2(ph, v2[j], part[h][j]);
            }
        }
#pragma unroll
        for (int h = 0; h < kHeads; ++h)
#pragma unroll
            for (int j = 0; j < kLaneDims / 2; ++j) {
                const float2 f = __half22float2(part[h][j]);
                acc[h][2 * j] += f.x;
                acc[h][2 * j + 1] += f.y;
            }
    } else {
#pragma unroll
        for (int i = 0; i < S::kKeysPerSlot; ++i) {
            float v_val[kLaneDims];
            cache_to_float(v_raw[i], v_val);
#pragma unroll
            for (int h = 0; h < kHeads; ++h)
#pragma unroll
                for (int e = 0; e < kLaneDims; ++e) acc[h][e] += p[h][i] * v_val[e];
        }
    }
}

// Step 5: the slots of a warp merged (lanes with the same dims, kLanesPerKey apart): every lane
// of a dims group then holds its warp's state.
template <class S, int kHeads>
__device__ __forceinline__ void merge_slots(float (&m)[kHeads], float (&l)[kHeads],
                                            float (&acc)[kHeads][S::kLaneDims]) {
#pragma unroll
    for (int offset = S::kLanesPerKey; offset < 32; offset *= 2) {
#pragma unroll
        for (int h = 0; h < kHeads; ++h) {
            const float m_o = __shfl_xor_sync(0xffffffffu, m[h], offset);
            const float l_o = __shfl_xor_sync(0xffffffffu, l[h], offset);
            const Rescale w = merge_weights(m[h], m_o);
            l[h] = l[h] * w.self + l_o * w.other;
#pragma unroll
            for (int e = 0; e < S::kLaneDims; ++e)
                acc[h][e] =
                    acc[h][e] * w.self + __shfl_xor_sync(0xffffffffu, acc[h][e], offset) * w.other;
        }
    }
}

// Where a decode block's result goes: out (one split), its block's shared memory (the cluster
// form) or the workspace for combine_kernel.
template <int kHeadDim, int kHeads>
struct DecodeResult {
    bf16* out;
    float* partial_o;
    float* partial_lse;
    SplitPartial<kHeadDim, kHeads>* cluster_part;  // null: not the cluster form
    int num_splits, split;

    __device__ __forceinline__ void store(int64_t row, int h, int d, float o, float lse) const {
        if (num_splits == 1) {
            out[row * kHeadDim + d] = __float2bfloat16(o);
        } else if (cluster_part != nullptr) {
            cluster_part->o[h][d] = o;
            if (d == 0) cluster_part->lse[h] = lse;
        } else {
            partial_o[(row * num_splits + split) * kHeadDim + d] = o;
            if (d == 0) partial_lse[row * num_splits + split] = lse;
        }
    }
};

// Step 6: the warps merged through shared memory, with the step's own key (new_key: its score
// and V in qs, as one more warp's state), normalised and stored (rows row0 + h). Every thread
// calls it.
template <class S, int kHeadDim, int kHeads>
__device__ __forceinline__ void merge_warps(const float (&m)[kHeads], const float (&l)[kHeads],
                                            const float (&acc)[kHeads][S::kLaneDims], int dim0,
                                            int num_block_heads, bool new_key,
                                            const QkvStepShared<kHeadDim, kHeads>& qs,
                                            float out_scale, int64_t row0,
                                            const DecodeResult<kHeadDim, kHeads>& result) {
    __shared__ float warp_acc[kWarps][kHeads][kHeadDim];
    __shared__ float warp_m[kWarps][kHeads], warp_l[kWarps][kHeads];
    const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
    if (lane < S::kLanesPerKey) {
#pragma unroll
        for (int h = 0; h < kHeads; ++h) {
#pragma unroll
            for (int e = 0; e < S::kLaneDims; ++e) warp_acc[warp][h][dim0 + e] = acc[h][e];
            if (lane == 0) {
                warp_m[warp][h] = m[h];
                warp_l[warp][h] = l[h];
            }
        }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < num_block_heads * kHeadDim; idx += kThreads) {
        const int h = idx / kHeadDim, d = idx % kHeadDim;
        float m_all = -INFINITY;
        for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, warp_m[w][h]);
        if (new_key) m_all = fmaxf(m_all, qs.score[h]);
        const float ref = m_all == -INFINITY ? 0.f : m_all;
        float sum = 0.f, a = 0.f;
        for (int w = 0; w < kWarps; ++w) {
            const float weight = exp2f(warp_m[w][h] - ref);
            sum += warp_l[w][h] * weight;
            a += warp_acc[w][h][d] * weight;
        }
        if (new_key) {
            const float weight = exp2f(qs.score[h] - ref);
            sum += weight;
            a += qs.v[d] * weight;
        }
        const float o = sum > 0.f ? a / sum * out_scale : 0.f;
        const float lse = sum > 0.f ? m_all + log2f(sum) : -INFINITY;
        result.store(row0 + h, h, d, o, lse);
    }
}

// q: [num_tokens, num_heads, head_dim]; k_cache, v_cache: [num_pages, page_size, num_kv_heads,
// head_dim] of Cache (bf16, or e4m3 bytes scaled by k_scale / v_scale); query_start: [num_seqs +
// 1]; seq_lens: [num_seqs]; block_table: [num_seqs, max_pages]; out: [num_tokens, num_heads,
// head_dim] (num_splits == 1); partial_o: [num_tokens * num_heads, num_splits, head_dim] f32;
// partial_lse: [num_tokens * num_heads, num_splits] f32 (num_splits > 1). grid: (num_kv_heads *
// head_chunks, num_seqs, num_splits): split-major, so that the blocks a short sequence leaves
// empty come last, into the last wave's idle SMs; kHeads: query heads per block. A block with no
// keys writes its rows' log-sum-exp as -inf (combine_kernel skips it) and leaves. The work is
// the steps above: load the queries, then per warp step load keys, score them, update the
// softmax, accumulate values; then merge the slots, the warps and (cluster form) the splits. No
// min-blocks bound: bounding the registers for 5 blocks an SM measured slower
// (bench/RESULTS.md#decode-fp8-half).
template <int kHeadDim, int kHeads, typename Cache>
__global__ void __launch_bounds__(kThreads)
    decode_kernel(const bf16* __restrict__ q, const Cache* __restrict__ k_cache,
                  const Cache* __restrict__ v_cache, float k_scale, float v_scale,
                  const int32_t* __restrict__ query_start, const int32_t* __restrict__ seq_lens,
                  const int32_t* __restrict__ block_table, int max_pages, int num_heads,
                  int num_kv_heads, int page_size, int page_shift, float scale_log2, int num_splits,
                  DecodeSplitArgs ds, AttentionLaunch::QkvStep fq, bf16* __restrict__ out,
                  float* __restrict__ partial_o, float* __restrict__ partial_lse) {
    using S = DecodeShape<kHeadDim, kHeads, Cache>;
    const int seq = ds.seq(blockIdx.y), split = blockIdx.z;
    const int head_chunks = (num_heads / num_kv_heads + kHeads - 1) / kHeads;
    const int kv_head = blockIdx.x / head_chunks;
    const int group = num_heads / num_kv_heads;
    const int head_begin = kv_head * group + (blockIdx.x % head_chunks) * kHeads;
    const int num_block_heads = min(kHeads, kv_head * group + group - head_begin);
    // The step's lengths and tables before waiting (launch.cuh: only copies write them).
    const int token = query_start[seq];
    if (query_start[seq + 1] == token) return;  // no query row this step
    const int seq_len = seq_lens[seq];
    // Splits cover whole warp steps of keys; trailing splits of a short sequence may be empty.
    const int2 range = split_range<S::kWarpKeys>(ds, seq_len, split, num_splits);
    const bool has_keys = range.x < range.y;
    // With the QKV step, the block holding the last key (the step's own) takes it from shared
    // memory (qkv_step): its loop stops before it.
    const bool new_key = fq.qkv != nullptr && has_keys && range.y == seq_len;
    const int key_begin = range.x, key_end = new_key ? seq_len - 1 : range.y;
    const int32_t* pages = block_table + int64_t(seq) * max_pages;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int slot = lane / S::kLanesPerKey, dim0 = (lane % S::kLanesPerKey) * S::kLaneDims;
    // A step's keys of this lane: kKeysPerSlot consecutive ones from a multiple of kKeysPerSlot
    // (split_range cuts at whole warp steps), so when pages hold a multiple of kKeysPerSlot they
    // share one page: one block-table lookup a step instead of one a key.
    const bool one_page = page_size % S::kKeysPerSlot == 0;
    // The block table's line of the first keys into L1 meanwhile (the loops read their pages;
    // prefetching their K/V rows into L2 too measured no better).
    if (threadIdx.x == 0 && key_begin < key_end) prefetch_l1(pages + key_begin / page_size);
    pdl_wait();
    pdl_trigger();
    const int64_t row0 = int64_t(token) * num_heads + head_begin;
    __shared__ SplitPartial<kHeadDim, kHeads> cluster_part;  // the cluster form's
    const auto row_of = [&](int h) { return row0 + h; };
    if (!has_keys) {  // only a split past the first can be empty
        if (ds.cluster) {
            if (int(threadIdx.x) < kHeads) cluster_part.lse[threadIdx.x] = -INFINITY;
            cluster_merge(cluster_part, num_block_heads, row_of, out);
        } else if (int(threadIdx.x) < num_block_heads) {
            partial_lse[(row0 + threadIdx.x) * num_splits + split] = -INFINITY;
        }
        return;
    }

    // An FP8 cache's scales are applied once: k_scale to q, v_scale to the output.
    const float q_scale = S::kFp8 ? scale_log2 * k_scale : scale_log2;
    const float out_scale = S::kFp8 ? v_scale : 1.f;
    __shared__ __align__(16) QkvStepShared<kHeadDim, kHeads> qs;
    if (fq.qkv != nullptr)
        qkv_step<kHeadDim>(fq, token, num_heads, num_kv_heads, head_begin, num_block_heads, kv_head,
                           new_key, q_scale, const_cast<Cache*>(k_cache),
                           const_cast<Cache*>(v_cache), qs);
    float q_reg[kHeads][S::kLaneDims];
    __half2 q_half[kHeads][S::kLaneDims / 2];
    if (fq.qkv != nullptr)
        load_queries<S, kHeadDim>(&qs.q[0][dim0], num_block_heads, q_scale, q_reg, q_half);
    else
        load_queries<S, kHeadDim>(q + row0 * kHeadDim + dim0, num_block_heads, q_scale, q_reg,
                                  q_half);

    float m[kHeads], l[kHeads], acc[kHeads][S::kLaneDims];
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
        m[h] = -INFINITY;
        l[h] = 0.f;
#pragma unroll
        for (int e = 0; e < S::kLaneDims; ++e) acc[h][e] = 0.f;
    }
    const int64_t row_stride = int64_t(num_kv_heads) * kHeadDim;
    const int lane_offset = kv_head * kHeadDim + dim0;  // 32-bit: the loop keeps it in one register
    for (int base = key_begin + warp * S::kWarpKeys; base < key_end;
         base += kWarps * S::kWarpKeys) {
        const int first = base + slot * S::kKeysPerSlot;
        typename S::Vec k_raw[S::kKeysPerSlot], v_raw[S::kKeysPerSlot];
        load_keys<S>(k_cache, v_cache, pages, first, key_end, page_size, page_shift, one_page,
                     row_stride, lane_offset, k_raw, v_raw);
        float score[kHeads][S::kKeysPerSlot];
        score_keys<S>(k_raw, q_reg, q_half, score);
        update_softmax<S>(first, key_end, score, m, l, acc);
        accumulate_values<S>(v_raw, score, acc);
    }
    merge_slots<S>(m, l, acc);
    const DecodeResult<kHeadDim, kHeads> result{
        out, partial_o, partial_lse, ds.cluster ? &cluster_part : nullptr, num_splits, split};
    merge_warps<S>(m, l, acc, dim0, num_block_heads, new_key, qs, out_scale, row0, result);
    if (ds.cluster) cluster_merge(cluster_part, num_block_heads, row_of, out);
}

// decode_mma_kernel's dynamic shared memory: K then V slices of kWarps warps x 2 stages x 16 keys
// (attend_narrow), 68 KiB at head_dim 128. The cluster form's SplitPartial takes its end, which
// the warps' merge (kWarps x 16 x (kHeadDim + 2) floats, then 2 x kWarps x 16) leaves free.
template <int kHeadDim>
constexpr size_t decode_mma_smem_bytes() {
    return 2 * kWarps * 2 * 16 * (kHeadDim + 8) * sizeof(bf16);
}
static_assert(decode_mma_smem_bytes<64>() - sizeof(SplitPartial<64, 16>) >=
              (kWarps * 16 * (64 + 2) + 2 * kWarps * 16) * sizeof(float));
static_assert(decode_mma_smem_bytes<128>() - sizeof(SplitPartial<128, 16>) >=
              (kWarps * 16 * (128 + 2) + 2 * kWarps * 16) * sizeof(float));
static_assert(decode_mma_smem_bytes<256>() - sizeof(SplitPartial<256, 16>) >=
              (kWarps * 16 * (256 + 2) + 2 * kWarps * 16) * sizeof(float));

// Decode for GQA groups of 4 to 16 query heads a KV head (Qwen3-4B/8B 4, 14B 5, 30B-A3B and
// 32B 8): the group's heads are the packed rows of one 16-row mma tile, so the per-key math runs
// on tensor cores (attention_tile.cuh: attend_narrow, the flashinfer backend's decode items)
// instead of decode_kernel's CUDA-core dot products, whose work grows with the group: at the
// 30B-A3B's group of 8 that kernel reads K/V at a third of the rate it reaches at a group of 2.
// Same grid, splits and outputs as decode_kernel: a block owns (KV head, sequence, split) and
// writes the output (one split) or its partial output and log-sum-exp for combine_kernel.
// kHeadsAsColumns (groups of up to 8): attend_narrow_heads, the products transposed so that the
// heads fill the mma's 8 columns instead of half of its 16 rows. The QKV step is decode_kernel's
// alone (decode_supports_qkv_step): fq is always null here (launch_decode passes both kernels the
// same arguments).
template <int kHeadDim, typename Cache, bool kHeadsAsColumns>
__global__ void __launch_bounds__(kThreads)
    decode_mma_kernel(const bf16* __restrict__ q, const Cache* __restrict__ k_cache,
                      const Cache* __restrict__ v_cache, float k_scale, float v_scale,
                      const int32_t* __restrict__ query_start, const int32_t* __restrict__ seq_lens,
                      const int32_t* __restrict__ block_table, int max_pages, int num_heads,
                      int num_kv_heads, int page_size, int page_shift, float scale_log2,
                      int num_splits, DecodeSplitArgs ds, AttentionLaunch::QkvStep /*fq*/,
                      bf16* __restrict__ out, float* __restrict__ partial_o,
                      float* __restrict__ partial_lse) {
    extern __shared__ __align__(16) unsigned char smem_bytes[];  // decode_mma_smem_bytes
    bf16* smem = reinterpret_cast<bf16*>(smem_bytes);
    const int seq = ds.seq(blockIdx.y), split = blockIdx.z, kv_head = blockIdx.x;
    // The step's lengths and tables before waiting (launch.cuh: only copies write them).
    const int token = query_start[seq];
    if (query_start[seq + 1] == token) return;  // no query row this step
    const int seq_len = seq_lens[seq];
    const int group = num_heads / num_kv_heads;
    // Splits cover whole block steps (kWarps slices of 16 keys); trailing splits may be empty.
    constexpr int kBlockKeys = kWarps * 16;
    const int2 range = split_range<kBlockKeys>(ds, seq_len, split, num_splits);
    const int key_begin = range.x, key_end = range.y;
    // The block table's line of the first keys into L1 meanwhile (the loops read their pages).
    if (threadIdx.x == 0 && key_begin < key_end)
        prefetch_l1(block_table + int64_t(seq) * max_pages + key_begin / page_size);
    pdl_wait();
    pdl_trigger();
    const int64_t row0 = packed_row_index(token, 0, group, num_heads, kv_head);  // + r < group
    // The cluster form's partial: the end of the dynamic shared memory, past what attend_narrow's
    // merge reuses.
    auto& cluster_part = *reinterpret_cast<SplitPartial<kHeadDim, 16>*>(
        smem_bytes + decode_mma_smem_bytes<kHeadDim>() - sizeof(SplitPartial<kHeadDim, 16>));
    const auto row_of = [&](int r) {
        return packed_row_index(token, r, group, num_heads, kv_head);
    };
    if (key_begin >= key_end) {  // only a split past the first can be empty
        if (ds.cluster) {
            if (int(threadIdx.x) < group) cluster_part.lse[threadIdx.x] = -INFINITY;
            cluster_merge(cluster_part, group, row_of, out);
        } else if (int(threadIdx.x) < group) {
            partial_lse[(row0 + threadIdx.x) * num_splits + split] = -INFINITY;
        }
        return;
    }
    const auto store = [&](int, int r, int d, float a, float sum, float m) {
        const int64_t row = row_of(r);
        const float o = sum > 0.f ? a / sum : 0.f;
        const float lse = sum > 0.f ? m + log2f(sum) : -INFINITY;
        if (num_splits == 1) {
            out[row * kHeadDim + d] = __float2bfloat16(a / sum);
        } else if (ds.cluster) {
            cluster_part.o[r][d] = o;
            if (d == 0) cluster_part.lse[r] = lse;
        } else {
            partial_o[(row * num_splits + split) * kHeadDim + d] = o;
            if (d == 0) partial_lse[row * num_splits + split] = lse;
        }
    };
    const int32_t* pages = block_table + int64_t(seq) * max_pages;
    const int64_t kv_row_stride = int64_t(num_kv_heads) * kHeadDim;
    if constexpr (kHeadsAsColumns)
        attend_narrow_heads<kHeadDim, kWarps>(smem, q, token, group, num_heads, kv_head,
                                              seq_len - 1, key_begin, key_end, k_cache, v_cache,
                                              k_scale, v_scale, pages, page_size, page_shift,
                                              kv_row_stride, scale_log2, store);
    else
        attend_narrow<kHeadDim, kWarps>(smem, q, token, 0, group, group, num_heads, kv_head,
                                        seq_len - 1, key_begin, key_end, k_cache, v_cache, k_scale,
                                        v_scale, pages, page_size, page_shift, kv_row_stride,
                                        scale_log2, store);
    if (ds.cluster) cluster_merge(cluster_part, group, row_of, out);
}

size_t partial_row_bytes(int64_t num_heads, int64_t head_dim) {
    return size_t(num_heads) * size_t(head_dim + 1) * sizeof(float);
}

// One decode kernel instance's DecodeOccupancy (clusters of kMaxClusterSplits blocks), measured
// once (no stream work, so the first call may even happen during graph capture). Assumes one kind
// of GPU per process. A kernel above 48 KiB of dynamic shared memory is opted into it here, once;
// so is a kernel into clusters of more than 8 blocks.
template <auto Kernel>
const DecodeOccupancy& decode_occupancy(size_t smem_bytes) {
    static const DecodeOccupancy occupancy = [smem_bytes] {
        DecodeOccupancy o;
        o.num_sms = sm_count();
        if (smem_bytes > 48 * 1024) allow_shared_memory<Kernel>(smem_bytes);
        int blocks_per_sm = 0, max_clusters = 0;
        MI_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, Kernel,
                                                                    kThreads, smem_bytes));
        o.blocks_per_sm = blocks_per_sm;
        allow_large_clusters<Kernel>();
        cudaLaunchAttribute cluster = cluster_dimension(dim3(1, 1, kMaxClusterSplits));
        cudaLaunchConfig_t config{};
        config.gridDim = dim3(1, 1, kMaxClusterSplits);
        config.blockDim = dim3(kThreads);
        config.dynamicSmemBytes = smem_bytes;
        config.attrs = &cluster;
        config.numAttrs = 1;
        MI_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&max_clusters, Kernel, &config));
        o.max_clusters = max_clusters;
        return o;
    }();
    return occupancy;
}

// The most splits the cluster form merges when AttentionLaunch::decode_cluster_splits is below
// 0: kMaxClusterSplits for decode_mma_kernel, none for decode_kernel, whose plain blocks start
// sooner under PDL than a cluster's 16 that must find room on one GPC together
// (bench/RESULTS.md#decode-clusters).
int cluster_bound(const AttentionLaunch& a, bool tensor_core_kernel) {
    const int bound = a.decode_cluster_splits >= 0 ? a.decode_cluster_splits
                      : tensor_core_kernel         ? kMaxClusterSplits
                                                   : 0;
    return std::min(bound, kMaxClusterSplits);
}

// One decode launch of Kernel (decode_kernel or decode_mma_kernel, same arguments; smem_bytes of
// dynamic shared memory; tensor_core_kernel: decode_mma_kernel, which takes the cluster form by
// default) over head_chunks blocks per KV head, and the combine of its splits. The plan
// (decode_plan.h) comes from host-side bounds and the kernel's occupancy only.
template <auto Kernel, typename Cache>
void launch_decode(const AttentionLaunch& a, int64_t head_chunks, size_t smem_bytes,
                   void* workspace, size_t workspace_bytes, cudaStream_t stream,
                   bool tensor_core_kernel) {
    MI_LAUNCH_CHECK(a.num_seqs <= 65535, "attention decode: batch too large for one launch");
    const DecodeOccupancy& occupancy = decode_occupancy<Kernel>(smem_bytes);
    const int64_t blocks_per_key = a.num_kv_heads * head_chunks;
    const int64_t workspace_splits = int64_t(
        workspace_bytes / (size_t(a.num_tokens) * partial_row_bytes(a.num_heads, a.head_dim)));
    const DecodePlan plan = plan_decode(
        {a.num_seqs, a.max_seq_len, blocks_per_key, a.decode_min_keys,
         cluster_bound(a, tensor_core_kernel), std::min<int64_t>(kMaxSplits, workspace_splits)},
        occupancy);
    const int num_splits = plan.num_splits;
    const DecodeSplitArgs ds{num_splits > 1 ? a.decode_lengths : nullptr,
                             a.decode_order,
                             int(std::max<int64_t>(occupancy.slots(), 1)),
                             a.decode_min_keys,
                             int(blocks_per_key),
                             plan.cluster};
    const dim3 grid(unsigned(blocks_per_key), unsigned(a.num_seqs), unsigned(num_splits));
    auto* partial_o = static_cast<float*>(workspace);
    float* partial_lse = num_splits > 1 && !plan.cluster
                             ? partial_o + a.num_tokens * a.num_heads * num_splits * a.head_dim
                             : nullptr;
    launch_kernel_in_clusters(
        Kernel, grid, dim3(1, 1, plan.cluster ? unsigned(num_splits) : 1u), kThreads, smem_bytes,
        stream, static_cast<const bf16*>(a.q), static_cast<const Cache*>(a.k_cache),
        static_cast<const Cache*>(a.v_cache), a.k_scale, a.v_scale, a.query_start, a.seq_lens,
        a.block_table, int(a.max_pages), int(a.num_heads), int(a.num_kv_heads), int(a.page_size),
        page_shift_of(a.page_size), a.scale * 1.4426950408889634f, num_splits, ds, a.qkv_step,
        static_cast<bf16*>(a.out), partial_o, partial_lse);
    MI_CUDA_CHECK(cudaGetLastError());
    if (num_splits > 1 && !plan.cluster) {
        const int64_t rows = a.num_tokens * a.num_heads;
        const auto combine = a.head_dim == 256   ? combine_kernel<256>
                             : a.head_dim == 128 ? combine_kernel<128>
                                                 : combine_kernel<64>;
        launch_kernel(combine, unsigned((rows + kCombineWarps - 1) / kCombineWarps),
                      kCombineWarps * 32, 0, stream, partial_o, partial_lse, num_splits, rows,
                      static_cast<bf16*>(a.out));
        MI_CUDA_CHECK(cudaGetLastError());
    }
}

// A row of the dispatch table: launch_decode of one kernel instance, its query heads cut into
// chunks of kBlockHeads a block.
using DecodeLaunch = void (*)(const AttentionLaunch&, void*, size_t, cudaStream_t);

template <auto Kernel, int kHeadDim, typename Cache, int kBlockHeads, bool kTensorCores>
void launch_instance(const AttentionLaunch& a, void* workspace, size_t workspace_bytes,
                     cudaStream_t stream) {
    const int64_t group = a.num_heads / a.num_kv_heads;
    launch_decode<Kernel, Cache>(a, (group + kBlockHeads - 1) / kBlockHeads,
                                 kTensorCores ? decode_mma_smem_bytes<kHeadDim>() : 0, workspace,
                                 workspace_bytes, stream, kTensorCores);
}
template <int kHeadDim, int kHeads, typename Cache>
constexpr DecodeLaunch cuda_cores =
    launch_instance<decode_kernel<kHeadDim, kHeads, Cache>, kHeadDim, Cache, kHeads, false>;
template <int kHeadDim, typename Cache, bool kHeadsAsColumns>
constexpr DecodeLaunch tensor_cores =
    launch_instance<decode_mma_kernel<kHeadDim, Cache, kHeadsAsColumns>, kHeadDim, Cache, 16, true>;

struct DecodeInstance {
    int head_dim;
    bool fp8_cache;
    int64_t min_group, max_group;  // the GQA groups (query heads a KV head) it takes
    bool uses_tensor_cores;        // decode_mma_kernel: no qkv_step (decode_supports_qkv_step)
    DecodeLaunch launch;
};
constexpr int64_t kAnyGroup = INT64_MAX;

// Every decode kernel the product runs, and what runs it. Groups of 1 to 3 take decode_kernel,
// faster there than either tensor-core form; groups of 4 to 8 fill the mma tile's 8 columns with
// their heads, 9 to 16 its 16 rows (bench/RESULTS.md#decode-tensor-cores); larger groups take
// decode_kernel in chunks of 8 heads. head_dim 256 (Qwen3.5 and Qwen3-Next: groups of 6 and 8)
// has the groups of 4 to 8 alone; its other groups decode in the prefill kernel
// (attention_decode_supported).
constexpr DecodeInstance kDecodeInstances[] = {
    {256, false, 4, 8, true, tensor_cores<256, bf16, true>},
    {256, true, 4, 8, true, tensor_cores<256, uint8_t, true>},
    {128, false, 1, 1, false, cuda_cores<128, 1, bf16>},
    {128, false, 2, 2, false, cuda_cores<128, 2, bf16>},
    {128, false, 3, 3, false, cuda_cores<128, 4, bf16>},
    {128, false, 4, 8, true, tensor_cores<128, bf16, true>},
    {128, false, 9, 16, true, tensor_cores<128, bf16, false>},
    {128, false, 17, kAnyGroup, false, cuda_cores<128, kMaxHeadsPerBlock, bf16>},
    {128, true, 1, 1, false, cuda_cores<128, 1, uint8_t>},
    {128, true, 2, 2, false, cuda_cores<128, 2, uint8_t>},
    {128, true, 3, 3, false, cuda_cores<128, 4, uint8_t>},
    {128, true, 4, 8, true, tensor_cores<128, uint8_t, true>},
    {128, true, 9, 16, true, tensor_cores<128, uint8_t, false>},
    {128, true, 17, kAnyGroup, false, cuda_cores<128, kMaxHeadsPerBlock, uint8_t>},
    {64, false, 1, 1, false, cuda_cores<64, 1, bf16>},
    {64, false, 2, 2, false, cuda_cores<64, 2, bf16>},
    {64, false, 3, 3, false, cuda_cores<64, 4, bf16>},
    {64, false, 4, 8, true, tensor_cores<64, bf16, true>},
    {64, false, 9, 16, true, tensor_cores<64, bf16, false>},
    {64, false, 17, kAnyGroup, false, cuda_cores<64, kMaxHeadsPerBlock, bf16>},
    {64, true, 1, 1, false, cuda_cores<64, 1, uint8_t>},
    {64, true, 2, 2, false, cuda_cores<64, 2, uint8_t>},
    {64, true, 3, 3, false, cuda_cores<64, 4, uint8_t>},
    {64, true, 4, 8, true, tensor_cores<64, uint8_t, true>},
    {64, true, 9, 16, true, tensor_cores<64, uint8_t, false>},
    {64, true, 17, kAnyGroup, false, cuda_cores<64, kMaxHeadsPerBlock, uint8_t>},
};

// The row for (head_dim, cache, group); nullptr: no decode kernel for it.
const DecodeInstance* find_decode_instance(int64_t head_dim, bool fp8_cache, int64_t group) {
    for (const DecodeInstance& d : kDecodeInstances)
        if (d.head_dim == head_dim && d.fp8_cache == fp8_cache && group >= d.min_group &&
            group <= d.max_group)
            return &d;
    return nullptr;
}

}  // namespace

bool attention_decode_supported(int64_t head_dim, bool fp8_cache, int64_t group) {
    return find_decode_instance(head_dim, fp8_cache, group) != nullptr;
}

// Which rows use tensor cores depends on the group alone, so any head_dim and cache answers.
bool decode_supports_qkv_step(int64_t num_heads, int64_t num_kv_heads) {
    if (num_kv_heads <= 0) return false;
    const DecodeInstance* d = find_decode_instance(128, false, num_heads / num_kv_heads);
    return d != nullptr && !d->uses_tensor_cores;
}

size_t attention_workspace_bytes(int64_t max_tokens, int64_t num_heads, int64_t head_dim) {
    const int64_t rows = std::min<int64_t>(max_tokens * kMaxSplits, kMaxPartialRows);
    return size_t(rows) * partial_row_bytes(num_heads, head_dim);
}

void launch_attention_decode(const AttentionLaunch& a, void* workspace, size_t workspace_bytes,
                             cudaStream_t stream) {
    if (a.num_seqs == 0 || a.num_tokens == 0) return;
    if (workspace == nullptr) workspace_bytes = 0;
    MI_LAUNCH_CHECK(a.num_kv_heads > 0 && a.num_heads % a.num_kv_heads == 0,
                    "attention decode: query heads must be a multiple of the KV heads");
    const int64_t group = a.num_heads / a.num_kv_heads;
    const DecodeInstance* d = find_decode_instance(a.head_dim, a.fp8_cache, group);
    MI_LAUNCH_CHECK(d != nullptr,
                    "attention decode: head_dim must be 64 or 128, or 256 with a GQA group of 4 "
                    "to 8");
    MI_LAUNCH_CHECK(a.qkv_step.qkv == nullptr || !d->uses_tensor_cores,
                    "attention decode: qkv_step with a GQA group of 4 to 16 (see "
                    "decode_supports_qkv_step)");
    d->launch(a, workspace, workspace_bytes, stream);
}

}  // namespace miniinfer::cuda
