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
//
// Files: this one holds the general path (radix selects, first_crossing), the kernel and its
// launcher; sampling_fast.cuh the two fast paths; sampling.cuh the pieces all share (keys,
// reductions, the scratch, row tiles); argmax.cu the greedy kernels.
#include "kernels/cuda/sampling/sampling.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "kernels/cuda/primitives/check_tensor.h"
#include "kernels/cuda/primitives/launch.cuh"
#include "kernels/cuda/primitives/reduce.cuh"
#include "kernels/cuda/sampling/sampling.cuh"
#include "kernels/cuda/sampling/sampling_fast.cuh"
#include "layers/philox.h"

namespace miniinfer::cuda {
namespace {

using namespace sampling_detail;

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
    // Temperature-only and small-top_k rows: one or two passes (bench/RESULTS.md#sample-one-pass).
    {
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

}  // namespace

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
    };
    launch_kernel(sample_kernel, unsigned(rows), kThreads, 0, stream, args);
    MI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace miniinfer::cuda
