// Structured output on the GPU: -inf for every token a row's grammar forbids, in place on the
// f32 logits before penalties and the sampler read them (the grammar's mask comes first, as
// vLLM applies it). The masks are computed on the CPU (structured/grammar_matcher.h) while the
// previous step runs and uploaded with the step's inputs.
#pragma once

#include <cuda_runtime.h>

#include "core/tensor.h"

namespace miniinfer::cuda {

// logits: [rows, vocab] f32 CUDA, changed in place on the listed rows only.
// bitmask: [n, ceil(vocab / 32)] i32 CUDA; bit (id % 32) of word (id / 32) set: token id allowed.
//   Bits past vocab are ignored.
// mask_rows: [n] i32 CUDA, the logits row of each mask row, each in [0, rows) and listed once
//   (the kernel trusts them).
// n = 0 launches nothing. No host sync, no allocation.
void apply_token_bitmask(Tensor& logits, const Tensor& bitmask, const Tensor& mask_rows,
                         cudaStream_t stream);

}  // namespace miniinfer::cuda
