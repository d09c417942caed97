// The hybrids' sigmoid gates on the GPU (see gates.cu): gated attention's output gate and the
// MoE's gated shared expert. Rounded as Hugging Face's bf16 model rounds them.
#pragma once

#include <cuda_runtime.h>

#include "core/tensor.h"

namespace miniinfer::cuda {

// out[t, i] = bf16(out[t, i] · bf16(sigmoid(gate[t, gate_col + i]))): gated attention, the gates
// being columns of the QKV GEMM's output after v.
//   out: [n, d] bf16, in place;  gate: [n, ≥ gate_col + d] bf16
void mul_sigmoid(Tensor& out, const Tensor& gate, int64_t gate_col, cudaStream_t stream);

// y[t] = bf16(y[t] + bf16(bf16(sigmoid(bf16(x[t] · gate_weight))) · shared[t])): the shared
// expert's output, scaled by its gate (a dot product per token), added to the routed experts'.
//   x: [n, hidden] bf16 (the block's normed input);  gate_weight: [hidden] bf16
//   shared, y: [n, hidden] bf16
void add_gated_shared_expert(const Tensor& x, const Tensor& gate_weight, const Tensor& shared,
                             Tensor& y, cudaStream_t stream);

}  // namespace miniinfer::cuda
