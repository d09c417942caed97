// One head of the step between the QKV GEMM and attention, for one warp: Qwen3's per-head
// RMSNorm and NeoX rotary (qk_norm_rope.h has the arithmetic), and the cache element a K or V
// value is stored as. Shared by qk_norm_rope_store_kernel and the fa2 decode kernels that do
// this step themselves (attention_decode.cu: DecodeQkv), so that both write the same bits.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/kv_fp8.cuh"
#include "kernels/cuda/reduce.cuh"

namespace miniinfer::cuda {

__device__ __forceinline__ float round_bf16(float v) {
    return __bfloat162float(__float2bfloat16(v));
}

// x[j] = element lane + 32 j of head src (kHeadDim bf16), normalised with weight w (null: Qwen2,
// no norm) and rotated to position pos (inv_freq: [kHeadDim / 2]) when rotate. With that layout
// the rotary partner of element j (i + kHeadDim / 2) is element j + kPerLane / 2 of the same
// lane: rotation needs no shuffles, the norm's sum of squares one warp sum. Every lane of the
// warp calls it.
template <int kHeadDim>
__device__ __forceinline__ void norm_rope_head(const __nv_bfloat16* src, const __nv_bfloat16* w,
                                               float eps, float pos, const float* inv_freq,
                                               bool rotate, float (&x)[kHeadDim / 32]) {
    constexpr int kPerLane = kHeadDim / 32, kHalf = kPerLane / 2;
    const int lane = int(threadIdx.x) % 32;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) x[j] = __bfloat162float(src[lane + 32 * j]);
    if (w) {
        float sum_sq = 0.f;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) sum_sq += x[j] * x[j];
        const float inv_rms = rsqrtf(warp_sum(sum_sq) / float(kHeadDim) + eps);
#pragma unroll
        for (int j = 0; j < kPerLane; ++j)
            x[j] = round_bf16(round_bf16(x[j] * inv_rms) * __bfloat162float(w[lane + 32 * j]));
    }
    if (!rotate) return;
#pragma unroll
    for (int j = 0; j < kHalf; ++j) {
        float sin_a, cos_a;
        sincosf(pos * inv_freq[lane + 32 * j], &sin_a, &cos_a);
        const float a = x[j], b = x[j + kHalf];
        x[j] = a * cos_a - b * sin_a;
        x[j + kHalf] = b * cos_a + a * sin_a;
    }
}

// A K or V value into the cache: bf16 (one rounding), or e4m3 of x / scale (an FP8 cache). Returns
// the stored element's value as the attention kernels read it: bf16's value, or the e4m3
// value unscaled (they apply the scales themselves).
__device__ __forceinline__ float store_cache(__nv_bfloat16* dst, float x, float) {
    const __nv_bfloat16 v = __float2bfloat16(x);
    *dst = v;
    return __bfloat162float(v);
}
__device__ __forceinline__ float store_cache(uint8_t* dst, float x, float inv_scale) {
    const uint8_t e = to_e4m3(x, inv_scale);
    *dst = e;
    const __half_raw h = __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(e), __NV_E4M3);
    return __half2float(__half(h));
}

}  // namespace miniinfer::cuda
