// Warp and block reductions shared by the CUDA kernels. Every lane (thread) gets the result, so
// no broadcast step follows. Butterfly (xor) order is fixed here: the kernels' output bits depend
// on the order in which partial sums meet, so a kernel that switches to these helpers keeps its
// results only if it used the same order.
//   warp_sum / warp_max<kWidth>  over groups of kWidth consecutive lanes (kWidth a power of two
//                                <= 32; 32 = the whole warp), offsets kWidth / 2, ..., 1
//   warp_sum_each<kWidth>        warp_sum of every element of a [R][C] array, offsets outermost:
//                                the shuffles of different elements are independent, so they
//                                overlap (the decode kernel's per-key dot products)
//   quad_sum / quad_max          over the 4 lanes of an mma.sync m16n8k16 fragment row (lanes
//                                4g .. 4g + 3), offsets 1 then 2 (the attention kernels' order)
//   block_sum<kThreads>          over a whole block of kThreads threads (a multiple of 32)
#pragma once

#include <cuda_runtime.h>

namespace miniinfer::cuda {

constexpr unsigned kFullWarpMask = 0xffffffffu;

template <int kWidth = 32, typename T>
__device__ __forceinline__ T warp_sum(T v) {
    static_assert(kWidth >= 1 && kWidth <= 32 && (kWidth & (kWidth - 1)) == 0);
#pragma unroll
    for (int offset = kWidth / 2; offset > 0; offset /= 2)
        v += __shfl_xor_sync(kFullWarpMask, v, offset);
    return v;
}

template <int kWidth = 32, typename T>
__device__ __forceinline__ T warp_max(T v) {
    static_assert(kWidth >= 1 && kWidth <= 32 && (kWidth & (kWidth - 1)) == 0);
#pragma unroll
    for (int offset = kWidth / 2; offset > 0; offset /= 2)
        v = max(v, __shfl_xor_sync(kFullWarpMask, v, offset));
    return v;
}

template <int kWidth, int R, int C>
__device__ __forceinline__ void warp_sum_each(float (&v)[R][C]) {
    static_assert(kWidth >= 1 && kWidth <= 32 && (kWidth & (kWidth - 1)) == 0);
#pragma unroll
    for (int offset = kWidth / 2; offset > 0; offset /= 2)
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int c = 0; c < C; ++c) v[r][c] += __shfl_xor_sync(kFullWarpMask, v[r][c], offset);
}

__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(kFullWarpMask, v, 1);
    v += __shfl_xor_sync(kFullWarpMask, v, 2);
    return v;
}

__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(kFullWarpMask, v, 1));
    v = fmaxf(v, __shfl_xor_sync(kFullWarpMask, v, 2));
    return v;
}

// Sum over the block: warps reduce, lane 0 of each parks its sum in shared memory, warp 0 adds
// those up. Two barriers. Its shared slots are reused by the next call, so a kernel that calls
// it twice needs a __syncthreads() between the calls (the second call's write of the total could
// otherwise overtake a slow thread's read of the first).
template <int kThreads>
__device__ __forceinline__ float block_sum(float v) {
    static_assert(kThreads % 32 == 0 && kThreads <= 1024);
    constexpr int kWarps = kThreads / 32;
    __shared__ float partial[kWarps];
    __shared__ float total;
    v = warp_sum(v);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = lane < kWarps ? partial[lane] : 0.f;
    if (warp == 0) v = warp_sum(v);
    if (threadIdx.x == 0) total = v;
    __syncthreads();
    return total;
}

}  // namespace miniinfer::cuda
