// Grouped GEMM of the MoE experts on the tensor cores (mma.sync m16n8k16 bf16, fp32 accumulate).
//
// The grid is every (row tile, column tile) pair the host can bound: max_rows / 64 row tiles ×
// n / 128 column tiles. The device-side expert_offsets decide which of them work, so a CUDA
// graph captured once serves any routing:
//   - a CTA first finds the expert of its 64-row tile: each thread tests one segment end
//     (offsets[e + 1] <= row0) and __syncthreads_count adds the answers, one barrier instead of a
//     binary search's chain of dependent loads. The count is the expert (segments are padded to
//     the tile, so the tile's first row decides), or num_experts past the last segment: exit.
//   - the CTA then computes y[64 rows, 128 columns] = x_tile · w[e]_tileᵀ over k in steps of 32:
//     x and w tiles stream through a three-stage cp.async ring in shared memory (two tiles in
//     flight while one is multiplied), and 4 warps (2 × 2) each own 32 × 64 outputs, A and B
//     fragments read with ldmatrix, 16 mma per warp per 16 of k.
//   - shared rows are padded to 40 bf16 (80 bytes): the 8 rows one ldmatrix phase reads then
//     fall on 8 distinct 16-byte bank groups, no conflicts.
// Tails: rows past max_rows, columns past n and k past its end are zero-filled by cp.async
// (src-size 0 reads nothing) and never stored, so any n, k that are multiples of 8 (one 16-byte
// chunk) work; no separate slow path is needed.
// Decode (a few rows per expert) wastes most of each 64-row tile's MMAs, but there the kernel is
// bound by streaming w[e] once per expert, which the row tile does not change.
#include "kernels/cuda/grouped_gemm.h"

#include <cuda_bf16.h>

#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "kernels/cuda/check_tensor.h"
#include "kernels/cuda/mma_bf16.cuh"

namespace miniinfer::cuda {
namespace {

constexpr int kTileRows = int(kGroupedGemmTileRows);  // rows of x per CTA
constexpr int kTileCols = 128;                        // columns of y (rows of w[e]) per CTA
constexpr int kTileK = 32;                            // k per pipeline stage
constexpr int kStages = 3;
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kWarpRows = 32, kWarpCols = 64;  // the 2 × 2 warps' shares of the tile
constexpr int kMTiles = kWarpRows / 16;        // m16 fragments per warp
constexpr int kNTiles = kWarpCols / 8;         // n8 fragments per warp
constexpr int kStride = kTileK + 8;            // shared row stride in bf16 (80 bytes)
constexpr int kChunksPerRow = kTileK / 8;      // 16-byte chunks per tile row

static_assert(kTileRows == 2 * kWarpRows && kTileCols == 2 * kWarpCols && kWarps == 4);
// cp_async_wait_all_but_one() is wait_group 1: the ring leaves kStages - 2 groups in flight.
static_assert(kStages == 3);

struct alignas(16) SharedTiles {
    __nv_bfloat16 a[kStages][kTileRows * kStride];  // x tile: [kTileRows, kTileK (+8 pad)]
    __nv_bfloat16 b[kStages][kTileCols * kStride];  // w tile: [kTileCols, kTileK (+8 pad)]
};

// The expert whose segment holds row0: how many segments end at or before it (segments are
// non-decreasing). num_experts when row0 is past the last segment. Every thread must call it.
__device__ __forceinline__ int find_expert(const int32_t* offsets, int num_experts, int row0) {
    int ended = 0;
    for (int base = 0; base < num_experts; base += kThreads) {
        const int e = base + int(threadIdx.x);
        ended += __syncthreads_count(e < num_experts && offsets[e + 1] <= row0);
    }
    return ended;
}

// One k step of both operands into ring slot `slot`. x_tile: x's row row0 ([rows_valid, k]
// valid); w_tile: w[e]'s row col0 ([cols_valid, k] valid). Invalid chunks become zeros.
__device__ __forceinline__ void load_stage(SharedTiles& s, int slot, const __nv_bfloat16* x_tile,
                                           int rows_valid, const __nv_bfloat16* w_tile,
                                           int cols_valid, int k, int k0) {
#pragma unroll
    for (int c = int(threadIdx.x); c < kTileRows * kChunksPerRow; c += kThreads) {
        const int r = c / kChunksPerRow, kk = (c % kChunksPerRow) * 8;
        const bool valid = r < rows_valid && k0 + kk < k;
        cp_async_16(&s.a[slot][r * kStride + kk],
                    valid ? x_tile + int64_t(r) * k + k0 + kk : x_tile, valid);
    }
#pragma unroll
    for (int c = int(threadIdx.x); c < kTileCols * kChunksPerRow; c += kThreads) {
        const int r = c / kChunksPerRow, kk = (c % kChunksPerRow) * 8;
        const bool valid = r < cols_valid && k0 + kk < k;
        cp_async_16(&s.b[slot][r * kStride + kk],
                    valid ? w_tile + int64_t(r) * k + k0 + kk : w_tile, valid);
    }
}

// acc += the warp's 32 × 64 share of a_tile · b_tileᵀ over one stage's kTileK.
__device__ __forceinline__ void mma_stage(const __nv_bfloat16* a_tile, const __nv_bfloat16* b_tile,
                                          int warp_row, int warp_col,
                                          float (&acc)[kMTiles][kNTiles][4]) {
    const int lane = int(threadIdx.x) % 32;
#pragma unroll
    for (int kc = 0; kc < kTileK / 16; ++kc) {
        // A (row-major [m][k]): matrices (lane / 8) = rows +0 / +8 ((lane / 8) & 1) x k +0 / +8
        // (lane / 16) -> a0..a3 of the m16k16 fragment.
        uint32_t a_frag[kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
            ldmatrix_x4(a_frag[mt],
                        a_tile + (warp_row + mt * 16 + lane % 8 + ((lane / 8) & 1) * 8) * kStride +
                            kc * 16 + (lane / 16) * 8);
            // B (w rows are n, k contiguous: the mma's column-major B): matrices = n +0 / +8
            // (lane / 16) x k +0 / +8 ((lane / 8) & 1) -> b0, b1 of n tiles 2np and 2np + 1.
#pragma unroll
        for (int np = 0; np < kNTiles / 2; ++np) {
            uint32_t b[4];
            ldmatrix_x4(b, b_tile + (warp_col + np * 16 + (lane / 16) * 8 + lane % 8) * kStride +
                               kc * 16 + ((lane / 8) & 1) * 8);
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt) {
                mma_bf16(acc[mt][2 * np], a_frag[mt], b[0], b[1]);
                mma_bf16(acc[mt][2 * np + 1], a_frag[mt], b[2], b[3]);
            }
        }
    }
}

// x: [max_rows, k]; w: [num_experts, n, k]; offsets: [num_experts + 1]; y: [max_rows, n], all
// bf16 but offsets (i32). Grid: (row tiles, column tiles). n, k multiples of 8, x and w 16-byte
// aligned (the launcher checks); offsets tile-aligned (trusted).
__global__ void __launch_bounds__(kThreads)
    grouped_gemm_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                        const int32_t* __restrict__ offsets, __nv_bfloat16* __restrict__ y,
                        int num_experts, int max_rows, int n, int k) {
    const int row0 = int(blockIdx.x) * kTileRows;
    const int col0 = int(blockIdx.y) * kTileCols;
    const int expert = find_expert(offsets, num_experts, row0);
    if (expert >= num_experts) return;  // the whole CTA: past the last segment

    __shared__ SharedTiles s;
    const int rows_valid = min(kTileRows, max_rows - row0);
    const int cols_valid = min(kTileCols, n - col0);
    const __nv_bfloat16* x_tile = x + int64_t(row0) * k;
    const __nv_bfloat16* w_tile = w + (int64_t(expert) * n + col0) * k;
    const int warp = int(threadIdx.x) / 32;
    const int warp_row = (warp / 2) * kWarpRows, warp_col = (warp % 2) * kWarpCols;

    float acc[kMTiles][kNTiles][4] = {};
    const int num_k_tiles = (k + kTileK - 1) / kTileK;
    // Every stage commits a group, empty or not, so that the wait below counts uniformly.
#pragma unroll
    for (int st = 0; st < kStages - 1; ++st) {
        if (st < num_k_tiles)
            load_stage(s, st, x_tile, rows_valid, w_tile, cols_valid, k, st * kTileK);
        cp_async_commit();
    }
    for (int t = 0; t < num_k_tiles; ++t) {
        cp_async_wait_all_but_one();  // stage t has landed (this thread's part)
        __syncthreads();              // everyone's part; and slot (t - 1) % kStages is free
        const int next = t + kStages - 1;
        if (next < num_k_tiles)
            load_stage(s, next % kStages, x_tile, rows_valid, w_tile, cols_valid, k, next * kTileK);
        cp_async_commit();
        mma_stage(s.a[t % kStages], s.b[t % kStages], warp_row, warp_col, acc);
    }

    // Fragment layout: the thread holds rows gid and gid + 8, columns 2 tig and 2 tig + 1 of
    // every n8 tile; n is even, so a pair is either wholly inside or wholly past it.
    const int lane = int(threadIdx.x) % 32, gid = lane / 4, tig = lane % 4;
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int row = row0 + warp_row + mt * 16 + gid + half * 8;
            if (row >= max_rows) continue;
            __nv_bfloat16* y_row = y + int64_t(row) * n;
#pragma unroll
            for (int nt = 0; nt < kNTiles; ++nt) {
                const int col = col0 + warp_col + nt * 8 + tig * 2;
                if (col < n)
                    *reinterpret_cast<uint32_t*>(y_row + col) =
                        pack_bf16(acc[mt][nt][2 * half], acc[mt][nt][2 * half + 1]);
            }
        }
    }
}

bool aligned(const void* p, uintptr_t bytes) {
    return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

}  // namespace

void grouped_gemm(const Tensor& x, const Tensor& w, const Tensor& expert_offsets, Tensor& y,
                  cudaStream_t stream) {
    check_cuda_tensor(w, DType::kBF16, "grouped_gemm: w", {kAnySize, kAnySize, kAnySize});
    const int64_t num_experts = w.size(0), n = w.size(1), k = w.size(2);
    check_cuda_tensor(x, DType::kBF16, "grouped_gemm: x", {kAnySize, k});
    const int64_t max_rows = x.size(0);
    check_cuda_tensor(expert_offsets, DType::kI32, "grouped_gemm: expert_offsets",
                      {num_experts + 1});
    check_cuda_tensor(y, DType::kBF16, "grouped_gemm: y", {max_rows, n});
    MI_LAUNCH_CHECK(num_experts > 0 && n > 0 && k > 0 && n % 8 == 0 && k % 8 == 0,
                    "grouped_gemm: n and k must be positive multiples of 8, num_experts positive");
    MI_LAUNCH_CHECK(aligned(x.raw(), 16) && aligned(w.raw(), 16) && aligned(y.raw(), 4),
                    "grouped_gemm: x and w must be 16-byte aligned, y 4-byte aligned");
    MI_LAUNCH_CHECK(max_rows <= INT32_MAX - kTileRows && n <= INT32_MAX && k <= INT32_MAX &&
                        num_experts < INT32_MAX,
                    "grouped_gemm: sizes must fit in int32");
    if (max_rows == 0) return;

    const int64_t row_tiles = (max_rows + kTileRows - 1) / kTileRows;
    const int64_t col_tiles = (n + kTileCols - 1) / kTileCols;
    MI_LAUNCH_CHECK(col_tiles <= 65535, "grouped_gemm: n too large for the grid");
    grouped_gemm_kernel<<<dim3(unsigned(row_tiles), unsigned(col_tiles)), kThreads, 0, stream>>>(
        x.data<__nv_bfloat16>(), w.data<__nv_bfloat16>(), expert_offsets.data<int32_t>(),
        y.data<__nv_bfloat16>(), int(num_experts), int(max_rows), int(n), int(k));
    MI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace miniinfer::cuda
