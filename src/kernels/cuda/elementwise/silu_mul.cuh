// The arithmetic of silu_mul (silu_mul.cu), shared with the grouped GEMM's fused epilogue
// (GroupedGemmEpilogue::kSiluMul) so that the fused and the unfused MoE paths give the same bits:
// one definition, inlined into both kernels.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace miniinfer::cuda {

// bf16(silu(g) · u), fp32 arithmetic, one rounding at the end (Hugging Face on bf16 rounds
// silu(g) to bf16 first; the difference is at most one bf16 ulp).
__device__ __forceinline__ __nv_bfloat16 silu_mul_bf16(__nv_bfloat16 g, __nv_bfloat16 u) {
    const float gf = __bfloat162float(g);
    return __float2bfloat16(gf / (1.f + expf(-gf)) * __bfloat162float(u));
}

// Two adjacent outputs from a GEMM's fp32 gate and up sums: each sum rounded to bf16 first (as the
// unfused path stores gate_up), then silu_mul_bf16; packed as a bf16 pair, lo in the low half.
__device__ __forceinline__ uint32_t silu_mul_pack(float g_lo, float g_hi, float u_lo, float u_hi) {
    __nv_bfloat162 v;
    v.x = silu_mul_bf16(__float2bfloat16_rn(g_lo), __float2bfloat16_rn(u_lo));
    v.y = silu_mul_bf16(__float2bfloat16_rn(g_hi), __float2bfloat16_rn(u_hi));
    return *reinterpret_cast<uint32_t*>(&v);
}

}  // namespace miniinfer::cuda
