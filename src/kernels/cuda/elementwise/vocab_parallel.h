// The two data movements of a vocab-parallel embedding and LM head (tensor parallelism: each
// rank holds the rows [vocab_begin, vocab_begin + rows) of the embedding and of the LM head).
#pragma once

#include <cuda_runtime.h>

#include "core/tensor.h"

namespace miniinfer::cuda {

// out[i, :] = table[ids[i] - vocab_begin, :] where ids[i] is in the shard, else zeros; the ranks'
// outputs summed (an all-reduce) are the whole table's lookup, exactly. ids: [n] i32 CUDA;
// table: [rows, hidden] bf16 (this rank's rows); out: [n, hidden] bf16.
void embedding_shard(const Tensor& ids, const Tensor& table, int64_t vocab_begin, Tensor& out,
                     cudaStream_t stream);

// The LM head's gathered logits back in vocabulary order: gathered holds every rank's
// [rows, cols] block one after another (an all-gather's output, [world * rows * cols]);
// out[i, r * cols + j] = gathered[r, i, j]. gathered and out: CUDA, both bf16 or both f32, out
// [rows, world * cols].
void interleave_rank_blocks(const Tensor& gathered, int64_t world, Tensor& out,
                            cudaStream_t stream);

}  // namespace miniinfer::cuda
