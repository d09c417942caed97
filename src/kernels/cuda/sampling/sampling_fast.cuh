// The sampling kernel's fast paths (see sampling.cu's top): a row at a temperature alone in one
// pass over its logits (sample_plain_row), a row with a top_k of at most kMaxTopK in two
// (sample_top_k_row). Device code only, included by sampling.cu.
#pragma once

#include "kernels/cuda/sampling/sampling.cuh"
#include "kernels/cuda/sampling/sampling.h"
#include "layers/philox.h"

namespace miniinfer::cuda::sampling_detail {

// Values a lane holds of one tile in sample_plain_row: tiles of up to 32 * 16 ids, so rows of
// up to kMaxTiles * 512 = 262,144 ids take the one-pass path.
constexpr int kPlainPerLane = 16;
constexpr int kPlainMaxVocab = kMaxTiles * 32 * kPlainPerLane;

// Whether the row is plain: the weights exp((x - max) / T) of every token decide it alone
// (penalties, applied before, included).
__device__ inline bool is_plain(const RowSampling& p, int vocab, int num_top) {
    const bool cuts = (p.top_k > 0 && p.top_k < vocab) || p.top_p < 1.f || p.min_p > 0.f;
    return num_top == 0 && vocab <= kPlainMaxVocab && (p.temperature == 0.f || !cuts);
}

// The row's tiles (see the top of the file): every tile's maximum, first argmax, f32 exp sum
// and, with inv_t > 0, f64 weight sum relative to its maximum into the scratch; returns the
// row's maximum and first argmax and writes the log-softmax normaliser.
__device__ inline ArgMax row_tiles(const float* x_row, int vocab, double inv_t,
                                   LogSoftmax& log_softmax, Scratch& s) {
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
__device__ inline int sample_plain_row(const float* x_row, int vocab, const RowSampling& p,
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
__device__ inline bool is_small_top_k(const RowSampling& p, int vocab, int num_top) {
    return num_top == 0 && vocab <= kPlainMaxVocab && p.temperature != 0.f && p.top_k > 0 &&
           p.top_k <= kMaxTopK && p.top_k < vocab;
}

// A row with a small top_k in two passes: row_tiles, then the tokens at or above a threshold
// that at least top_k tokens reach (the top_k-th largest tile maximum: top_k tiles hold a token
// that high) gathered as candidates, sorted (key desc, id asc) and cut by top_k, min_p and
// top_p exactly as the CPU does, then drawn in id order: the CPU's own sums in its own order.
// Returns -1, before any output, when more than kMaxCandidates tokens reach the threshold (many
// equal logits): the caller then takes the general path.
__device__ inline int sample_top_k_row(const float* x_row, int vocab, const RowSampling& p,
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

}  // namespace miniinfer::cuda::sampling_detail
