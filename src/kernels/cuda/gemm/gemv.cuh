// Device helpers of the bandwidth-bound small-batch kernels (gemv.cu, moe_gemv.cu): streaming
// 16-byte weight loads, bf16 unpacking and warp sums.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace miniinfer::cuda {

// 16-byte load of weights that are read exactly once: bypass L1 so that x stays resident there.
__device__ __forceinline__ uint4 load_streaming(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

// Eight bf16 (a 16-byte vector) to fp32: a bf16 is the top half of an fp32.
__device__ __forceinline__ void unpack_bf16x8(const uint4& v, float (&out)[8]) {
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        out[2 * i] = __uint_as_float(words[i] << 16);
        out[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
    }
}

// Sums kValues fp32 values across the warp's 32 lanes (kValues a power of two ≤ 32). At each
// step a lane keeps half of its values and trades the other half with its partner, so the step
// costs half the values' shuffles; once one value is left, plain xor steps finish. Afterwards
// lane L holds the full sum of value L >> (5 - log2 kValues) in v[0].
template <int kValues>
__device__ __forceinline__ void warp_reduce_scatter(float (&v)[kValues], int lane) {
    static_assert(kValues >= 1 && kValues <= 32 && (kValues & (kValues - 1)) == 0);
#pragma unroll
    for (int step = 0; step < 5; ++step) {
        const int offset = 16 >> step;
        const int count = kValues >> step;  // values still held (compile time after unrolling)
        if (count >= 2) {
            const int half = count / 2;
            const bool upper = (lane & offset) != 0;
#pragma unroll
            for (int i = 0; i < half; ++i) {
                const float send = upper ? v[i] : v[i + half];
                const float keep = upper ? v[i + half] : v[i];
                v[i] = keep + __shfl_xor_sync(0xffffffffu, send, offset);
            }
        } else {
            v[0] += __shfl_xor_sync(0xffffffffu, v[0], offset);
        }
    }
}

// Sums each of kValues fp32 values across the warp's 32 lanes; every lane ends with every sum.
template <int kValues>
__device__ __forceinline__ void warp_all_reduce(float (&v)[kValues]) {
#pragma unroll
    for (int offset = 16; offset >= 1; offset /= 2) {
#pragma unroll
        for (int i = 0; i < kValues; ++i) v[i] += __shfl_xor_sync(0xffffffffu, v[i], offset);
    }
}

}  // namespace miniinfer::cuda
