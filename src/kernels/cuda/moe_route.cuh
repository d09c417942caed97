// One token's routing for one warp (moe_routing.h: moe_route's contract and arithmetic): the
// softmax over E logits in fp32, the top_k experts by logit (ties to the lower expert id), and
// their weights. Shared by moe_route_kernel and the router GEMV that routes in the same launch
// (gemv.h: gemv_rms_norm_route).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/reduce.cuh"

namespace miniinfer::cuda {

// A bf16 logit and its expert as one 32-bit key whose unsigned order is the ranking: the logit's
// bits mapped to an order-preserving integer (negative values flipped, positive ones offset
// above them) above, 0xffff - expert below (equal logits: the lower expert ranks higher).
// 0 ranks below every key (the lowest, -inf, maps to 0x007f....). -0 counts as +0, as the
// comparison of floats has it.
__device__ __forceinline__ uint32_t route_key(__nv_bfloat16 logit, int expert) {
    uint32_t bits = __bfloat16_as_ushort(logit);
    if (bits == 0x8000u) bits = 0u;
    const uint32_t ordered = (bits & 0x8000u) ? (~bits & 0xffffu) : (bits | 0x8000u);
    return (ordered << 16) | (0xffffu - uint32_t(expert));
}
__device__ __forceinline__ int route_key_expert(uint32_t key) {
    return int(0xffffu - (key & 0xffffu));
}
__device__ __forceinline__ float route_key_logit(uint32_t key) {
    const uint32_t ordered = key >> 16;
    const uint32_t bits = (ordered & 0x8000u) ? (ordered & 0x7fffu) : (~ordered & 0xffffu);
    return __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(bits)));
}

// row: [num_experts] bf16 logits (read through L2: another block may have just written them);
// ids, weights: [top_k], written by lanes 0 .. top_k - 1. Expert e lives in lane e % 32,
// register e / 32 (kPerLane >= num_experts / 32), so a warp's loads of one register are 32
// consecutive logits. Each of the top_k rounds takes the warp's largest key in one redux.sync
// (a shuffle tree of value and id took five dependent steps of two shuffles). Every lane of the
// warp calls it.
template <int kPerLane>
__device__ __forceinline__ void route_token(const __nv_bfloat16* row, int num_experts, int top_k,
                                            bool renormalize, int32_t* ids, float* weights) {
    const int lane = int(threadIdx.x) % 32;
    float v[kPerLane];
    uint32_t key[kPerLane];  // 0: no expert, or already chosen
    float row_max = -INFINITY;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
        const int e = lane + 32 * i;
        const __nv_bfloat16 logit = e < num_experts ? __ldcg(row + e) : __float2bfloat16(0.f);
        v[i] = e < num_experts ? __bfloat162float(logit) : -INFINITY;
        key[i] = e < num_experts ? route_key(logit, e) : 0u;
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
    int my_id = 0;
    float my_exp = 0.f;
    for (int j = 0; j < top_k; ++j) {
        uint32_t best = 0;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) best = max(best, key[i]);
        best = __reduce_max_sync(kFullWarpMask, best);
        const int best_id = route_key_expert(best);
        if (best_id % 32 == lane) {
#pragma unroll
            for (int i = 0; i < kPerLane; ++i)
                if (i == best_id / 32) key[i] = 0u;
        }
        if (lane == j) my_id = best_id, my_exp = expf(route_key_logit(best) - row_max);
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
