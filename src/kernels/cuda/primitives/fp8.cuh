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
// The scale of a 128-group whose values 16 consecutive lanes (a half-warp) hold 8 each: every
// lane of the half-warp gets it. Every lane of the warp must call it (the amax is a shuffle);
// lanes past a short group's end pass zeros.
__device__ __forceinline__ float fp8_group8_scale(const float (&f)[8]) {
    float amax = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(f[j]));
    return fp8_group_scale(warp_max<16>(amax));
}
// A lane's 8 values of such a group quantized: returns the group's scale and packs the values'
// e4m3 roundings into q as their exact bf16 (e4m3 has 4 significant bits), pairs low value first.
__device__ __forceinline__ float fp8_quantize_group8(const float (&f)[8], uint4& q) {
    const float scale = fp8_group8_scale(f);
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
// As fp8_quantize_group8, the e4m3 bytes themselves: value j in byte j of q (q.x bytes 0-3).
__device__ __forceinline__ float fp8_quantize_group8_bytes(const float (&f)[8], uint2& q) {
    const float scale = fp8_group8_scale(f);
    uint32_t w[2] = {0, 0};
#pragma unroll
    for (int j = 0; j < 8; ++j) w[j / 4] |= uint32_t(fp8_quantize(f[j], scale)) << (8 * (j % 4));
    q = make_uint2(w[0], w[1]);
    return scale;
}

// d += a · b on the tensor cores (mma.sync m16n8k32, e4m3 operands, fp32 accumulators; sm_89+):
// A 16 x 32 (row-major), B 32 x 8 (column-major). Lane l = 4 g + t holds
//   a[0]: A[g][4t .. 4t + 3]       a[1]: A[g + 8][4t .. 4t + 3]
//   a[2]: A[g][16 + 4t .. + 3]     a[3]: A[g + 8][16 + 4t .. + 3]
//   b[0]: B[4t .. 4t + 3][g]       b[1]: B[16 + 4t .. + 3][g]
//   d[0], d[1]: D[g][2t], D[g][2t + 1]      d[2], d[3]: D[g + 8][2t], D[g + 8][2t + 1]
// (bytes low first). A dot product does not care in which order its k run, so the kernels give
// A's columns and B's rows the same permutation: lane (g, t) loads 16 consecutive bytes of its
// rows and of x at 16 t of a 64-wide chunk, which feed two mmas (a[0], a[2] and b[0], b[1] from
// bytes 0-7, then 8-15).
__device__ __forceinline__ void mma_e4m3_16x8x32(float (&d)[4], const uint32_t (&a)[4],
                                                 const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    __trap();  // FP8 checkpoints need sm_89+ (the launchers refuse older devices)
#endif
}
// Two e4m3 bytes (low byte first) as two floats.
__device__ __forceinline__ float2 fp8x2_values(uint16_t b) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(b), __NV_E4M3);
    return __half22float2(__half2(h));
}
#endif

}  // namespace miniinfer::cuda
