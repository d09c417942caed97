// Block-scaled FP8 on the device: the quantization of activations and the widening of e4m3
// bytes, with the arithmetic of the CPU reference (kernels/cpu/fp8_linear.h): per token, groups
// of kFp8GroupSize along the inner dimension, s = amax / 448, q = e4m3(x / max(s, 1e-12)) rounded
// to nearest even and saturating. Every FP8 kernel (quantize, gemv, grouped GEMM) goes through
// these, so the GPU's bits of q and s are the CPU's.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/cuda/primitives/reduce.cuh"

namespace miniinfer::cuda {

inline constexpr int kFp8GroupSize = 128;      // weight blocks and activation groups (the config's)
inline constexpr float kFp8Max = 448.f;        // the largest finite e4m3
inline constexpr float kFp8MinScale = 1e-12f;  // cpu::kFp8MinScale

#ifdef __CUDACC__
// The group's scale from its amax (true division: the build may use fast math elsewhere).
__device__ __forceinline__ float fp8_group_scale(float amax) {
    return __fdiv_rn(amax, kFp8Max);
}
// x / max(scale, kFp8MinScale) as an e4m3 byte.
__device__ __forceinline__ uint8_t fp8_quantize(float x, float scale) {
    return uint8_t(
        __nv_cvt_float_to_fp8(__fdiv_rn(x, fmaxf(scale, kFp8MinScale)), __NV_SATFINITE, __NV_E4M3));
}
// The value of an e4m3 byte (exact in f32).
__device__ __forceinline__ float fp8_value(uint8_t b) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(b), __NV_E4M3)));
}
// Eight values of a 128-group that 16 consecutive lanes hold (a half-warp) quantized: returns
// the group's scale (every lane of the half-warp gets it) and packs the values' e4m3 roundings
// into q as their exact bf16 (e4m3 has 4 significant bits), pairs low value first. Every lane of
// the warp must call it (the amax is a shuffle); lanes past a short group's end pass zeros.
__device__ __forceinline__ float fp8_quantize_group8(const float (&f)[8], uint4& q) {
    float amax = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(f[j]));
    amax = warp_max<16>(amax);
    const float scale = fp8_group_scale(amax);
    uint32_t w[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const uint32_t lo = __float_as_uint(fp8_value(fp8_quantize(f[2 * j], scale)));
        const uint32_t hi = __float_as_uint(fp8_value(fp8_quantize(f[2 * j + 1], scale)));
        w[j] = (lo >> 16) | (hi & 0xffff0000u);  // exact: the top half of each float
    }
    q = make_uint4(w[0], w[1], w[2], w[3]);
    return scale;
}
// Two e4m3 bytes (low byte first) as two floats.
__device__ __forceinline__ float2 fp8x2_values(uint16_t b) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(b), __NV_E4M3);
    return __half22float2(__half2(h));
}
#endif

}  // namespace miniinfer::cuda
