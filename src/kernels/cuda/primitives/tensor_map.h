// TMA tensor maps of row-major matrices, for the sm_90a kernels' tile copies (hopper_async.cuh).
#pragma once

#include <cuda.h>  // CUtensorMap

#include <cstdint>

namespace miniinfer::cuda {

// A row-major [rows, cols] matrix of `element_bytes`-byte elements of `type` at `data`: boxes of
// box_cols × box_rows (box_cols · element_bytes ≤ 128: one swizzle row), 128-byte swizzle (the
// layout wgmma.cuh's descriptors read), zeros past the edges. A failure to encode aborts
// (MI_LAUNCH_CHECK: the caller's operands are wrong).
CUtensorMap tensor_map_2d(const void* data, CUtensorMapDataType type, int64_t element_bytes,
                          int64_t rows, int64_t cols, int box_cols, int box_rows);

}  // namespace miniinfer::cuda
