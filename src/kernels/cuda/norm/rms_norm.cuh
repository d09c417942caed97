// The rounding points of add_rms_norm (rms_norm.cu), shared with the RMSNorm prologue of
// gemv_rms_norm (gemv.cu) so that both give the same bf16 values: one definition, inlined into
// both kernels (as silu_mul.cuh is for SiLU·mul). They follow Hugging Face's Qwen2RMSNorm on bf16
// tensors.
#pragma once

#include <cuda_bf16.h>

#include "kernels/cuda/gemm/gemv.cuh"

namespace miniinfer::cuda {

// The residual stream's next value: bf16(x + residual), added in fp32.
__device__ __forceinline__ __nv_bfloat16 add_residual(float x, float residual) {
    return __float2bfloat16(x + residual);
}

// One normed element: the normalised value rounded to bf16, times the weight, rounded again.
__device__ __forceinline__ __nv_bfloat16 rms_normed(float v, float inv_rms, float weight) {
    const float normed = __bfloat162float(__float2bfloat16(v * inv_rms));
    return __float2bfloat16(normed * weight);
}

// Eight of each on 16-byte vectors (8 bf16): fn(a[j], b[j]) for each pair, in fp32, to bf16.
template <typename Fn>
__device__ __forceinline__ uint4 map_bf16x8(const uint4& a, const uint4& b, Fn fn) {
    float fa[8], fb[8];
    unpack_bf16x8(a, fa);
    unpack_bf16x8(b, fb);
    uint4 out;
    auto* o = reinterpret_cast<__nv_bfloat16*>(&out);
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j] = fn(fa[j], fb[j]);
    return out;
}
// Delta d plus residual r; the normed values of v with the weights w.
__device__ __forceinline__ uint4 add_residual_x8(const uint4& d, const uint4& r) {
    return map_bf16x8(d, r, add_residual);
}
__device__ __forceinline__ uint4 rms_normed_x8(const uint4& v, float inv_rms, const uint4& w) {
    return map_bf16x8(v, w, [inv_rms](float f, float g) { return rms_normed(f, inv_rms, g); });
}

}  // namespace miniinfer::cuda
