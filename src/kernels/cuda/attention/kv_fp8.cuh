// The FP8 KV cache's element (--kv-cache-dtype fp8): e4m3 bytes, value = e4m3 · scale with one
// scale per tensor (k_scale, v_scale; 1.0 unless the checkpoint gives one), as vLLM stores it.
// Written by qk_norm_rope_store, read by the attention kernels. The arithmetic is the CPU
// reference's (core/dtype.h f32_to_e4m3 / e4m3_to_f32: nearest even, saturating at ±448).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace miniinfer::cuda {

// x / scale (as x · inv_scale) rounded to e4m3, saturating.
__device__ __forceinline__ uint8_t to_e4m3(float x, float inv_scale) {
    return uint8_t(__nv_cvt_float_to_fp8(x * inv_scale, __NV_SATFINITE, __NV_E4M3));
}

// Eight e4m3 bytes (one 8-byte load) to fp32, times scale. The widening is exact.
__device__ __forceinline__ void e4m3x8_to_float(const uint2& v, float scale, float (&out)[8]) {
    const uint32_t words[2] = {v.x, v.y};
#pragma unroll
    for (int w = 0; w < 2; ++w) {
#pragma unroll
        for (int p = 0; p < 2; ++p) {
            const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
                __nv_fp8x2_storage_t((words[w] >> (16 * p)) & 0xffffu), __NV_E4M3);
            const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
            out[4 * w + 2 * p] = f.x * scale;
            out[4 * w + 2 * p + 1] = f.y * scale;
        }
    }
}

// Eight e4m3 bytes to eight f16 (a 16-byte vector), unscaled: exact (f16 holds every e4m3
// value), one conversion instruction per pair — what the tensor-core kernels multiply an FP8
// cache in.
__device__ __forceinline__ uint4 e4m3x8_to_f16x8(const uint2& v) {
    const uint32_t words[2] = {v.x, v.y};
    uint4 out;
    uint32_t* halves = reinterpret_cast<uint32_t*>(&out);
#pragma unroll
    for (int w = 0; w < 2; ++w) {
#pragma unroll
        for (int p = 0; p < 2; ++p) {
            const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
                __nv_fp8x2_storage_t((words[w] >> (16 * p)) & 0xffffu), __NV_E4M3);
            halves[2 * w + p] = uint32_t(h.x) | (uint32_t(h.y) << 16);
        }
    }
    return out;
}

}  // namespace miniinfer::cuda
