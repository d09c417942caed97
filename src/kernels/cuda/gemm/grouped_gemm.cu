// Grouped GEMM of the MoE experts on the tensor cores (mma.sync m16n8k16 bf16, fp32 accumulate).
//
// The grid is every (row tile, column tile) pair the host can bound: max_rows / tile_rows row
// tiles × n / tile_cols column tiles. The device-side expert_offsets decide which of them work,
// so a CUDA graph captured once serves any routing:
//   - a CTA first finds the expert of its row tile: each thread tests one segment end
//     (offsets[e + 1] <= row0) and __syncthreads_count adds the answers, one barrier instead of a
//     binary search's chain of dependent loads. The count is the expert (segments are padded to
//     the tile, so the tile's first row decides), or num_experts past the last segment: exit.
//   - the CTA then computes y[tile rows, tile columns] = x_tile · w[e]_tileᵀ over k in steps of
//     TileK: x and w tiles stream through a Stages-deep cp.async ring in shared memory
//     (Stages - 1 tiles in flight while one is multiplied); each warp owns a WarpRows × WarpCols
//     share of the outputs, A and B fragments read with ldmatrix.
//   - shared rows are padded by 8 bf16 (16 bytes): with TileK 32 or 64 the 8 rows one ldmatrix
//     phase reads then fall on 8 distinct 16-byte bank groups, no conflicts.
// The decode tiles (16 and 32 rows) run the same loop in a persistent grid instead
// (grouped_gemm_persistent_kernel): one CTA per resident slot, each walking the working tiles
// with its ring running on from one tile into the next (bench/RESULTS.md#moe-persistent).
// One tile shape per row tile (the Tile structs below), picked by grouped_gemm_tile_rows from the
// step's rows per expert:
//   16, 32 rows (decode): a few rows per expert; the kernel streams each active expert's weights
//     once, so it is bound by memory. Small row tiles waste fewer MMAs, and TileK 64 with three
//     or four stages keeps 32-48 KB of weights in flight per CTA. 16-row tiles take 64 columns,
//     so that one token's 8 experts still spread over 192 CTAs. Both shapes are the fastest of
//     the sweep bench_moe_tiles times (bench/RESULTS.md#moe-tiles).
//   64, 128 rows (prefill): many rows per expert; bound by the tensor cores. Larger tiles reuse
//     each loaded operand for more MMAs. On an sm_90 (H100/H200) tile 128 is the wgmma kernel of
//     grouped_gemm_sm90.cu instead, at about three times mma.sync's rate, and its 64-row tile
//     takes the 32-row tile's sizes (grouped_gemm_tile_rows).
// Tails: rows past max_rows, columns past n and k past its end are zero-filled by cp.async
// (src-size 0 reads nothing) and never stored, so any n, k that are multiples of 8 (one 16-byte
// chunk) work; no separate slow path is needed.
// Fused gather (row_token given): the CTA reads its tile's row_token entries once, into shared
// memory beside the ring, before finding its expert (whose barrier publishes them); every k step
// then loads x row row_token[r] for tile row r. Without row_token the same table holds row0 + r,
// and with GroupedGemmRows::kPermuted row0 + r where row_token is not -1, so all paths share one
// kernel. Rows of zeros (-1: the padding of each expert's segment, about half of a 32-row tile at
// decode) are zeroed once in every slot of the ring and never loaded: zero-filling copies cost
// L2 requests all the same (bench/RESULTS.md#moe-skip-padding).
// Fused SiLU (kSiluMul): the CTA loads its w tile with gate and up rows interleaved in blocks of
// 8: shared rows 16 j .. 16 j + 7 are gate rows c0 + 8 j .., rows 16 j + 8 .. 16 j + 15 the up
// rows inter + c0 + 8 j .. (c0 = the CTA's first output column). A warp's n8 fragments 2 np and
// 2 np + 1 (one ldmatrix_x4 of 16 w rows) are then the gate and up sums of the same 8 output
// columns, in the same thread's registers: the epilogue applies silu_mul to them and stores act
// directly. The CTA covers TileCols / 2 output columns.
#include "kernels/cuda/gemm/grouped_gemm.h"

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/gemm/grouped_gemm.cuh"
#include "kernels/cuda/primitives/check_tensor.h"

namespace miniinfer::cuda {
namespace {

using namespace grouped_mma;

// Whether a call with this grid choice runs persistent (the decode tiles, up to
// kPersistentMaxExperts experts: bench/RESULTS.md#moe-persistent).
bool runs_persistent(GroupedGemmGrid grid, int64_t tile_rows, int64_t num_experts) {
    if (tile_rows > 32 || num_experts > kPersistentMaxExperts) return false;
    return grid != GroupedGemmGrid::kPerTile;
}

bool aligned(const void* p, uintptr_t bytes) {
    return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

}  // namespace

int64_t grouped_gemm_tile_rows(int64_t routed_rows, int64_t num_experts) {
    const double per_expert = double(routed_rows) / double(std::max<int64_t>(num_experts, 1));
    if (per_expert <= 4) return 16;
    // On an sm_90 the 32-row tile's sizes take grouped_gemm_sm90's 64-row tile instead: padding
    // costs it MMAs, not bytes, and its loader keeps three stages of weights in flight by TMA
    // (bench/RESULTS.md#moe-wgmma-decode). Other devices keep the 32-row mma.sync tile.
    if (per_expert <= 20) return grouped_gemm_sm90_supported() ? 64 : 32;
    // On the H200 the wgmma kernel (128-row tiles) runs 2.8x the mma.sync one at 2048 tokens of
    // 30B-A3B, padding and all; elsewhere 64-row tiles until experts get hundreds of rows.
    if (grouped_gemm_sm90_supported() || per_expert > 256) return 128;
    return 64;
}

GroupedGemmDims check_grouped_gemm(const Tensor& x, const Tensor* row_token, const Tensor& w,
                                   const Tensor& expert_offsets, GroupedGemmEpilogue epilogue,
                                   const Tensor& y, int64_t y_align, GroupedGemmRows rows) {
    check_cuda_tensor(w, DType::kBF16, "grouped_gemm: w", {kAnySize, kAnySize, kAnySize});
    const int64_t num_experts = w.size(0), n = w.size(1), k = w.size(2);
    check_cuda_tensor(x, DType::kBF16, "grouped_gemm: x", {kAnySize, k});
    int64_t max_rows = x.size(0);
    if (row_token) {
        check_cuda_tensor(*row_token, DType::kI32, "grouped_gemm: row_token", {kAnySize});
        max_rows = row_token->size(0);
        MI_LAUNCH_CHECK(rows == GroupedGemmRows::kGather || x.size(0) >= max_rows,
                        "grouped_gemm: kPermuted needs x with a row for every row of row_token");
    }
    check_cuda_tensor(expert_offsets, DType::kI32, "grouped_gemm: expert_offsets",
                      {num_experts + 1});
    const bool silu_mul = epilogue == GroupedGemmEpilogue::kSiluMul;
    const int64_t y_cols = silu_mul ? n / 2 : n;
    check_cuda_tensor(y, DType::kBF16, "grouped_gemm: y", {max_rows, y_cols});
    MI_LAUNCH_CHECK(num_experts > 0 && n > 0 && k > 0 && n % 8 == 0 && k % 8 == 0,
                    "grouped_gemm: n and k must be positive multiples of 8, num_experts positive");
    MI_LAUNCH_CHECK(!silu_mul || n % 16 == 0,
                    "grouped_gemm: kSiluMul needs w [E, 2 * inter, k] with inter a multiple of 8");
    MI_LAUNCH_CHECK(
        aligned(x.raw(), 16) && aligned(w.raw(), 16) && aligned(y.raw(), uintptr_t(y_align)),
        "grouped_gemm: x and w must be 16-byte aligned, y as the kernel needs");
    MI_LAUNCH_CHECK(max_rows <= INT32_MAX - kGroupedGemmMaxTileRows && n <= INT32_MAX &&
                        k <= INT32_MAX && num_experts < INT32_MAX,
                    "grouped_gemm: sizes must fit in int32");
    return {num_experts, n, k, max_rows, y_cols, rows == GroupedGemmRows::kGather};
}

void grouped_gemm_mma_sync(const Tensor& x, const Tensor* row_token, const Tensor& w,
                           const Tensor& expert_offsets, int64_t tile_rows,
                           GroupedGemmEpilogue epilogue, Tensor& y, cudaStream_t stream,
                           GroupedGemmRows rows, GroupedGemmGrid grid) {
    const GroupedGemmDims d =
        check_grouped_gemm(x, row_token, w, expert_offsets, epilogue, y, 4, rows);
    if (d.max_rows == 0) return;
    const bool persistent = runs_persistent(grid, tile_rows, d.num_experts);
    switch (tile_rows) {
        case 16:
            return launch_tile<Tile16>(x, row_token, w, expert_offsets, epilogue, d, y, stream,
                                       persistent);
        case 32:
            return launch_tile<Tile32>(x, row_token, w, expert_offsets, epilogue, d, y, stream,
                                       persistent);
        case 64:
            return launch_tile<Tile64>(x, row_token, w, expert_offsets, epilogue, d, y, stream);
        case 128:
            return launch_tile<Tile128>(x, row_token, w, expert_offsets, epilogue, d, y, stream);
        default:
            MI_LAUNCH_CHECK(false, "grouped_gemm: tile_rows must be 16, 32, 64 or 128");
    }
}

void grouped_gemm(const Tensor& x, const Tensor* row_token, const Tensor& w,
                  const Tensor& expert_offsets, int64_t tile_rows, GroupedGemmEpilogue epilogue,
                  Tensor& y, cudaStream_t stream, GroupedGemmRows rows) {
    if ((tile_rows == kGroupedGemmSm90TileRows || tile_rows == 64) &&
        grouped_gemm_sm90_supported() && w.size(0) <= kGroupedGemmSm90MaxExperts)
        grouped_gemm_sm90(x, row_token, w, expert_offsets, epilogue, y, stream, rows, tile_rows);
    else
        grouped_gemm_mma_sync(x, row_token, w, expert_offsets, tile_rows, epilogue, y, stream,
                              rows);
}

}  // namespace miniinfer::cuda
