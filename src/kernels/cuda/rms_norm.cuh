// The rounding points of add_rms_norm (rms_norm.cu), shared with the RMSNorm prologue of
// gemv_rms_norm (gemv.cu) so that both give the same bf16 values: one definition, inlined into
// both kernels (as silu_mul.cuh is for SiLU·mul). They follow Hugging Face's Qwen2RMSNorm on bf16
// tensors.
#pragma once

#include <cuda_bf16.h>

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

}  // namespace miniinfer::cuda
