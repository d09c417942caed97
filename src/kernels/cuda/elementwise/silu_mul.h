// SiLU-gated product of the MLP on the GPU (see silu_mul.cu).
#pragma once

#include <cuda_runtime.h>

#include "core/tensor.h"

namespace miniinfer::cuda {

// out[t, i] = bf16(silu(gate_up[t, i]) * gate_up[t, inter + i]), fp32 arithmetic.
// gate_up: [n, 2 * inter] bf16 (gate columns, then up columns: the fused gate_up GEMM's output);
// out: [n, inter] bf16. Contiguous CUDA tensors. rows_used (a device int, e.g. the MoE's
// expert_offsets[E]): only the first min(n, *rows_used) rows, the rest of out left as it is; the
// count is read on the device, so a graph replays with each step's own.
void silu_mul(const Tensor& gate_up, Tensor& out, cudaStream_t stream,
              const int32_t* rows_used = nullptr);

}  // namespace miniinfer::cuda
