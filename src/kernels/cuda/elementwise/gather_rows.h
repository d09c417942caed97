// Row gather on the GPU (see gather_rows.cu).
#pragma once

#include <cuda_runtime.h>

#include "core/tensor.h"

namespace miniinfer::cuda {

// out[i, :] = x[rows[i], :]. x: [n, d] bf16; rows: [m] i32 with every value in [0, n) (not
// checked: the values live on the device); out: [m, d] bf16. All contiguous CUDA tensors.
// Used for the logits of the sampled rows only, and by embedding().
void gather_rows(const Tensor& x, const Tensor& rows, Tensor& out, cudaStream_t stream);

}  // namespace miniinfer::cuda
