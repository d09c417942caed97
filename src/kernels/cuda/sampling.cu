// Sampling: one block per row, the CPU reference sampler's decisions (layers/sampler.cpp).
//
// The CPU sorts; we never do. Every token is ranked by (penalised logit desc, id asc), which is
// also the order of its weight w = exp((x - max) / T): exp is monotone, so a float key of x
// decides top_k and top_p exactly, ties included. A cut in that order is found by a radix
// select over the 32-bit order-preserving key of x (digits of 11, 11, 10 bits): each level is
// one pass over the row building a shared-memory histogram of counts (top_k) or double weights
// (top_p), restricted to the bucket chosen so far. Equal keys at the cut are split by id with
// one extra pass. The draw then walks the kept set in id order, as the CPU does: warps own
// contiguous id ranges, so a block-wide prefix over warp sums finds the warp, and that warp's
// scan finds the token. Weights are doubles, as on the CPU, so the only differences are the
// order of floating-point sums (relative 1e-16) at a top_p or draw boundary.
//
// The row stays in global memory (151,936 floats do not fit in shared memory) and each pass
// re-reads it. Penalised rows arrive penalised (penalties.cu); their logprobs come from the
// raw logits, which the runner still holds in bf16.
//
// A plain row (temperature alone: no top_k, top_p, min_p or top logprobs, the balanced
// workload's rows) takes one pass instead of two (sample_plain_row): warps own tiles
// of consecutive ids held in registers, and each tile keeps its own maximum m_t, the f32
// log-sum-exp and the f64 weight sum relative to m_t. Once the row's maximum M is known, the
// tile sums are scaled by exp((m_t - M) / T) and the draw walks one tile with the CPU's own
// weights exp((x - M) / T). The scaling moves a sum by about 1e-16 relative, as the order of
// the sums does.
//
// A row with a small top_k (at most 256: Qwen3's generation_config.json asks for 20, with top_p
// 0.95), with or without top_p and min_p, takes two passes (sample_top_k_row): the same tiles,
// then every token at or above the top_k-th largest tile maximum (at least top_k tokens reach
// it) gathered into shared memory, sorted, cut by top_k, min_p and top_p and drawn in id order
// with the CPU's own sums in the CPU's own order. Too many candidates (many equal logits) send the
// row down the general path. A penalised row on either path takes one more pass, over its raw
// logits, for its logprob.
#include "kernels/cuda/sampling.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "core/env.h"
#include "kernels/cuda/check_tensor.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/reduce.cuh"
#include "layers/philox.h"

namespace miniinfer::cuda {
namespace {

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

// A prefix of the order (key desc, id asc): everything above `key`, and the tokens at `key`
// up to id `last_id`.
struct Cut {
    uint32_t key;
    int32_t last_id;
    __device__ bool keeps(uint32_t k, int id) const {
        return k > key || (k == key && id <= last_id);
    }
};
__device__ __forceinline__ Cut keep_all() {
    return {0u, INT_MAX};
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

__device__ ArgMax combine(ArgMax a, ArgMax b) {
    return (b.value > a.value || (b.value == a.value && b.idx < a.idx)) ? b : a;
}
__device__ LogSumExp combine(LogSumExp a, LogSumExp b) {
    if (a.m == neg_inf()) return b;
    if (b.m == neg_inf()) return a;
    const float m = fmaxf(a.m, b.m);
    return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

__device__ ArgMax shfl_xor(ArgMax v, int o) {
    return {__shfl_xor_sync(kFull, v.value, o), __shfl_xor_sync(kFull, v.idx, o)};
}
__device__ LogSumExp shfl_xor(LogSumExp v, int o) {
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

// Warp-aggregated histogram add: lanes with the same digit add once, so the few hot buckets
// of a logit distribution do not serialise a warp's shared-memory atomics.
template <bool kMass>
__device__ void hist_add(bool active, uint32_t digit, double w, Scratch& s) {
    const unsigned any = __ballot_sync(kFull, active);
    if (any == 0) return;
    const int lane = threadIdx.x % 32;
    const unsigned peers = __match_any_sync(kFull, active ? digit : 0xffffffffu);
    const bool leader = active && lane == __ffs(peers) - 1;
    if constexpr (kMass) {
        // Each lane sums its group, one member per step: as many steps as the largest group.
        const int group = __popc(peers);
        const int max_group = int(__reduce_max_sync(kFull, active ? unsigned(group) : 0u));
        unsigned rest = peers & (peers - 1);  // the group without its leader
        double sum = w;
        for (int k = 1; k < max_group; ++k) {
            const bool has = rest != 0;
            const int src = has ? __ffs(rest) - 1 : lane;
            rest &= rest - 1;
            const double wk = __shfl_sync(kFull, w, src);
            if (has) sum += wk;
        }
        if (leader) atomicAdd(&s.mass[digit], sum);
    }
    if (leader) atomicAdd(&s.count[digit], uint32_t(__popc(peers)));
}

// Over hist[0, num_bins) (higher digit = larger key), the largest bin whose total with all
// bins above it reaches target (or, at level 0 with fraction > 0, fraction * the total).
// Returns the bin; above = the total of the bins above it. Falls back to the lowest non-empty
// bin if rounding keeps the target out of reach.
template <typename T>
__device__ int find_cut_bin(const T* hist, int num_bins, T target, double fraction, T* slots,
                            T* above_slot, Scratch& s, T& above, T& total) {
    const int tid = threadIdx.x;
    T v[kBinsPerThread];
    T run = 0;
#pragma unroll
    for (int j = 0; j < kBinsPerThread; ++j) {
        const int r = tid * kBinsPerThread + j;  // r = 0 is the top bin
        v[j] = r < num_bins ? hist[num_bins - 1 - r] : T(0);
        run += v[j];
    }
    const T excl = block_exclusive_sum(run, slots, total);
    if (fraction > 0.0) target = T(fraction * double(total));
    if (tid == 0) s.found_r = INT_MAX, s.last_r = -1;
    __syncthreads();
    T cum = excl;
    int found = INT_MAX, last = -1;
#pragma unroll
    for (int j = 0; j < kBinsPerThread; ++j) {
        cum += v[j];
        if (v[j] > T(0)) {
            last = tid * kBinsPerThread + j;
            if (found == INT_MAX && cum >= target) found = last;
        }
    }
    if (found != INT_MAX) atomicMin(&s.found_r, found);
    if (last >= 0) atomicMax(&s.last_r, last);
    __syncthreads();
    const int r = s.found_r != INT_MAX ? s.found_r : max(s.last_r, 0);  // 0: only with NaNs
    if (r / kBinsPerThread == tid) {
        T c = excl;
        for (int j = 0; j < r % kBinsPerThread; ++j) c += v[j];
        *above_slot = c;
    }
    __syncthreads();
    above = *above_slot;
    return num_bins - 1 - r;
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

// The first token in id order at which the running sum of value_of(i, load(i)) >= 0 exceeds
// the target: fraction * (the total) when fraction >= 0, else absolute_target. The last token
// with a positive value if rounding never gets there. Tiles of consecutive ids: warps sum whole
// tiles, one thread per tile scans the sums, and one warp walks the tile that holds the crossing.
template <typename Load, typename Value>
__device__ int first_crossing(int vocab, const Load& load, const Value& value_of, double fraction,
                              double absolute_target, Scratch& s) {
    const auto value = [&](int i) { return value_of(i, load(i)); };
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const auto [tile_len, num_tiles] = tile_grid(vocab);
    __syncthreads();  // the slots below may still be read from a previous call
    if (threadIdx.x == 0) s.pick_tile = INT_MAX, s.result = -1;
    for (int t = warp; t < num_tiles; t += kWarps) {
        const int end = min((t + 1) * tile_len, vocab);
        double sum = 0.0;
        int last = -1;
        // kUnroll of the lane's logits loaded at a time, so that the loads are in flight
        // together (one at a time, a warp waited on each in turn), then their values summed in
        // the same order as one by one.
        for (int i0 = t * tile_len + lane; i0 < end; i0 += 32 * kUnroll) {
            float x[kUnroll];
#pragma unroll
            for (int k = 0; k < kUnroll; ++k) {
                const int i = i0 + 32 * k;
                x[k] = i < end ? load(i) : 0.f;
            }
#pragma unroll
            for (int k = 0; k < kUnroll; ++k) {
                const int i = i0 + 32 * k;
                const double v = i < end ? value_of(i, x[k]) : 0.0;
                if (v > 0.0) sum += v, last = i;
            }
        }
        sum = warp_sum(sum);
        last = warp_max(last);
        if (lane == 0) s.tile_sum[t] = sum, s.tile_last[t] = last;
    }
    __syncthreads();
    const int t = threadIdx.x;
    const double v = t < num_tiles ? s.tile_sum[t] : 0.0;
    double total;
    const double excl = block_exclusive_sum(v, s.d_slots, total);
    const double target = fraction >= 0.0 ? fraction * total : absolute_target;
    if (v > 0.0 && excl + v > target) atomicMin(&s.pick_tile, t);
    if (t < num_tiles && s.tile_last[t] >= 0) atomicMax(&s.result, s.tile_last[t]);
    __syncthreads();
    const int pick = s.pick_tile;
    if (pick == INT_MAX) return s.result;  // uniform
    if (t == pick) s.rem_d = target - excl;
    __syncthreads();
    if (warp == 0) {
        const int found = walk_tile(pick * tile_len, min((pick + 1) * tile_len, vocab), value,
                                    s.rem_d, s.tile_last[pick]);
        __syncwarp();
        if (lane == 0) s.result = found;
    }
    __syncthreads();
    return s.result;
}

// The cut of the order (key desc, id asc) over tokens with in_set(i, key) where the running
// count reaches top_count (kMass false: top_k), or the running weight reaches top_fraction of
// the set's total weight (kMass: top_p). keep_all() when the whole set fits in top_count.
template <bool kMass, typename Load, typename InSet, typename Weight>
__device__ Cut select_cut(int vocab, const Load& load, const InSet& in_set, const Weight& weight,
                          uint32_t top_count, double top_fraction, Scratch& s) {
    uint32_t prefix = 0, prefix_mask = 0;
    uint32_t target_count = top_count;
    double target_mass = 0.0;
    int shift = 32, bin = 0;
    for (int level = 0; level < 3; ++level) {
        const int bits = level < 2 ? 11 : 10;
        const int num_bins = 1 << bits;
        shift -= bits;
        __syncthreads();  // the previous level's histogram may still be read
        for (int b = threadIdx.x; b < num_bins; b += kThreads) {
            s.count[b] = 0;
            if (kMass) s.mass[b] = 0.0;
        }
        __syncthreads();
        for_each(vocab, load, [&](int i, bool valid, float x) {
            const uint32_t key = order_key(x);
            const bool active = valid && (key & prefix_mask) == prefix && in_set(i, key);
            const double w = (kMass && active) ? weight(x) : 0.0;
            hist_add<kMass>(active, (key >> shift) & uint32_t(num_bins - 1), w, s);
        });
        __syncthreads();
        if constexpr (kMass) {
            double above, total;
            bin =
                find_cut_bin<double>(s.mass, num_bins, target_mass, level == 0 ? top_fraction : 0.0,
                                     s.d_slots, &s.above_d, s, above, total);
            if (level == 0) target_mass = top_fraction * total;
            target_mass -= above;
        } else {
            uint32_t above, total;
            bin = find_cut_bin<uint32_t>(s.count, num_bins, target_count, 0.0, s.u_slots,
                                         &s.above_u, s, above, total);
            if (level == 0 && total <= top_count) return keep_all();
            target_count -= above;
        }
        prefix |= uint32_t(bin) << shift;
        prefix_mask |= uint32_t(num_bins - 1) << shift;
    }
    // Tokens with key == prefix all have the same weight; keep the first `need` of them by id.
    const int num_equal = int(s.count[bin]);
    int need;
    if constexpr (kMass) {
        const double w = s.mass[bin] / num_equal;
        need = w > 0.0 ? int(ceil(target_mass / w)) : num_equal;
    } else {
        need = int(target_count);
    }
    need = max(1, min(need, num_equal));
    if (need == num_equal) return {prefix, INT_MAX};
    // The need-th of them in id order: the first token where their running count exceeds need - 1.
    const int last_id = first_crossing(
        vocab, load,
        [&](int i, float x) {
            const uint32_t key = order_key(x);
            return key == prefix && in_set(i, key) ? 1.0 : 0.0;
        },
        -1.0, double(need - 1), s);
    return {prefix, last_id};
}

// The inverse CDF in id order over the kept tokens, as the CPU walks it: the first kept token
// whose running weight exceeds u * total; the last kept token if rounding never gets there.
template <typename Load, typename Kept, typename Weight>
__device__ int draw(int vocab, const Load& load, const Kept& kept, const Weight& weight, float u,
                    Scratch& s) {
    const auto value_of = [&](int i, float x) { return kept(i, x) ? weight(x) : 0.0; };
    return first_crossing(vocab, load, value_of, double(u), 0.0, s);
}

struct SampleArgs {
    const float* logits;  // [rows, vocab]
    int vocab;
    const RowSampling* params;  // [rows]
    const void* raw_logits;     // [rows, vocab] bf16 or f32, or null
    bool raw_bf16;
    int max_logprobs;
    int32_t* tokens;      // [rows]
    float* logprobs;      // [rows]
    int32_t* top_ids;     // [rows, max_logprobs] or null
    float* top_logprobs;  // [rows, max_logprobs] or null
    bool one_pass;        // plain rows through sample_plain_row (MINIINFER_SAMPLE_ONE_PASS=0: not)
};

// The row's num_top best raw logprobs, best first, ties by lower id.
template <typename Load>
__device__ void write_top_logprobs(const SampleArgs& a, const Load& load, int64_t row, int num_top,
                                   LogSoftmax log_softmax, Scratch& s) {
    const int vocab = a.vocab;
    const auto all = [](int, uint32_t) { return true; };
    const auto no_weight = [](float) { return 0.0; };
    const Cut cut = select_cut<false>(vocab, load, all, no_weight, uint32_t(num_top), 0.0, s);
    if (threadIdx.x == 0) s.num_gathered = 0;
    __syncthreads();
    for_each(vocab, load, [&](int i, bool valid, float x) {
        const uint32_t key = order_key(x);
        if (valid && cut.keeps(key, i)) {
            const int slot = atomicAdd(&s.num_gathered, 1);
            if (slot < kMaxTopLogprobs) s.gather_id[slot] = i, s.gather_key[slot] = key;
        }
    });
    __syncthreads();
    const int n = min(s.num_gathered, num_top);
    const int j = threadIdx.x;
    if (j < n) {
        const uint32_t key = s.gather_key[j];
        const int id = s.gather_id[j];
        int rank = 0;
        for (int m = 0; m < n; ++m)
            rank += s.gather_key[m] > key || (s.gather_key[m] == key && s.gather_id[m] < id);
        a.top_ids[row * a.max_logprobs + rank] = id;
        a.top_logprobs[row * a.max_logprobs + rank] = log_softmax(key_value(key));
    }
}

// Values a lane holds of one tile in sample_plain_row: tiles of up to 32 * 16 ids, so rows of
// up to kMaxTiles * 512 = 262,144 ids take the one-pass path.
constexpr int kPlainPerLane = 16;
constexpr int kPlainMaxVocab = kMaxTiles * 32 * kPlainPerLane;

// Whether the row is plain: the weights exp((x - max) / T) of every token decide it alone
// (penalties, applied before, included).
__device__ bool is_plain(const RowSampling& p, int vocab, int num_top) {
    const bool cuts = (p.top_k > 0 && p.top_k < vocab) || p.top_p < 1.f || p.min_p > 0.f;
    return num_top == 0 && vocab <= kPlainMaxVocab && (p.temperature == 0.f || !cuts);
}

// The row's tiles (see the top of the file): every tile's maximum, first argmax, f32 exp sum
// and, with inv_t > 0, f64 weight sum relative to its maximum into the scratch; returns the
// row's maximum and first argmax and writes the log-softmax normaliser.
__device__ ArgMax row_tiles(const float* x_row, int vocab, double inv_t, LogSoftmax& log_softmax,
                            Scratch& s) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const auto [tile_len, num_tiles] = tile_grid(vocab);
    const int per_lane = tile_len / 32;
    for (int t = warp; t < num_tiles; t += kWarps) {
        const int begin = t * tile_len;
        float x[kPlainPerLane];
        float m = neg_inf();
        int arg = INT_MAX;
#pragma unroll
        for (int k = 0; k < kPlainPerLane; ++k) {
            const int i = begin + 32 * k + lane;
            x[k] = k < per_lane && i < vocab ? __ldg(x_row + i) : neg_inf();
            if (x[k] > m) m = x[k], arg = i;  // ids rise with k: the first of equal values
        }
        ArgMax best = {m, arg};
        for (int o = 16; o > 0; o /= 2) best = combine(best, shfl_xor(best, o));
        float exp_sum = 0.f;
        double weight_sum = 0.0;
        if (best.value != neg_inf()) {
#pragma unroll
            for (int k = 0; k < kPlainPerLane; ++k) {
                if (x[k] == neg_inf()) continue;
                exp_sum += expf(x[k] - best.value);
                if (inv_t > 0.0) weight_sum += exp((double(x[k]) - double(best.value)) * inv_t);
            }
        }
        exp_sum = warp_sum(exp_sum);
        weight_sum = warp_sum(weight_sum);
        if (lane == 0) {
            s.tile_max[t] = best.value;
            s.tile_last[t] = best.idx;  // the tile's argmax
            s.tile_exp_sum[t] = exp_sum;
            s.tile_sum[t] = weight_sum;
        }
    }
    __syncthreads();
    // The row's maximum and first argmax: tiles in id order, ties to the lower id.
    const int t = threadIdx.x;
    ArgMax best =
        t < num_tiles ? ArgMax{s.tile_max[t], s.tile_last[t]} : ArgMax{neg_inf(), INT_MAX};
    best = block_combine(best, s.argmax_slots);
    const float tile_max = t < num_tiles ? s.tile_max[t] : neg_inf();
    float exp_sum = tile_max != neg_inf() ? s.tile_exp_sum[t] * expf(tile_max - best.value) : 0.f;
    for (int o = 16; o > 0; o /= 2) exp_sum += __shfl_xor_sync(kFull, exp_sum, o);
    __syncthreads();  // slots may still be read by block_combine
    if (lane == 0) s.u_slots[warp] = __float_as_uint(exp_sum);
    __syncthreads();
    float row_exp_sum = 0.f;
    for (int w = 0; w < kWarps; ++w) row_exp_sum += __uint_as_float(s.u_slots[w]);
    log_softmax = {best.value, logf(row_exp_sum)};
    return best;
}

// A plain row in one pass (see the top of the file). Returns the token; writes the
// log-softmax normaliser for its logprob.
__device__ int sample_plain_row(const float* x_row, int vocab, const RowSampling& p,
                                LogSoftmax& log_softmax, Scratch& s) {
    const auto [tile_len, num_tiles] = tile_grid(vocab);
    const bool sampled = p.temperature != 0.f;
    const double inv_t = sampled ? 1.0 / double(p.temperature) : 0.0;
    const ArgMax best = row_tiles(x_row, vocab, inv_t, log_softmax, s);
    const float max_logit = best.value;
    const int t = threadIdx.x;
    const float tile_max = t < num_tiles ? s.tile_max[t] : neg_inf();
    const bool live = tile_max != neg_inf();
    if (!sampled) return best.idx;

    // The draw: the tile where the running weight first exceeds u * total, then its token.
    const double v =
        live ? s.tile_sum[t] * exp((double(tile_max) - double(max_logit)) * inv_t) : 0.0;
    double total;
    const double excl = block_exclusive_sum(v, s.d_slots, total);
    const double target = double(philox_uniform(p.seed, uint64_t(p.step))) * total;
    if (t == 0) s.pick_tile = INT_MAX;
    __syncthreads();
    if (v > 0.0 && excl + v > target) atomicMin(&s.pick_tile, t);
    __syncthreads();
    int pick = s.pick_tile;
    // Rounding kept the target out of reach: the last tile with weight, walked to its end.
    if (pick == INT_MAX) {
        __syncthreads();  // every thread has read pick_tile
        if (t == 0) s.pick_tile = -1;
        __syncthreads();
        if (v > 0.0) atomicMax(&s.pick_tile, t);
        __syncthreads();
        pick = s.pick_tile;
        if (pick < 0) return best.idx;  // no weight anywhere: only with NaN logits
    }
    if (t == pick) s.rem_d = excl + v > target ? target - excl : INFINITY;
    __syncthreads();
    if (threadIdx.x < 32) {
        const double max_d = double(max_logit), temperature = p.temperature;
        // The CPU's weight of token i, bit for bit. Without a positive one in the tile: the
        // maximum, whose weight is 1.
        const auto weight = [&](int i) {
            return exp((double(__ldg(x_row + i)) - max_d) / temperature);
        };
        const int found = walk_tile(pick * tile_len, min((pick + 1) * tile_len, vocab), weight,
                                    s.rem_d, best.idx);
        if (threadIdx.x == 0) s.result = found;
    }
    __syncthreads();
    return s.result;
}

// Whether the row takes sample_top_k_row: a top_k of at most kMaxTopK (Qwen3's and Qwen2.5's
// generation_config.json ask for 20), with or without top_p, min_p and penalties; no top logprobs.
__device__ bool is_small_top_k(const RowSampling& p, int vocab, int num_top) {
    return num_top == 0 && vocab <= kPlainMaxVocab && p.temperature != 0.f && p.top_k > 0 &&
           p.top_k <= kMaxTopK && p.top_k < vocab;
}

// A row with a small top_k in two passes: row_tiles, then the tokens at or above a threshold
// that at least top_k tokens reach (the top_k-th largest tile maximum: top_k tiles hold a token
// that high) gathered as candidates, sorted (key desc, id asc) and cut by top_k, min_p and
// top_p exactly as the CPU does, then drawn in id order: the CPU's own sums in its own order.
// Returns -1, before any output, when more than kMaxCandidates tokens reach the threshold (many
// equal logits): the caller then takes the general path.
__device__ int sample_top_k_row(const float* x_row, int vocab, const RowSampling& p,
                                LogSoftmax& log_softmax, Scratch& s) {
    const int num_tiles = tile_grid(vocab).count;
    const int top_k = p.top_k;
    if (top_k > num_tiles) return -1;           // uniform
    if (threadIdx.x == 0) s.threshold_key = 0;  // every token, should NaNs leave no rank top_k - 1
    const ArgMax best = row_tiles(x_row, vocab, 0.0, log_softmax, s);
    const int t = threadIdx.x;
    if (t == 0) s.num_candidates = 0, s.num_kept = top_k;
    if (t < num_tiles) {  // the tile maximum of rank top_k - 1 (value desc, tile asc)
        const float m = s.tile_max[t];
        int rank = 0;
        for (int u = 0; u < num_tiles; ++u) {
            const float mu = s.tile_max[u];
            rank += mu > m || (mu == m && u < t);
        }
        if (rank == top_k - 1) s.threshold_key = order_key(m);
    }
    __syncthreads();
    const uint32_t threshold = s.threshold_key;
    for_each(
        vocab, [x_row](int i) { return __ldg(x_row + i); },
        [&](int i, bool valid, float x) {
            const uint32_t key = order_key(x);
            if (valid && key >= threshold) {
                const int slot = atomicAdd(&s.num_candidates, 1);
                if (slot < kMaxCandidates)
                    s.candidates[slot] = uint64_t(key) << 32 | uint32_t(~uint32_t(i));
            }
        });
    __syncthreads();
    const int num_candidates = s.num_candidates;
    if (num_candidates > kMaxCandidates) return -1;  // uniform
    // Bitonic sort, descending, over a power of two padded with zeros (below every candidate).
    int size = 1;
    while (size < num_candidates) size *= 2;
    for (int i = num_candidates + t; i < size; i += kThreads) s.candidates[i] = 0;
    __syncthreads();
    for (int k = 2; k <= size; k *= 2) {
        for (int j = k / 2; j > 0; j /= 2) {
            for (int i = t; i < size; i += kThreads) {
                const int l = i ^ j;
                if (l > i) {
                    const uint64_t a = s.candidates[i], b = s.candidates[l];
                    if ((a < b) == ((i & k) == 0)) s.candidates[i] = b, s.candidates[l] = a;
                }
            }
            __syncthreads();
        }
    }
    // The CPU's weights of the best top_k; the kept set ends at the first that is 0 or under min_p.
    const double max_logit = best.value, temperature = p.temperature;
    const int first = min(top_k, num_candidates);
    if (t < first) {
        const double w =
            exp((double(key_value(uint32_t(s.candidates[t] >> 32))) - max_logit) / temperature);
        s.tile_sum[t] = w;
        if (!(w > 0.0) || w < double(p.min_p)) atomicMin(&s.num_kept, t);
    }
    __syncthreads();
    if (t == 0) {
        int keep = min(s.num_kept, first);
        if (p.top_p < 1.f) {  // the CPU's top_p: sums in the sorted order
            double total = 0.0;
            for (int j = 0; j < keep; ++j) total += s.tile_sum[j];
            double cum = 0.0;
            for (int j = 0; j < keep; ++j) {
                cum += s.tile_sum[j];
                if (cum >= double(p.top_p) * total) {
                    keep = j + 1;
                    break;
                }
            }
        }
        s.num_kept = keep;
    }
    __syncthreads();
    const int keep = s.num_kept;
    if (t < keep) {  // the kept set in id order
        const uint32_t id = ~uint32_t(s.candidates[t]);
        int rank = 0;
        for (int j = 0; j < keep; ++j) rank += ~uint32_t(s.candidates[j]) < id;
        s.kept_id[rank] = int32_t(id);
        s.kept_weight[rank] = s.tile_sum[t];
    }
    __syncthreads();
    if (t == 0) {  // the CPU's draw: total and walk in id order
        double total = 0.0;
        for (int j = 0; j < keep; ++j) total += s.kept_weight[j];
        const double target = double(philox_uniform(p.seed, uint64_t(p.step))) * total;
        int token = best.idx;
        double cum = 0.0;
        for (int j = 0; j < keep; ++j) {
            token = s.kept_id[j];
            cum += s.kept_weight[j];
            if (cum > target) break;
        }
        s.result = token;
    }
    __syncthreads();
    return s.result;
}

__global__ void __launch_bounds__(kThreads, 2) sample_kernel(SampleArgs a) {
    pdl_wait();
    pdl_trigger();
    __shared__ Scratch s;
    const int64_t row = blockIdx.x;
    const int vocab = a.vocab;
    const RowSampling p = a.params[row];
    const float* x_row = a.logits + row * vocab;
    const auto load = [x_row](int i) { return __ldg(x_row + i); };
    // The raw logits of a penalised row are elsewhere; otherwise they are `logits` itself.
    const bool separate_raw = p.penalised && a.raw_logits != nullptr;
    const float* raw_f32 =
        separate_raw ? static_cast<const float*>(a.raw_logits) + row * vocab : nullptr;
    const __nv_bfloat16* raw_bf16 =
        separate_raw ? static_cast<const __nv_bfloat16*>(a.raw_logits) + row * vocab : nullptr;
    const auto raw = [=](int i) {
        if (!separate_raw) return __ldg(x_row + i);
        return a.raw_bf16 ? __bfloat162float(raw_bf16[i]) : __ldg(raw_f32 + i);
    };

    const int num_top = a.max_logprobs > 0 ? min(min(p.num_logprobs, a.max_logprobs), vocab) : 0;
    for (int j = num_top + int(threadIdx.x); j < a.max_logprobs; j += kThreads) {
        a.top_ids[row * a.max_logprobs + j] = -1;
        a.top_logprobs[row * a.max_logprobs + j] = neg_inf();
    }
    if (a.one_pass) {
        LogSoftmax log_softmax;
        int token = -1;
        if (is_plain(p, vocab, num_top))
            token = sample_plain_row(x_row, vocab, p, log_softmax, s);
        else if (is_small_top_k(p, vocab, num_top))
            token = sample_top_k_row(x_row, vocab, p, log_softmax, s);
        if (token >= 0) {
            if (separate_raw) {  // a penalised row's logprob: from its raw logits, another pass
                LogSumExp lse = {neg_inf(), 0.f};
                for_each(vocab, raw, [&](int, bool valid, float x) {
                    if (valid) lse.update(x);
                });
                lse = block_combine(lse, s.lse_slots);
                log_softmax = {lse.m, logf(lse.s)};
            }
            if (threadIdx.x == 0) {
                a.tokens[row] = token;
                a.logprobs[row] = log_softmax(raw(token));
            }
            return;
        }
        __syncthreads();  // the scratch is reused below
    }

    // Raw logits: log-softmax normaliser and argmax (the greedy token when they are unpenalised).
    ArgMax best = {neg_inf(), INT_MAX};
    LogSumExp lse = {neg_inf(), 0.f};
    for_each(vocab, raw, [&](int i, bool valid, float x) {
        if (valid) best.update(x, i), lse.update(x);
    });
    best = block_combine(best, s.argmax_slots);
    lse = block_combine(lse, s.lse_slots);
    const LogSoftmax log_softmax = {lse.m, logf(lse.s)};

    if (num_top > 0) write_top_logprobs(a, raw, row, num_top, log_softmax, s);

    if (separate_raw) {  // the penalised row's own maximum
        best = {neg_inf(), INT_MAX};
        for_each(vocab, load, [&](int i, bool valid, float x) {
            if (valid) best.update(x, i);
        });
        best = block_combine(best, s.argmax_slots);
    }

    int token = best.idx;
    if (p.temperature != 0.f) {
        const double max_logit = best.value, temperature = p.temperature, min_p = p.min_p;
        const auto weight = [=](float x) { return exp((double(x) - max_logit) / temperature); };
        // The smallest key whose weight survives (w > 0, w >= min_p): 32-way search by warp 0.
        if (threadIdx.x < 32) {
            uint32_t lo = order_key(neg_inf()), hi = order_key(best.value);  // fails / passes
            while (hi - lo > 1) {
                const uint32_t probe = lo + uint32_t(uint64_t(hi - lo) * (threadIdx.x + 1) / 32);
                const double w = weight(key_value(probe));
                const unsigned pass =
                    __ballot_sync(kFull, threadIdx.x < 31 && w > 0.0 && w >= min_p);
                const int first = pass ? __ffs(pass) - 1 : 31;
                const uint32_t new_hi = first < 31 ? __shfl_sync(kFull, probe, first) : hi;
                lo = first > 0 ? __shfl_sync(kFull, probe, first - 1) : lo;
                hi = new_hi;
            }
            if (threadIdx.x == 0) s.floor_key = hi;
        }
        __syncthreads();
        const uint32_t floor_key = s.floor_key;

        Cut top_k = keep_all();
        if (p.top_k > 0 && p.top_k < vocab) {
            const auto in_base = [=](int, uint32_t key) { return key >= floor_key; };
            top_k = select_cut<false>(vocab, load, in_base, weight, uint32_t(p.top_k), 0.0, s);
        }
        const auto in_top_k = [=](int i, uint32_t key) {
            return key >= floor_key && top_k.keeps(key, i);
        };
        Cut top_p = keep_all();
        if (p.top_p < 1.f) top_p = select_cut<true>(vocab, load, in_top_k, weight, 0u, p.top_p, s);
        const auto kept = [=](int i, float x) {
            const uint32_t key = order_key(x);
            return in_top_k(i, key) && top_p.keeps(key, i);
        };
        token = draw(vocab, load, kept, weight, philox_uniform(p.seed, uint64_t(p.step)), s);
    }
    if (threadIdx.x == 0) {
        a.tokens[row] = token;
        a.logprobs[row] = log_softmax(raw(token));
    }
}

__global__ void __launch_bounds__(kThreads)
    argmax_kernel(const float* logits, int vocab, int32_t* tokens) {
    pdl_wait();
    pdl_trigger();
    __shared__ ArgMax slots[kWarps];
    const float* row = logits + int64_t(blockIdx.x) * vocab;
    ArgMax best = {neg_inf(), INT_MAX};
    for_each(
        vocab, [row](int i) { return __ldg(row + i); },
        [&](int i, bool valid, float x) {
            if (valid) best.update(x, i);
        });
    best = block_combine(best, slots);
    if (threadIdx.x == 0) tokens[blockIdx.x] = best.idx;
}

// Few rows: grid (chunks, rows), block c of row r takes ids [c * chunk_len, ...). Each block
// parks its (max, first id) in partials[r][c] and counts itself done in counts[r]; the row's
// last block (the one that counts chunks) reads every partial, writes the token and resets the
// count for the next call. The result is the single-block kernel's: "greater, or equal with a
// lower id" picks the same winner in any order.
constexpr int kArgmaxMaxChunks = 32;

__global__ void __launch_bounds__(kThreads)
    argmax_split_kernel(const float* logits, int vocab, int chunk_len, ArgMax* partials,
                        unsigned* counts, int32_t* tokens) {
    pdl_wait();
    pdl_trigger();
    __shared__ ArgMax slots[kWarps];
    __shared__ bool last;
    const int row = int(blockIdx.y), chunk = int(blockIdx.x), chunks = int(gridDim.x);
    const int begin = chunk * chunk_len, len = max(0, min(chunk_len, vocab - begin));
    const float* slice = logits + int64_t(row) * vocab + begin;
    ArgMax best = {neg_inf(), INT_MAX};
    for_each(
        len, [slice](int i) { return __ldg(slice + i); },
        [&](int i, bool valid, float x) {
            if (valid) best.update(x, begin + i);
        });
    best = block_combine(best, slots);
    ArgMax* row_partials = partials + int64_t(row) * kArgmaxMaxChunks;
    if (threadIdx.x == 0) {
        row_partials[chunk] = best;
        __threadfence();  // the partial before the count that announces it
        last = atomicAdd(&counts[row], 1u) == unsigned(chunks - 1);
    }
    __syncthreads();
    if (!last || threadIdx.x != 0) return;
    __threadfence();
    ArgMax r = {neg_inf(), INT_MAX};
    for (int c = 0; c < chunks; ++c)  // L2 reads: other blocks wrote them
        r.update(__ldcg(&row_partials[c].value), __ldcg(&row_partials[c].idx));
    tokens[row] = r.idx;
    counts[row] = 0;
}

}  // namespace

size_t argmax_workspace_bytes(int64_t rows) {
    const int64_t split_rows = std::min<int64_t>(rows, kArgmaxSplitRows);
    return size_t(split_rows) * (kArgmaxMaxChunks * sizeof(ArgMax) + sizeof(unsigned));
}

size_t sampling_workspace_bytes(int64_t, int64_t) {
    return 0;
}

void sample(const Tensor& logits, const Tensor& rows_params, const Tensor* raw_logits,
            int64_t max_logprobs, Tensor& tokens, Tensor& logprobs, Tensor* top_ids,
            Tensor* top_logprobs, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    (void)workspace;
    MI_LAUNCH_CHECK(is_cuda_tensor(logits, DType::kF32) && logits.ndim() == 2,
                    "sample: logits must be a contiguous [rows, vocab] f32 CUDA tensor");
    const int64_t rows = logits.size(0), vocab = logits.size(1);
    MI_LAUNCH_CHECK(vocab > 0 && vocab < INT_MAX, "sample: vocab must be in [1, 2^31)");
    MI_LAUNCH_CHECK(workspace_bytes >= sampling_workspace_bytes(rows, vocab),
                    "sample: workspace smaller than sampling_workspace_bytes()");
    MI_LAUNCH_CHECK(rows_params.device() == Device::kCUDA && rows_params.is_contiguous() &&
                        rows_params.nbytes() == size_t(rows) * sizeof(RowSampling),
                    "sample: rows_params must hold rows RowSampling structs on the GPU");
    if (raw_logits)
        MI_LAUNCH_CHECK((is_cuda_tensor(*raw_logits, DType::kBF16) ||
                         is_cuda_tensor(*raw_logits, DType::kF32)) &&
                            raw_logits->shape() == logits.shape(),
                        "sample: raw_logits must be [rows, vocab] bf16 or f32 CUDA");
    MI_LAUNCH_CHECK(is_cuda_tensor(tokens, DType::kI32) && tokens.numel() == rows,
                    "sample: tokens must be [rows] i32 CUDA");
    MI_LAUNCH_CHECK(is_cuda_tensor(logprobs, DType::kF32) && logprobs.numel() == rows,
                    "sample: logprobs must be [rows] f32 CUDA");
    MI_LAUNCH_CHECK(max_logprobs >= 0 && max_logprobs <= kMaxTopLogprobs,
                    "sample: max_logprobs must be in [0, 32]");
    if (max_logprobs > 0) {
        MI_LAUNCH_CHECK(top_ids && is_cuda_tensor(*top_ids, DType::kI32) &&
                            top_ids->numel() == rows * max_logprobs,
                        "sample: top_ids must be [rows, max_logprobs] i32 CUDA");
        MI_LAUNCH_CHECK(top_logprobs && is_cuda_tensor(*top_logprobs, DType::kF32) &&
                            top_logprobs->numel() == rows * max_logprobs,
                        "sample: top_logprobs must be [rows, max_logprobs] f32 CUDA");
    }
    if (rows == 0) return;
    static const bool one_pass = env_int("MINIINFER_SAMPLE_ONE_PASS", 1) != 0;
    const SampleArgs args = {
        logits.data<float>(),
        int(vocab),
        static_cast<const RowSampling*>(rows_params.raw()),
        raw_logits ? raw_logits->raw() : nullptr,
        raw_logits && raw_logits->dtype() == DType::kBF16,
        int(max_logprobs),
        tokens.data<int32_t>(),
        logprobs.data<float>(),
        max_logprobs > 0 ? top_ids->data<int32_t>() : nullptr,
        max_logprobs > 0 ? top_logprobs->data<float>() : nullptr,
        one_pass,
    };
    launch_kernel(sample_kernel, unsigned(rows), kThreads, 0, stream, args);
    MI_CUDA_CHECK(cudaGetLastError());
}

void argmax(const Tensor& logits, Tensor& tokens, cudaStream_t stream, void* workspace,
            size_t workspace_bytes) {
    MI_LAUNCH_CHECK(is_cuda_tensor(logits, DType::kF32) && logits.ndim() == 2,
                    "argmax: logits must be a contiguous [rows, vocab] f32 CUDA tensor");
    const int64_t rows = logits.size(0), vocab = logits.size(1);
    MI_LAUNCH_CHECK(vocab > 0 && vocab < INT_MAX, "argmax: vocab must be in [1, 2^31)");
    MI_LAUNCH_CHECK(is_cuda_tensor(tokens, DType::kI32) && tokens.numel() == rows,
                    "argmax: tokens must be [rows] i32 CUDA");
    if (rows == 0) return;
    if (workspace && rows < kArgmaxSplitRows && workspace_bytes >= argmax_workspace_bytes(rows)) {
        // About two blocks an SM across the rows, each at least one pass of the block's loads.
        constexpr int64_t kMinChunk = int64_t(kThreads) * kUnroll;
        static const int64_t blocks_wanted = 2 * int64_t(sm_count());
        const int64_t chunks =
            std::clamp<int64_t>(std::min<int64_t>((blocks_wanted + rows - 1) / rows,
                                                  (vocab + kMinChunk - 1) / kMinChunk),
                                1, kArgmaxMaxChunks);
        const int64_t chunk_len = (vocab + chunks - 1) / chunks;
        auto* partials = static_cast<ArgMax*>(workspace);
        auto* counts = reinterpret_cast<unsigned*>(partials + rows * kArgmaxMaxChunks);
        launch_kernel(argmax_split_kernel, dim3(unsigned(chunks), unsigned(rows)), kThreads, 0,
                      stream, logits.data<float>(), int(vocab), int(chunk_len), partials, counts,
                      tokens.data<int32_t>());
        MI_CUDA_CHECK(cudaGetLastError());
        return;
    }
    launch_kernel(argmax_kernel, unsigned(rows), kThreads, 0, stream, logits.data<float>(),
                  int(vocab), tokens.data<int32_t>());
    MI_CUDA_CHECK(cudaGetLastError());
}

namespace {
__global__ void resolve_placeholders_kernel(int32_t* ids, int n, const int32_t* sampled) {
    pdl_wait();
    pdl_trigger();
    const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n && ids[i] < 0) ids[i] = sampled[-(ids[i] + 1)];
}
}  // namespace

void resolve_placeholders(Tensor& ids, const Tensor& sampled, cudaStream_t stream) {
    MI_LAUNCH_CHECK(is_cuda_tensor(ids, DType::kI32) && ids.ndim() == 1,
                    "resolve_placeholders: ids must be [n] i32 CUDA");
    MI_LAUNCH_CHECK(is_cuda_tensor(sampled, DType::kI32) && sampled.ndim() == 1,
                    "resolve_placeholders: sampled must be [rows] i32 CUDA");
    const int64_t n = ids.numel();
    if (n == 0) return;
    constexpr int kBlock = 256;
    launch_kernel(resolve_placeholders_kernel, unsigned((n + kBlock - 1) / kBlock), kBlock, 0,
                  stream, ids.data<int32_t>(), int(n), sampled.data<int32_t>());
    MI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace miniinfer::cuda
