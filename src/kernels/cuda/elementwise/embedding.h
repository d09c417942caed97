// Token embedding lookup on the GPU (see embedding.cu).
#pragma once

#include <cuda_runtime.h>

#include "core/tensor.h"

namespace miniinfer::cuda {

// out[i, :] = table[ids[i], :]. ids: [n] i32 CUDA, each in [0, vocab) (the tokenizer and the
// request validation guarantee it; not checked here since the ids live on the device);
// table: [vocab, hidden] bf16; out: [n, hidden] bf16. 16-byte copies when hidden % 8 == 0.
void embedding(const Tensor& ids, const Tensor& table, Tensor& out, cudaStream_t stream);

}  // namespace miniinfer::cuda
