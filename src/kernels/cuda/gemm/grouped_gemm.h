// Grouped bf16 GEMM for the MoE experts: every expert's rows times that expert's weights, in one
// launch whose grid depends only on host-side bounds (graph-capturable with device-side counts).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace miniinfer::cuda {

// The row tile of grouped_gemm is one of 16, 32, 64 or 128: every expert's segment of x must start
// at a multiple of it, so that a tile of rows never spans two experts. The permute step pads each
// segment to it (moe_permute's tile_rows). Size buffers with the largest.
inline constexpr int64_t kGroupedGemmMaxTileRows = 128;

// The row tile for a step that routes routed_rows (token, expert) pairs over num_experts experts:
// small tiles when each expert gets a few rows (decode: bound by reading the weights, small tiles
// waste fewer MMAs and rarely split an expert in two), large ones when it gets many (prefill:
// bound by the tensor cores, large tiles reuse more). Thresholds measured on the H200
// (bench/RESULTS.md).
int64_t grouped_gemm_tile_rows(int64_t routed_rows, int64_t num_experts);

// What a grouped GEMM writes from its fp32 sums p[r, :] = x_row(r) · w[e]ᵀ:
//   kStore    y[r, j] = bf16(p[r, j]); y is [max_rows, n]
//   kSiluMul  the MoE gate_up projection with silu_mul fused into it: w holds gate rows, then up
//             rows (n = 2 · inter, inter a multiple of 8), y is [max_rows, inter] and
//               y[r, i] = bf16(silu(g) · u),  g = bf16(p[r, i]),  u = bf16(p[r, inter + i])
//             in silu_mul's arithmetic: bit for bit kStore followed by silu_mul, without the
//             [max_rows, n] round trip through memory
enum class GroupedGemmEpilogue { kStore, kSiluMul };

// What row_token (when given) says about x:
//   kGather    x is token-ordered and row r reads x[row_token[r]] (the gather fused into the GEMM)
//   kPermuted  x is already permuted [max_rows, k] and row r reads x[r]; row_token only marks
//              the padding rows (-1), which are never read (zeros): the down projection, whose
//              act rows are padding wherever row_token is -1
enum class GroupedGemmRows { kGather, kPermuted };

// For each expert e and each permuted row r in [expert_offsets[e], expert_offsets[e + 1]):
//   p[r, :] = x_row(r) · w[e]ᵀ   (bf16 products, fp32 sums), written as `epilogue` says
//   x, row_token:   where row r's activations come from, one of
//                   - row_token null: x is [max_rows, k] bf16, rows already permuted
//                     expert-contiguous (moe_gather's x_perm), padding rows zeros; x_row(r) = x[r]
//                   - row_token [max_rows] i32 (moe_permute's): x is the token-ordered
//                     [num_tokens, k] bf16 and x_row(r) = x[row_token[r]], zeros where
//                     row_token[r] is -1 (the gather fused into the GEMM's row loads; values
//                     trusted, in [-1, num_tokens))
//                   - row_token with rows kPermuted: x is [max_rows, k], x_row(r) = x[r], and
//                     zeros where row_token[r] is -1 (those rows of x are not read)
//                   Rows that are zeros cost no load: the mma.sync kernels zero them once in
//                   shared memory, grouped_gemm_sm90 zero-fills them.
//   w:              [num_experts, n, k] bf16, each expert's weight in nn.Linear layout [n, k]
//   expert_offsets: [num_experts + 1] i32 on the device, non-decreasing, offsets[0] == 0,
//                   every offset a multiple of tile_rows, offsets[E] <= max_rows
//   tile_rows:      16, 32, 64 or 128 (grouped_gemm_tile_rows); 64 and 128 run grouped_gemm_sm90
//                   on an sm_90 device (then y must be 16-byte aligned)
//   y:              [max_rows, n] bf16 (kStore) or [max_rows, n / 2] (kSiluMul); must not alias
//                   x or w
// Writes: every row below offsets[E] (padding rows included: zeros in give zeros out). Rows from
// offsets[E] on are not written (they keep whatever y held). An expert with an empty segment
// costs nothing.
// n and k must be multiples of 8 (n of 16 for kSiluMul), x and w 16-byte aligned, y 4-byte
// aligned (checked; a failure aborts as MI_LAUNCH_CHECK: a bug in the caller). The offsets and
// row_token are read only on the device and trusted. The grid covers max_rows / tile_rows row
// tiles × n / 64 or 128 column tiles (of p), tiles past offsets[E] exiting at once; for the
// 16- and 32-row tiles it is persistent instead (GroupedGemmGrid, below). No allocation,
// no host synchronisation: safe to call during CUDA graph capture, and a replay reads the
// offsets and row_token the graph finds on the device.
void grouped_gemm(const Tensor& x, const Tensor* row_token, const Tensor& w,
                  const Tensor& expert_offsets, int64_t tile_rows, GroupedGemmEpilogue epilogue,
                  Tensor& y, cudaStream_t stream, GroupedGemmRows rows = GroupedGemmRows::kGather);

// How the mma.sync kernel's grid covers the tiles:
//   kPerTile     one CTA per (row tile, column tile) of the host's bound (max_rows); the CTAs
//                past the last segment exit at once
//   kPersistent  as many CTAs as the device holds at once, each walking the working tiles with
//                its load ring running on from one tile into the next (the decode tiles, 16 and
//                32 rows, with at most 511 experts; other calls run kPerTile). Same bits.
//   kDefault     kPersistent where it applies (tests ask for either)
enum class GroupedGemmGrid { kDefault, kPerTile, kPersistent };

// grouped_gemm on mma.sync whatever the device (grouped_gemm's kernel for tiles 16 to 64, and
// for 128 off sm_90); tests run it on the H200 too.
void grouped_gemm_mma_sync(const Tensor& x, const Tensor* row_token, const Tensor& w,
                           const Tensor& expert_offsets, int64_t tile_rows,
                           GroupedGemmEpilogue epilogue, Tensor& y, cudaStream_t stream,
                           GroupedGemmRows rows = GroupedGemmRows::kGather,
                           GroupedGemmGrid grid = GroupedGemmGrid::kDefault);

// The row tile of grouped_gemm_sm90 for prefill (it also runs 64-row tiles): segments padded to
// it (offsets multiples of it). It keeps the offsets in shared memory: at most
// kGroupedGemmSm90MaxExperts experts (grouped_gemm takes mma.sync beyond).
inline constexpr int64_t kGroupedGemmSm90TileRows = 128;
inline constexpr int64_t kGroupedGemmSm90MaxExperts = 2047;

// True when the current device can run grouped_gemm_sm90: compute capability 9.0 (H100 / H200),
// whose sm_90a machine code holds the wgmma kernel (the compute_90 PTX fallback does not).
bool grouped_gemm_sm90_supported();

// grouped_gemm on Hopper's warpgroup MMA (wgmma): the same contract, arguments and writes as
// grouped_gemm with tile_rows 128 or 64 (offsets multiples of it), with these differences:
//   - y must be 16-byte aligned too (x, w and y all checked);
//   - the device must be sm_90 (grouped_gemm_sm90_supported(), checked: aborts otherwise), and
//     num_experts at most kGroupedGemmSm90MaxExperts (checked);
//   - persistent: up to one CTA an SM (384 threads with 128-row tiles, 256 with 64), about 210 KB
//     of dynamic shared memory per CTA, walking the tiles below offsets[E].
// Summation order differs from grouped_gemm (fp32 either way), so results may differ from it in
// the last bf16 bit. No allocation, no host synchronisation: graph-capturable.
void grouped_gemm_sm90(const Tensor& x, const Tensor* row_token, const Tensor& w,
                       const Tensor& expert_offsets, GroupedGemmEpilogue epilogue, Tensor& y,
                       cudaStream_t stream, GroupedGemmRows rows = GroupedGemmRows::kGather,
                       int64_t tile_rows = kGroupedGemmSm90TileRows);

#ifdef __CUDACC__
// The row of x that permuted row r reads in the kernels (grouped_gemm's row_token contract): r
// itself without row_token, row_token[r] with kGather, r with kPermuted unless row_token marks
// it as padding; -1 (zeros) for padding and rows from max_rows on.
__device__ __forceinline__ int grouped_gemm_source_row(const int32_t* row_token, int r,
                                                       int max_rows, bool gather) {
    const int token = r >= max_rows ? -1 : row_token ? row_token[r] : r;
    return gather || token < 0 ? token : r;
}

// The expert whose segment holds row0 < offsets[num_experts]: the first e with offsets[e + 1] >
// row0 (empty segments skipped), by binary search; one thread's answer, no barrier (find_expert
// is the whole CTA's).
__device__ __forceinline__ int segment_of(const int32_t* offsets, int num_experts, int row0) {
    int lo = 0, hi = num_experts - 1;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (offsets[mid + 1] > row0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}
#endif

// The sizes of one grouped GEMM call after its launcher's checks (check_grouped_gemm, shared by
// both kernels' launchers): p is [max_rows, n], y [max_rows, y_cols].
struct GroupedGemmDims {
    int64_t num_experts, n, k, max_rows, y_cols;
    bool gather = true;  // GroupedGemmRows::kGather
};

// Checks grouped_gemm's contract on its operands (shapes, dtypes, multiples of 8, 16-byte
// alignment of x and w, y_align-byte alignment of y, sizes within int32) and returns the sizes.
// A failure aborts as MI_LAUNCH_CHECK.
GroupedGemmDims check_grouped_gemm(const Tensor& x, const Tensor* row_token, const Tensor& w,
                                   const Tensor& expert_offsets, GroupedGemmEpilogue epilogue,
                                   const Tensor& y, int64_t y_align,
                                   GroupedGemmRows rows = GroupedGemmRows::kGather);

}  // namespace miniinfer::cuda
