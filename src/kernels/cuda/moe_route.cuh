// One token's routing for one warp (moe_routing.h: moe_route's contract and arithmetic): the
// softmax over E logits in fp32, the top_k experts by logit (ties to the lower expert id), and
// their weights. Shared by moe_route_kernel and the router GEMV that routes in its last block
// (gemv.h: gemv_rms_norm_route).
#pragma once

#include <cuda_bf16.h>

#include <climits>
#include <cstdint>

#include "kernels/cuda/reduce.cuh"

namespace miniinfer::cuda {

// row: [num_experts] bf16 logits (read through L2: another block may have just written them);
// ids, weights: [top_k], written by lanes 0 .. top_k - 1. Expert e lives in lane e % 32,
// register e / 32 (kPerLane >= num_experts / 32), so a warp's loads of one register are 32
// consecutive logits. Every lane of the warp calls it.
template <int kPerLane>
__device__ __forceinline__ void route_token(const __nv_bfloat16* row, int num_experts, int top_k,
                                            bool renormalize, int32_t* ids, float* weights) {
    const int lane = int(threadIdx.x) % 32;
    float v[kPerLane];
    float row_max = -INFINITY;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
        const int e = lane + 32 * i;
        v[i] = e < num_experts ? __bfloat162float(__ldcg(row + e)) : -INFINITY;
        row_max = fmaxf(row_max, v[i]);
    }
    row_max = warp_max(row_max);
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
        if (lane + 32 * i < num_experts) sum += expf(v[i] - row_max);
    sum = warp_sum(sum);

    // Choice j goes to lane j. Ranking by logit equals ranking by probability (exp and the
    // division by one sum are monotonic); equal logits tie to the lower expert id.
    unsigned taken = 0;  // bit i: expert lane + 32 i already chosen
    int my_id = 0;
    float my_exp = 0.f;
    for (int j = 0; j < top_k; ++j) {
        float best = -INFINITY;
        int best_id = INT_MAX;  // INT_MAX: this lane has no candidate left
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
            const int e = lane + 32 * i;
            if (e < num_experts && !((taken >> i) & 1u) && (v[i] > best || best_id == INT_MAX))
                best = v[i], best_id = e;
        }
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2) {
            const float other = __shfl_xor_sync(kFullWarpMask, best, offset);
            const int other_id = __shfl_xor_sync(kFullWarpMask, best_id, offset);
            if (other > best || (other == best && other_id < best_id))
                best = other, best_id = other_id;
        }
        if (best_id % 32 == lane) taken |= 1u << (best_id / 32);
        if (lane == j) my_id = best_id, my_exp = expf(best - row_max);
    }
    // Renormalised weights divide by the chosen exps' sum directly: the softmax denominator
    // cancels, and so does its rounding.
    const float denom = renormalize ? warp_sum(lane < top_k ? my_exp : 0.f) : sum;
    if (lane < top_k) {
        ids[lane] = my_id;
        weights[lane] = my_exp / denom;
    }
}

}  // namespace miniinfer::cuda
