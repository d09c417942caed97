// Random weights on the GPU, for `--load-format dummy`: a big model's dummy weights are written
// where they are used, at HBM speed, instead of being drawn on the host and uploaded.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace miniinfer::cuda {

// The [rows, cols] part [row_begin, row_end) x [col_begin, col_end) of a virtual tensor of
// `cols` columns whose element i is value(key, i), written contiguously to out ((row_end -
// row_begin) * (col_end - col_begin) elements of a bf16, f32 or e4m3 CUDA tensor; rounded to
// nearest, e4m3 saturating):
//   value = constant                      when scale == 0
//   value = constant + scale * N(0, 1)    otherwise: a standard normal drawn from a hash of
//           (key, i) (Box-Muller on two uniforms of a splitmix64 chain)
// A shard's values are the whole tensor's at the same positions, whatever the split.
struct FillBlock {
    int64_t cols = 1;
    int64_t row_begin = 0, row_end = 0, col_begin = 0, col_end = 1;
};
void fill_normal(Tensor& out, const FillBlock& block, uint64_t key, float scale, float constant,
                 cudaStream_t stream);

}  // namespace miniinfer::cuda
