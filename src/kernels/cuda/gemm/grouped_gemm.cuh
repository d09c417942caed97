// The mma.sync grouped GEMM's kernels and their launchers, as templates over the tile shape
// (grouped_gemm.cu says how the kernel works and instantiates the product's shapes; the bench
// target bench_moe_tiles instantiates the sweep's).
#pragma once

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "core/tensor.h"
#include "kernels/cuda/elementwise/silu_mul.cuh"
#include "kernels/cuda/gemm/grouped_gemm.h"
#include "kernels/cuda/primitives/launch.cuh"
#include "kernels/cuda/primitives/mma_bf16.cuh"

namespace miniinfer::cuda::grouped_mma {

template <int TileRows, int TileCols, int TileK, int Stages, int WarpsM, int WarpsN>
struct Tile {
    static constexpr int kRows = TileRows, kCols = TileCols, kK = TileK, kStages = Stages;
    static constexpr int kWarpsM = WarpsM, kWarpsN = WarpsN;
    static constexpr int kThreads = 32 * WarpsM * WarpsN;
    static constexpr int kWarpRows = TileRows / WarpsM, kWarpCols = TileCols / WarpsN;
    static constexpr int kMTiles = kWarpRows / 16;   // m16 fragments per warp
    static constexpr int kNTiles = kWarpCols / 8;    // n8 fragments per warp
    static constexpr int kStride = TileK + 8;        // shared row stride in bf16
    static constexpr int kChunksPerRow = TileK / 8;  // 16-byte chunks per tile row
    static constexpr int kStageElems = (TileRows + TileCols) * kStride;  // x tile, then w tile
    static constexpr size_t kSharedBytes = size_t(Stages) * kStageElems * 2;
    static_assert(kWarpRows % 16 == 0 && kWarpCols % 16 == 0 && TileK % 16 == 0);
    static_assert(Stages >= 2 && kWarpsM * kWarpRows == TileRows);
};

using Tile16 = Tile<16, 64, 128, 2, 1, 4>;
using Tile32 = Tile<32, 128, 64, 2, 1, 4>;
using Tile64 = Tile<64, 128, 32, 3, 2, 2>;
using Tile128 = Tile<128, 128, 32, 4, 2, 4>;

// "128 cols x k64, 2 stages, 4 warps": a tile shape's name for bench rows.
template <class T>
std::string shape_name() {
    return std::to_string(T::kCols) + " cols x k" + std::to_string(T::kK) + ", " +
           std::to_string(T::kStages) + " stages, " +
           (T::kWarpsM > 1 ? std::to_string(T::kWarpsM) + "x" : std::string()) +
           std::to_string(T::kWarpsN) + " warps";
}

template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// The expert whose segment holds row0: how many segments end at or before it (segments are
// non-decreasing). num_experts when row0 is past the last segment. Every thread must call it.
template <int Threads>
__device__ __forceinline__ int find_expert(const int32_t* offsets, int num_experts, int row0) {
    int ended = 0;
    for (int base = 0; base < num_experts; base += Threads) {
        const int e = base + int(threadIdx.x);
        ended += __syncthreads_count(e < num_experts && offsets[e + 1] <= row0);
    }
    return ended;
}

// One k step of a [Rows, TileK] operand tile into shared memory (row stride T::kStride): tile row
// r from global row row_ptr(r) (k contiguous bf16), zeros where row_ptr(r) is null and past k.
// `any` is any valid global address (what a zero-filling cp.async names but does not read).
// skip_null: rows with a null row_ptr are left alone (zeroed once by the caller).
template <class T, int Rows, class RowPtr>
__device__ __forceinline__ void load_tile(__nv_bfloat16* dst, RowPtr row_ptr,
                                          const __nv_bfloat16* any, int k, int k0, bool skip_null) {
#pragma unroll
    for (int c = int(threadIdx.x); c < Rows * T::kChunksPerRow; c += T::kThreads) {
        const int r = c / T::kChunksPerRow, kk = (c % T::kChunksPerRow) * 8;
        const __nv_bfloat16* src = row_ptr(r);
        if (skip_null && src == nullptr) continue;
        const bool valid = src != nullptr && k0 + kk < k;
        cp_async_16(dst + r * T::kStride + kk, valid ? src + k0 + kk : any, valid);
    }
}

// acc += the warp's WarpRows × WarpCols share of a_tile · b_tileᵀ over one stage's TileK.
template <class T>
__device__ __forceinline__ void mma_stage(const __nv_bfloat16* a_tile, const __nv_bfloat16* b_tile,
                                          int warp_row, int warp_col,
                                          float (&acc)[T::kMTiles][T::kNTiles][4]) {
    const int lane = int(threadIdx.x) % 32;
#pragma unroll
    for (int kc = 0; kc < T::kK / 16; ++kc) {
        // A (row-major [m][k]): matrices (lane / 8) = rows +0 / +8 ((lane / 8) & 1) x k +0 / +8
        // (lane / 16) -> a0..a3 of the m16k16 fragment.
        uint32_t a_frag[T::kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < T::kMTiles; ++mt)
            ldmatrix_x4(a_frag[mt],
                        a_tile +
                            (warp_row + mt * 16 + lane % 8 + ((lane / 8) & 1) * 8) * T::kStride +
                            kc * 16 + (lane / 16) * 8);
            // B (w rows are n, k contiguous: the mma's column-major B): matrices = n +0 / +8
            // (lane / 16) x k +0 / +8 ((lane / 8) & 1) -> b0, b1 of n tiles 2np and 2np + 1.
#pragma unroll
        for (int np = 0; np < T::kNTiles / 2; ++np) {
            uint32_t b[4];
            ldmatrix_x4(b, b_tile + (warp_col + np * 16 + (lane / 16) * 8 + lane % 8) * T::kStride +
                               kc * 16 + ((lane / 8) & 1) * 8);
#pragma unroll
            for (int mt = 0; mt < T::kMTiles; ++mt) {
                mma_bf16(acc[mt][2 * np], a_frag[mt], b[0], b[1]);
                mma_bf16(acc[mt][2 * np + 1], a_frag[mt], b[2], b[3]);
            }
        }
    }
}

// The epilogue: the warp's accumulators of the tile at (row0, out0) into y (rows below max_rows).
// Fragment layout: the thread holds rows gid and gid + 8, columns 2 tig and 2 tig + 1 of every n8
// tile; y's columns (n, or n / 2 with kSiluMul) are even, so a pair is either wholly inside or
// wholly past them.
template <class T, bool kSiluMul>
__device__ __forceinline__ void store_tile(const float (&acc)[T::kMTiles][T::kNTiles][4],
                                           __nv_bfloat16* __restrict__ y, int row0, int out0,
                                           int warp_row, int warp_col, int max_rows, int n) {
    const int y_cols = kSiluMul ? n / 2 : n;
    const int lane = int(threadIdx.x) % 32, gid = lane / 4, tig = lane % 4;
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int row = row0 + warp_row + mt * 16 + gid + half * 8;
            if (row >= max_rows) continue;
            __nv_bfloat16* y_row = y + int64_t(row) * y_cols;
            if constexpr (kSiluMul) {
                // n8 tiles 2 np (gate) and 2 np + 1 (up): output columns 8 np .. of the warp's
                // kWarpCols / 2.
#pragma unroll
                for (int np = 0; np < T::kNTiles / 2; ++np) {
                    const int col = out0 + warp_col / 2 + np * 8 + tig * 2;
                    const float* g = acc[mt][2 * np] + 2 * half;
                    const float* u = acc[mt][2 * np + 1] + 2 * half;
                    if (col < y_cols)
                        *reinterpret_cast<uint32_t*>(y_row + col) =
                            silu_mul_pack(g[0], g[1], u[0], u[1]);
                }
            } else {
#pragma unroll
                for (int nt = 0; nt < T::kNTiles; ++nt) {
                    const int col = out0 + warp_col + nt * 8 + tig * 2;
                    if (col < n)
                        *reinterpret_cast<uint32_t*>(y_row + col) =
                            pack_bf16(acc[mt][nt][2 * half], acc[mt][nt][2 * half + 1]);
                }
            }
        }
    }
}

// w row of tile row r of the CTA's w tile at output column out0 (null past the last column).
// kSiluMul: gate and up rows interleaved in blocks of 8 (see the top of this file).
template <bool kSiluMul>
__device__ __forceinline__ const __nv_bfloat16* w_tile_row(const __nv_bfloat16* w_expert, int r,
                                                           int out0, int n, int k) {
    if constexpr (kSiluMul) {
        const int y_cols = n / 2, col = out0 + (r / 16) * 8 + r % 8;
        return col < y_cols ? w_expert + int64_t((r / 8) % 2 * y_cols + col) * k : nullptr;
    } else {
        return out0 + r < n ? w_expert + int64_t(out0 + r) * k : nullptr;
    }
}

// x: [max_rows, k], or [num_tokens, k] with row_token: [max_rows]; w: [num_experts, n, k];
// offsets: [num_experts + 1]; y: [max_rows, n], or [max_rows, n / 2] with kSiluMul. bf16 but
// offsets and row_token (i32). Grid: (row tiles, column tiles of n); T::kSharedBytes of dynamic
// shared memory. n, k multiples of 8 (n of 16 with kSiluMul), x and w 16-byte aligned (the
// launcher checks); offsets tile-aligned, row_token in [-1, num_tokens) (trusted).
template <class T, bool kSiluMul>
__global__ void __launch_bounds__(T::kThreads)
    grouped_gemm_kernel(const __nv_bfloat16* __restrict__ x, const int32_t* __restrict__ row_token,
                        const __nv_bfloat16* __restrict__ w, const int32_t* __restrict__ offsets,
                        __nv_bfloat16* __restrict__ y, int num_experts, int max_rows, int n, int k,
                        bool gather) {
    pdl_wait();
    pdl_trigger();
    const int row0 = int(blockIdx.x) * T::kRows;
    __shared__ int32_t src_row[T::kRows];  // the x row of each tile row; -1: zeros
    if (int(threadIdx.x) < T::kRows)
        src_row[threadIdx.x] =
            grouped_gemm_source_row(row_token, row0 + int(threadIdx.x), max_rows, gather);
    const int expert = find_expert<T::kThreads>(offsets, num_experts, row0);  // + publishes src_row
    if (expert >= num_experts) return;  // the whole CTA: past the last segment

    extern __shared__ __align__(16) __nv_bfloat16 smem[];  // [Stages][x tile; w tile]
    // Rows of zeros (padding) are zeroed once in every slot of the ring and never loaded: at
    // decode about half of a 32-row tile, whose zero-filling copies cost L2 requests all the same.
    constexpr int kZeroChunks = T::kStages * T::kRows * T::kChunksPerRow;
    for (int c = int(threadIdx.x); c < kZeroChunks; c += T::kThreads) {
        const int slot = c / (T::kRows * T::kChunksPerRow),
                  rest = c % (T::kRows * T::kChunksPerRow);
        const int r = rest / T::kChunksPerRow, chunk = rest % T::kChunksPerRow;
        if (src_row[r] < 0)
            *reinterpret_cast<uint4*>(smem + slot * T::kStageElems + r * T::kStride + chunk * 8) =
                make_uint4(0, 0, 0, 0);
    }
    // kSiluMul: output columns out0 .. out0 + kCols / 2 of inter = n / 2; else columns of n.
    constexpr int kOutCols = kSiluMul ? T::kCols / 2 : T::kCols;
    const int out0 = int(blockIdx.y) * kOutCols;
    const __nv_bfloat16* w_expert = w + int64_t(expert) * n * k;
    const auto x_row = [&](int r) -> const __nv_bfloat16* {
        const int src = src_row[r];
        return src < 0 ? nullptr : x + int64_t(src) * k;
    };
    const auto w_row = [&](int r) { return w_tile_row<kSiluMul>(w_expert, r, out0, n, k); };
    const int warp = int(threadIdx.x) / 32;
    const int warp_row = (warp / T::kWarpsN) * T::kWarpRows;
    const int warp_col = (warp % T::kWarpsN) * T::kWarpCols;
    auto load_stage = [&](int slot, int k0) {
        __nv_bfloat16* stage = smem + slot * T::kStageElems;
        load_tile<T, T::kRows>(stage, x_row, w, k, k0, true);
        load_tile<T, T::kCols>(stage + T::kRows * T::kStride, w_row, w, k, k0, false);
    };

    float acc[T::kMTiles][T::kNTiles][4] = {};
    const int num_k_tiles = (k + T::kK - 1) / T::kK;
    // Every stage commits a group, empty or not, so that the wait below counts uniformly.
#pragma unroll
    for (int st = 0; st < T::kStages - 1; ++st) {
        if (st < num_k_tiles) load_stage(st, st * T::kK);
        cp_async_commit();
    }
    for (int t = 0; t < num_k_tiles; ++t) {
        cp_async_wait<T::kStages - 2>();  // stage t has landed (this thread's part)
        __syncthreads();                  // everyone's part; and slot (t - 1) % Stages is free
        const int next = t + T::kStages - 1;
        if (next < num_k_tiles) load_stage(next % T::kStages, next * T::kK);
        cp_async_commit();
        const __nv_bfloat16* stage = smem + (t % T::kStages) * T::kStageElems;
        mma_stage<T>(stage, stage + T::kRows * T::kStride, warp_row, warp_col, acc);
    }

    store_tile<T, kSiluMul>(acc, y, row0, out0, warp_row, warp_col, max_rows, n);
}

// Experts a persistent CTA keeps the segment offsets of in shared memory (more: the per-tile
// kernel runs instead).
constexpr int kPersistentMaxExperts = 511;
constexpr size_t kOffsetsBytes = (kPersistentMaxExperts + 1) * sizeof(int32_t);

// The persistent form of grouped_gemm_kernel, for the decode tiles (16 and 32 rows): the grid is
// as many CTAs as the device holds at once (G), and CTA b works on tiles b, b + G, b + 2 G, ...
// of the working tiles: the row tiles below offsets[E] (read on the device) × the column tiles,
// column tiles fastest. Its cp.async ring runs on across tile boundaries: while the last k steps
// of one tile are multiplied, the first ones of the next are in flight, so a CTA's pipeline fills
// once, not once a tile, and no CTA starts only to find its tile past the last segment. Every
// output is the same chain of mma over k as in grouped_gemm_kernel: the same bits
// (bench/RESULTS.md#moe-persistent).
//   - the offsets are copied into shared memory once; a tile's expert is a binary search there.
//   - the loads of a tile are issued by the thread that issued the previous ones (fixed rows per
//     thread): its x rows (row_token looked up one tile ahead, so the lookup's latency is hidden)
//     and w rows are in registers; rows of zeros (padding) are written with shared stores, since
//     a slot's rows change from tile to tile.
// Grid: G CTAs; dynamic shared memory T::kSharedBytes + kOffsetsBytes. num_experts at most
// kPersistentMaxExperts (the launcher checks). Same operands as grouped_gemm_kernel.
template <class T, bool kSiluMul>
__global__ void __launch_bounds__(T::kThreads)
    grouped_gemm_persistent_kernel(const __nv_bfloat16* __restrict__ x,
                                   const int32_t* __restrict__ row_token,
                                   const __nv_bfloat16* __restrict__ w,
                                   const int32_t* __restrict__ offsets,
                                   __nv_bfloat16* __restrict__ y, int num_experts, int max_rows,
                                   int n, int k, bool gather) {
    constexpr int kXChunks = (T::kRows * T::kChunksPerRow + T::kThreads - 1) / T::kThreads;
    constexpr int kWChunks = (T::kCols * T::kChunksPerRow + T::kThreads - 1) / T::kThreads;
    constexpr int kOutCols = kSiluMul ? T::kCols / 2 : T::kCols;
    extern __shared__ __align__(16) __nv_bfloat16 smem[];  // [Stages][x tile; w tile], offsets
    int32_t* seg = reinterpret_cast<int32_t*>(smem + T::kStages * T::kStageElems);
    pdl_wait();
    pdl_trigger();
    for (int e = int(threadIdx.x); e <= num_experts; e += T::kThreads) seg[e] = offsets[e];
    __syncthreads();
    const int y_cols = kSiluMul ? n / 2 : n;
    const int col_tiles = (y_cols + kOutCols - 1) / kOutCols;
    const int tiles = seg[num_experts] / T::kRows * col_tiles;
    const int grid = int(gridDim.x), first = int(blockIdx.x);
    const int my_tiles = first < tiles ? (tiles - first + grid - 1) / grid : 0;
    if (my_tiles == 0) return;
    const int num_k_tiles = (k + T::kK - 1) / T::kK;
    const int steps = my_tiles * num_k_tiles;  // (tile, k step) pairs, in order

    const auto source_row = [&](int r) {
        return grouped_gemm_source_row(row_token, r, max_rows, gather);
    };
    const auto tile_row0 = [&](int j) { return (first + j * grid) / col_tiles * T::kRows; };
    const auto tile_out0 = [&](int j) { return (first + j * grid) % col_tiles * kOutCols; };

    // The loading side: the tile and k step of the next load, its expert's weights and x rows.
    int load_tile_index = 0, load_k = 0, load_out0 = 0;
    const __nv_bfloat16* load_w = w;
    const __nv_bfloat16* load_x[kXChunks];
    int next_source[kXChunks];  // source_row of this thread's x rows in tile load_tile_index
#pragma unroll
    for (int i = 0; i < kXChunks; ++i) {
        const int c = int(threadIdx.x) + i * T::kThreads;
        next_source[i] =
            c < T::kRows * T::kChunksPerRow ? source_row(tile_row0(0) + c / T::kChunksPerRow) : -1;
    }
    // Tile j's expert, weights and x rows into the loading side; tile j + 1's row sources asked
    // for.
    const auto begin_tile = [&](int j) {
        const int row0 = tile_row0(j);
        load_w = w + int64_t(segment_of(seg, num_experts, row0)) * n * k;
        load_out0 = tile_out0(j);
#pragma unroll
        for (int i = 0; i < kXChunks; ++i)
            load_x[i] = next_source[i] < 0 ? nullptr : x + int64_t(next_source[i]) * k;
        if (j + 1 < my_tiles) {
            const int next_row0 = tile_row0(j + 1);
#pragma unroll
            for (int i = 0; i < kXChunks; ++i) {
                const int c = int(threadIdx.x) + i * T::kThreads;
                if (c < T::kRows * T::kChunksPerRow)
                    next_source[i] = next_row0 == row0
                                         ? next_source[i]
                                         : source_row(next_row0 + c / T::kChunksPerRow);
            }
        }
    };
    // The next (tile, k step) into ring slot `slot`.
    const auto load_next = [&](int slot) {
        if (load_k == 0) begin_tile(load_tile_index);
        const int k0 = load_k * T::kK;
        __nv_bfloat16* stage = smem + slot * T::kStageElems;
#pragma unroll
        for (int i = 0; i < kXChunks; ++i) {
            const int c = int(threadIdx.x) + i * T::kThreads;
            if (c >= T::kRows * T::kChunksPerRow) break;
            const int r = c / T::kChunksPerRow, kk = (c % T::kChunksPerRow) * 8;
            __nv_bfloat16* dst = stage + r * T::kStride + kk;
            if (load_x[i] == nullptr) {
                *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
            } else {
                const bool valid = k0 + kk < k;
                cp_async_16(dst, valid ? load_x[i] + k0 + kk : w, valid);
            }
        }
#pragma unroll
        for (int i = 0; i < kWChunks; ++i) {
            const int c = int(threadIdx.x) + i * T::kThreads;
            if (c >= T::kCols * T::kChunksPerRow) break;
            const int r = c / T::kChunksPerRow, kk = (c % T::kChunksPerRow) * 8;
            const __nv_bfloat16* src = w_tile_row<kSiluMul>(load_w, r, load_out0, n, k);
            const bool valid = src != nullptr && k0 + kk < k;
            cp_async_16(stage + (T::kRows + r) * T::kStride + kk, valid ? src + k0 + kk : w, valid);
        }
        if (++load_k == num_k_tiles) load_k = 0, ++load_tile_index;
    };

    const int warp = int(threadIdx.x) / 32;
    const int warp_row = (warp / T::kWarpsN) * T::kWarpRows;
    const int warp_col = (warp % T::kWarpsN) * T::kWarpCols;
    float acc[T::kMTiles][T::kNTiles][4] = {};
    // Every step commits a group, empty or not, so that the wait below counts uniformly.
#pragma unroll
    for (int st = 0; st < T::kStages - 1; ++st) {
        if (st < steps) load_next(st);
        cp_async_commit();
    }
    int tile = 0, k_step = 0;  // the multiplying side
    for (int t = 0; t < steps; ++t) {
        cp_async_wait<T::kStages - 2>();  // step t has landed (this thread's part)
        __syncthreads();                  // everyone's part; and slot (t - 1) % Stages is free
        if (t + T::kStages - 1 < steps) load_next((t + T::kStages - 1) % T::kStages);
        cp_async_commit();
        const __nv_bfloat16* stage = smem + (t % T::kStages) * T::kStageElems;
        mma_stage<T>(stage, stage + T::kRows * T::kStride, warp_row, warp_col, acc);
        if (++k_step == num_k_tiles) {
            store_tile<T, kSiluMul>(acc, y, tile_row0(tile), tile_out0(tile), warp_row, warp_col,
                                    max_rows, n);
#pragma unroll
            for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
                for (int nt = 0; nt < T::kNTiles; ++nt)
#pragma unroll
                    for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.f;
            k_step = 0, ++tile;
        }
    }
}

template <class T, bool kSiluMul>
void launch(const Tensor& x, const Tensor* row_token, const Tensor& w, const Tensor& expert_offsets,
            const GroupedGemmDims& d, Tensor& y, cudaStream_t stream) {
    const int64_t row_tiles = (d.max_rows + T::kRows - 1) / T::kRows;
    const int64_t col_tiles = (d.n + T::kCols - 1) / T::kCols;
    MI_LAUNCH_CHECK(col_tiles <= 65535, "grouped_gemm: n too large for the grid");
    allow_shared_memory<grouped_gemm_kernel<T, kSiluMul>>(T::kSharedBytes);
    launch_kernel(grouped_gemm_kernel<T, kSiluMul>, dim3(unsigned(row_tiles), unsigned(col_tiles)),
                  T::kThreads, T::kSharedBytes, stream, x.data<__nv_bfloat16>(),
                  row_token ? row_token->data<int32_t>() : nullptr, w.data<__nv_bfloat16>(),
                  expert_offsets.data<int32_t>(), y.data<__nv_bfloat16>(), int(d.num_experts),
                  int(d.max_rows), int(d.n), int(d.k), d.gather);
    MI_CUDA_CHECK(cudaGetLastError());
}

// grouped_gemm_persistent_kernel: as many CTAs as fit on the device at once (fewer when the
// host's bound on the tiles is smaller).
template <class T, bool kSiluMul>
void launch_persistent(const Tensor& x, const Tensor* row_token, const Tensor& w,
                       const Tensor& expert_offsets, const GroupedGemmDims& d, Tensor& y,
                       cudaStream_t stream) {
    constexpr auto kernel = grouped_gemm_persistent_kernel<T, kSiluMul>;
    constexpr size_t smem = T::kSharedBytes + kOffsetsBytes;
    static const int resident = [] {
        allow_shared_memory<kernel>(smem);
        int per_sm = 0;
        MI_CUDA_CHECK(
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, T::kThreads, smem));
        return std::max(per_sm, 1) * sm_count();
    }();
    constexpr int64_t kOutCols = kSiluMul ? T::kCols / 2 : T::kCols;
    const int64_t tiles = (d.max_rows / T::kRows) * ((d.y_cols + kOutCols - 1) / kOutCols);
    if (tiles == 0) return;
    launch_kernel(kernel, unsigned(std::min<int64_t>(tiles, resident)), T::kThreads, smem, stream,
                  x.data<__nv_bfloat16>(), row_token ? row_token->data<int32_t>() : nullptr,
                  w.data<__nv_bfloat16>(), expert_offsets.data<int32_t>(), y.data<__nv_bfloat16>(),
                  int(d.num_experts), int(d.max_rows), int(d.n), int(d.k), d.gather);
    MI_CUDA_CHECK(cudaGetLastError());
}

// The one dispatch place of the mma.sync kernel: tile shape × epilogue × grid.
template <class T>
void launch_tile(const Tensor& x, const Tensor* row_token, const Tensor& w,
                 const Tensor& expert_offsets, GroupedGemmEpilogue epilogue,
                 const GroupedGemmDims& d, Tensor& y, cudaStream_t stream,
                 bool persistent = false) {
    const bool silu = epilogue == GroupedGemmEpilogue::kSiluMul;
    if constexpr (T::kRows <= 32) {  // the decode tiles (runs_persistent)
        if (persistent && silu)
            return launch_persistent<T, true>(x, row_token, w, expert_offsets, d, y, stream);
        if (persistent)
            return launch_persistent<T, false>(x, row_token, w, expert_offsets, d, y, stream);
    }
    if (silu)
        launch<T, true>(x, row_token, w, expert_offsets, d, y, stream);
    else
        launch<T, false>(x, row_token, w, expert_offsets, d, y, stream);
}

}  // namespace miniinfer::cuda::grouped_mma
