// The sampler's block-level pieces (sampling.cu, sampling_fast.cuh, argmax.cu): one block of
// kThreads a row; the order-preserving key of a logit, argmax and log-sum-exp reductions, the
// block's shared scratch, prefix sums, a coalesced pass over a row, and the row's tiles of
// consecutive ids with one warp's walk of a tile. Device code only.
#pragma once

#include <cuda_bf16.h>

#include <climits>
#include <cstdint>

#include "kernels/cuda/primitives/reduce.cuh"

namespace miniinfer::cuda::sampling_detail {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kUnroll = 8;   // loads in flight per thread per pass
constexpr int kBins = 2048;  // 11-bit radix digits
constexpr int kBinsPerThread = kBins / kThreads;
constexpr unsigned kFull = 0xffffffffu;
constexpr int kMaxTopLogprobs = 32;
constexpr int kMaxTiles = kThreads;  // id-order searches: one tile per thread
constexpr int kMaxTopK = 256;        // the largest top_k sample_top_k_row takes
constexpr int kMaxCandidates = kBins;

__device__ __forceinline__ float neg_inf() {
    return __int_as_float(int(0xff800000u));
}

// Larger float ↔ larger key (for all non-NaN floats).
__device__ __forceinline__ uint32_t order_key(float x) {
    const uint32_t u = __float_as_uint(x);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_value(uint32_t key) {
    return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

struct ArgMax {
    float value;
    int idx;
    __device__ void update(float x, int i) {
        if (x > value || (x == value && i < idx)) value = x, idx = i;
    }
};

// Online log-sum-exp: s = sum exp(x - m).
struct LogSumExp {
    float m, s;
    __device__ void update(float x) {
        if (x == neg_inf()) return;
        if (x > m) {
            s = s * expf(m - x) + 1.f;
            m = x;
        } else {
            s += expf(x - m);
        }
    }
};

__device__ inline ArgMax combine(ArgMax a, ArgMax b) {
    return (b.value > a.value || (b.value == a.value && b.idx < a.idx)) ? b : a;
}
__device__ inline LogSumExp combine(LogSumExp a, LogSumExp b) {
    if (a.m == neg_inf()) return b;
    if (b.m == neg_inf()) return a;
    const float m = fmaxf(a.m, b.m);
    return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

__device__ inline ArgMax shfl_xor(ArgMax v, int o) {
    return {__shfl_xor_sync(kFull, v.value, o), __shfl_xor_sync(kFull, v.idx, o)};
}
__device__ inline LogSumExp shfl_xor(LogSumExp v, int o) {
    return {__shfl_xor_sync(kFull, v.m, o), __shfl_xor_sync(kFull, v.s, o)};
}

// log_softmax(x) = (x - m) - log(s): x - m first, so a large max costs no precision.
struct LogSoftmax {
    float m, log_s;
    __device__ float operator()(float x) const { return (x - m) - log_s; }
};

struct Scratch {
    uint32_t count[kBins];  // histogram of the current radix level
    union {
        double mass[kBins];
        uint64_t candidates[kMaxCandidates];  // sample_top_k_row: (key, ~id), sorted descending
    };
    ArgMax argmax_slots[kWarps];
    LogSumExp lse_slots[kWarps];
    uint32_t u_slots[kWarps];
    double d_slots[kWarps];
    int i_slots[kWarps];
    int found_r, last_r;
    uint32_t above_u;
    double above_d, rem_d;
    int pick_tile, result;
    double tile_sum[kMaxTiles];  // first_crossing's per-tile sums
    int tile_last[kMaxTiles];
    uint32_t floor_key;
    int num_gathered;
    int gather_id[kMaxTopLogprobs];
    uint32_t gather_key[kMaxTopLogprobs];
    float tile_max[kMaxTiles];  // row_tiles' per-tile maximum and f32 exp sum
    float tile_exp_sum[kMaxTiles];
    uint32_t threshold_key;  // sample_top_k_row: its candidates, their count, the kept set
    int num_candidates, num_kept;
    double kept_weight[kMaxTopK];  // in id order
    int32_t kept_id[kMaxTopK];
};

// Every thread gets the combination of all threads' values (in a fixed order).
template <typename T>
__device__ T block_combine(T v, T* slots) {
    for (int o = 16; o > 0; o /= 2) v = combine(v, shfl_xor(v, o));
    __syncthreads();  // slots may still be read from a previous call
    if (threadIdx.x % 32 == 0) slots[threadIdx.x / 32] = v;
    __syncthreads();
    T r = slots[0];
    for (int w = 1; w < kWarps; ++w) r = combine(r, slots[w]);
    return r;
}

template <typename T>
__device__ T warp_inclusive_sum(T v) {
    const int lane = threadIdx.x % 32;
    for (int o = 1; o < 32; o *= 2) {
        const T y = __shfl_up_sync(kFull, v, o);
        if (lane >= o) v += y;
    }
    return v;
}

// Exclusive prefix of v over threads in thread order; total: the sum of all.
template <typename T>
__device__ T block_exclusive_sum(T v, T* slots, T& total) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const T incl = warp_inclusive_sum(v);
    const T prev = __shfl_up_sync(kFull, incl, 1);
    __syncthreads();
    if (lane == 31) slots[warp] = incl;
    __syncthreads();
    T before = 0, all = 0;
    for (int w = 0; w < kWarps; ++w) {
        if (w < warp) before += slots[w];
        all += slots[w];
    }
    total = all;
    return before + (lane > 0 ? prev : T(0));
}

// Calls fn(i, valid, x) for every i of the row, kUnroll coalesced loads issued before use.
// The loop bounds are uniform across the block, so fn may use warp collectives.
template <typename Load, typename Fn>
__device__ void for_each(int vocab, const Load& load, const Fn& fn) {
    for (int base = 0; base < vocab; base += kThreads * kUnroll) {
        float x[kUnroll];
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) {
            const int i = base + k * kThreads + int(threadIdx.x);
            x[k] = i < vocab ? load(i) : 0.f;
        }
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) {
            const int i = base + k * kThreads + int(threadIdx.x);
            fn(i, i < vocab, x[k]);
        }
    }
}

// A row cut into at most kMaxTiles tiles of consecutive ids, each a whole number of warp rows.
struct TileGrid {
    int len, count;
};
__device__ __forceinline__ TileGrid tile_grid(int vocab) {
    const int len = ((vocab + kMaxTiles - 1) / kMaxTiles + 31) / 32 * 32;
    return {len, (vocab + len - 1) / len};
}

// One warp's walk of ids [begin, end): the first whose running sum of value(i) (positive values
// only) exceeds rem; else the last with a positive value; else `none`. Every lane returns it.
template <typename Value>
__device__ int walk_tile(int begin, int end, const Value& value, double rem, int none) {
    const int lane = threadIdx.x % 32;
    double carry = 0.0;
    int last_positive = none;
    for (int base = begin; base < end; base += 32) {
        const int i = base + lane;
        const double v = i < end ? value(i) : 0.0;
        const double incl = warp_inclusive_sum(v);
        const unsigned hit = __ballot_sync(kFull, v > 0.0 && carry + incl > rem);
        if (hit) return base + __ffs(hit) - 1;
        const unsigned positive = __ballot_sync(kFull, v > 0.0);
        if (positive) last_positive = base + 31 - __clz(int(positive));
        carry += __shfl_sync(kFull, incl, 31);
    }
    return last_positive;
}

}  // namespace miniinfer::cuda::sampling_detail
