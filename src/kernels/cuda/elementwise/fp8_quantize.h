// The activations of a block-scaled FP8 GEMM (fp8_gemm.h): each row quantized to e4m3 in groups
// of 128 along it, with one f32 scale a group (primitives/fp8.cuh: the CPU reference's bits).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace miniinfer::cuda {

// q[m, k] e4m3 and scales[m, ceil(k / 128)] f32 of x[m, k] bf16 (x any rank ending in k). k a
// multiple of 16; contiguous CUDA tensors; q holds m * k elements, scales m * ceil(k / 128).
void fp8_quantize(const Tensor& x, Tensor& q, Tensor& scales, cudaStream_t stream);

// The same of act = silu_mul(gate_up) (silu_mul.h's bits), act never stored: gate_up [m, 2k]
// bf16, q [m, k], scales [m, ceil(k / 128)]. rows_used (a device int, the MoE's
// expert_offsets[E]): only the first min(m, *rows_used) rows, the rest left as they are.
void silu_mul_fp8_quantize(const Tensor& gate_up, Tensor& q, Tensor& scales, cudaStream_t stream,
                           const int32_t* rows_used = nullptr);

}  // namespace miniinfer::cuda
