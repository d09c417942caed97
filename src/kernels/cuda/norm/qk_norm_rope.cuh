// One head of the step between the QKV GEMM and attention, for one warp: Qwen3's per-head
// RMSNorm and NeoX rotary (qk_norm_rope.h has the arithmetic), and the cache element a K or V
// value is stored as. Shared by qk_norm_rope_store_kernel and the fa2 decode kernels that do
// this step themselves (attention_decode.cu: qkv_step), so that both write the same bits.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/attention/kv_fp8.cuh"
#include "kernels/cuda/primitives/reduce.cuh"

namespace miniinfer::cuda {

__device__ __forceinline__ float round_bf16(float v) {
    return __bfloat162float(__float2bfloat16(v));
}

// The pieces below work on one head held by one warp: x[j] is element lane + 32 j of the head
// (kHeadDim / 32 a lane). With that layout the rotary partner of element j (i + kHeadDim / 2) is
// element j + kPerLane / 2 of the same lane: rotation needs no shuffles, the norm's sum of
// squares one warp sum. Every lane of the warp calls them.

template <int kHeadDim>
__device__ __forceinline__ void load_head(const __nv_bfloat16* src, float (&x)[kHeadDim / 32]) {
    const int lane = int(threadIdx.x) % 32;
#pragma unroll
    for (int j = 0; j < kHeadDim / 32; ++j) x[j] = __bfloat162float(src[lane + 32 * j]);
}

// Qwen3's per-head RMSNorm: 1 / rms from the head's sum of squares, taken in double. Each square
// is exact there and the order of the additions shows only below 2^-50, so kernels that hold a
// head's elements in different lanes and add them in different orders (qk_norm_rope_store and
// the decode's own QKV step) get the same float, and write the same bits.
__device__ __forceinline__ float head_inv_rms(double sum_sq, int head_dim, float eps) {
    return rsqrtf(float(sum_sq) / float(head_dim) + eps);
}

// One normalised element with weight w (Hugging Face's rounding on bf16: the norm in fp32, the
// normalised value rounded to bf16, times the weight, rounded again).
__device__ __forceinline__ float norm_element(float x, float inv_rms, float w) {
    return round_bf16(round_bf16(x * inv_rms) * w);
}

template <int kHeadDim>
__device__ __forceinline__ void norm_head(const __nv_bfloat16* w, float eps,
                                          float (&x)[kHeadDim / 32]) {
    constexpr int kPerLane = kHeadDim / 32;
    const int lane = int(threadIdx.x) % 32;
    double sum_sq = 0.0;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) sum_sq += double(x[j]) * double(x[j]);
    const float inv_rms = head_inv_rms(warp_sum(sum_sq), kHeadDim, eps);
#pragma unroll
    for (int j = 0; j < kPerLane; ++j)
        x[j] = norm_element(x[j], inv_rms, __bfloat162float(w[lane + 32 * j]));
}

// The rotary angle of one frequency at position pos, as every kernel computes it: its sin and
// cos, each times scale (YaRN's attention factor; at 1 the product is exact, the values
// unchanged).
__device__ __forceinline__ void rope_angle(float pos, float inv_freq, float scale, float& sin,
                                           float& cos) {
    sincosf(__fmul_rn(pos, inv_freq), &sin, &cos);
    sin = __fmul_rn(sin, scale);
    cos = __fmul_rn(cos, scale);
}

// The lane's rotary angles at position pos (inv_freq: [kHeadDim / 2]; scale as rope_angle's):
// the same for every head of a token, so a warp with several heads computes them once.
template <int kHeadDim>
struct RopeAngles {
    float sin[kHeadDim / 64], cos[kHeadDim / 64];
};
template <int kHeadDim>
__device__ __forceinline__ RopeAngles<kHeadDim> rope_angles(float pos, const float* inv_freq,
                                                            float scale) {
    const int lane = int(threadIdx.x) % 32;
    RopeAngles<kHeadDim> a;
#pragma unroll
    for (int j = 0; j < kHeadDim / 64; ++j)
        rope_angle(pos, inv_freq[lane + 32 * j], scale, a.sin[j], a.cos[j]);
    return a;
}

// NeoX rotary of one pair (element i and its partner i + head_dim / 2) in fp32, each rounding
// spelled out so that every kernel rotating a pair gets the same bits.
__device__ __forceinline__ void rotate_pair(float& lo, float& hi, float sin, float cos) {
    const float l = lo, h = hi;
    lo = __fmaf_rn(l, cos, -__fmul_rn(h, sin));
    hi = __fmaf_rn(h, cos, __fmul_rn(l, sin));
}

// NeoX rotary: the two halves of the head rotate together.
template <int kHeadDim>
__device__ __forceinline__ void rotate_head(const RopeAngles<kHeadDim>& a,
                                            float (&x)[kHeadDim / 32]) {
    constexpr int kHalf = kHeadDim / 64;
#pragma unroll
    for (int j = 0; j < kHalf; ++j) rotate_pair(x[j], x[j + kHalf], a.sin[j], a.cos[j]);
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
