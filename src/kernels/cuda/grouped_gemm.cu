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
// with its ring running on from one tile into the next (30B-A3B decode256 +5.4% on the H200).
// One tile shape per row tile (the Tile structs below), picked by grouped_gemm_tile_rows from the
// step's rows per expert:
//   16, 32 rows (decode): a few rows per expert; the kernel streams each active expert's weights
//     once, so it is bound by memory. Small row tiles waste fewer MMAs, and TileK 64 with three
//     or four stages keeps 32-48 KB of weights in flight per CTA. 16-row tiles take 64 columns,
//     so that one token's 8 experts still spread over 192 CTAs (32 columns, six stages and two
//     warps measured slower on the H200: 37 against 32 µs for gate_up at one token). 32-row
//     tiles take three stages (69 KB of shared memory, three CTAs an SM instead of two): the
//     fastest of eight shapes at 256 tokens of 30B-A3B (bench_cuda_ops "moe tile32" 256 on the
//     H200: gate_up 263 against 287 µs with four stages, down 141 against 152).
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
// L2 requests all the same (Nsight Compute on the 32-row gate_up: L2 93% busy, a quarter of the
// bytes of its L2 loads unused).
// Fused SiLU (kSiluMul): the CTA loads its w tile with gate and up rows interleaved in blocks of
// 8: shared rows 16 j .. 16 j + 7 are gate rows c0 + 8 j .., rows 16 j + 8 .. 16 j + 15 the up
// rows inter + c0 + 8 j .. (c0 = the CTA's first output column). A warp's n8 fragments 2 np and
// 2 np + 1 (one ldmatrix_x4 of 16 w rows) are then the gate and up sums of the same 8 output
// columns, in the same thread's registers: the epilogue applies silu_mul to them and stores act
// directly. The CTA covers TileCols / 2 output columns.
#include "kernels/cuda/grouped_gemm.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "core/env.h"
#include "kernels/cuda/check_tensor.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma_bf16.cuh"
#include "kernels/cuda/silu_mul.cuh"

namespace miniinfer::cuda {
namespace {

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

// The 32-row shapes benchmarked against Tile32 at decode sizes (grouped_gemm_variant):
// shallower or deeper rings (more or fewer CTAs an SM), longer k runs per weight row (256 B
// instead of 128 B per row and stage), narrower or wider column tiles (more CTAs, or more bytes
// per CTA), more warps to issue the loads. Measured on the H200 at 256 tokens of 30B-A3B
// (gate_up + down, µs): 128 x k64 with 2 stages 379, 3 stages 404 (the default before), 8 warps
// 406, 64 x k64 3 stages 430; dropped after those sweeps: 128 x k64 4 stages 438, 64 x k64 4
// stages 430, 256 x k64 3 stages 8 warps 432, 64 x k128 516, 128 x k128 3 stages 603, 128 x k32
// 8 stages 655, 64 x k64 6 stages 2 warps 758. Fewer stages (less shared memory, more CTAs an
// SM) won each time. Session 9, same op, one call: the default 237 + 133 = 370; the w tile by
// Hopper bulk copies (cp.async.bulk, one 128- or 256-byte request per weight row and stage on a
// shared-memory barrier, an eighth of the load instructions) 260 + 144 with 2 stages, 269 + 159
// with 3, 261 + 145 at k128: slower, dropped. (Nsight Compute on the default's gate_up in another
// call: DRAM 76% of peak, L2 93% busy, half the issue slots used, 4 CTAs an SM by shared
// memory.) Session 10: rows stored dense with their 16-byte chunks XOR-permuted by the row
// instead of padded (41 KB a CTA, five CTAs an SM instead of four) made 254 + 138, and the
// 30B-A3B's decode256 9,218 tok/s against 9,584: more CTAs an SM do not help past four, dropped.
// Then, one CTA an SM with 256-byte runs of each weight row a stage (157 KB): the shape vLLM's
// tuned Triton configuration picks for this GEMM at 256 tokens on the H200. Session 11, one call
// (gate_up + down, µs): the default 247 + 138, 8 warps 248 + 137, 256 x k64 8 warps 248 + 139;
// dropped after it: 128 x k128 299 + 160, vLLM's 256 x k128 347 + 193 (4 warps) and 296 + 163 (8
// warps), 64 x k64 3 stages 281 + 148, and the 16-row tile's winner at 32 rows, 64 x k128: 271 +
// 149 (2 stages), 344 + 190 (3), 271 + 149 (2 x 2 warps).
// Session 23, with the persistent grid (MINIINFER_MOE_TILE32=v, 30B-A3B decode256 tok/s, SiLU·mul
// as its own kernel): call 2, the default 10,281 / 10,279, 3 stages 10,074, 8 warps 10,226, 64 x
// k64 9,722, 256 x k64 8 warps 10,345, 3 stages 8 warps 10,077; call 4 (a slower machine), the
// default 9,864, dropped after it: 64 x k128 9,456, 128 x k128 9,374.
using Tile32Variants =
    std::tuple<Tile32, Tile<32, 128, 64, 3, 1, 4>, Tile<32, 128, 64, 2, 1, 8>,
               Tile<32, 64, 64, 2, 1, 4>, Tile<32, 256, 64, 2, 1, 8>, Tile<32, 128, 64, 3, 1, 8>>;

// The 16-row shapes benchmarked against Tile16 (5 to ~64 tokens of 30B-A3B, where its gate_up
// also applies SiLU·mul): fewer stages, longer k runs, wider column tiles — among them the shapes
// vLLM's tuned H200 configuration picks at 16 to 128 tokens. Session 11 on the H200
// (bench_cuda_ops "moe tile16" 32, gate_up + down, µs): 64 x k128 with 2 stages 206 + 112, now
// the default; 64 x k64 with 4 stages (the default before) 230 + 119, with 2 stages 235 + 112;
// dropped after it: 64 x k256 293 + 136, 128 x k128 253 + 126, 256 x k128 with 8 warps 260 + 128
// (also slowest at 8 and 64 tokens).
using Tile16Variants = std::tuple<Tile16, Tile<16, 64, 64, 4, 1, 4>, Tile<16, 64, 64, 2, 1, 4>>;

// "128 cols x k64, 2 stages, 4 warps": a tile shape's name for bench rows.
template <class T>
std::string shape_name() {
    return std::to_string(T::kCols) + " cols x k" + std::to_string(T::kK) + ", " +
           std::to_string(T::kStages) + " stages, " +
           (T::kWarpsM > 1 ? std::to_string(T::kWarpsM) + "x" : std::string()) +
           std::to_string(T::kWarpsN) + " warps";
}

// Variant `variant`'s name, the first marked "(default)".
template <class Variants>
const char* variant_name(int variant) {
    static const std::vector<std::string> names = []<size_t... I>(std::index_sequence<I...>) {
        std::vector<std::string> v = {shape_name<std::tuple_element_t<I, Variants>>()...};
        v[0] += " (default)";
        return v;
    }
    (std::make_index_sequence<std::tuple_size_v<Variants>>{});
    return names[size_t(variant)].c_str();
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
                        bool gather, bool skip_zero_rows) {
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
        if (skip_zero_rows && src_row[r] < 0)
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
        load_tile<T, T::kRows>(stage, x_row, w, k, k0, skip_zero_rows);
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
// output is the same chain of mma over k as in grouped_gemm_kernel: the same bits. On the H200,
// session 23 (MINIINFER_MOE_PERSISTENT=0 against the default, one machine): 30B-A3B decode256
// 9,701 -> 10,224 tok/s, balanced 5,339 -> 5,539.
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

// MINIINFER_MOE_SKIP_PADDING=0: zero rows loaded by zero-filling copies, and kPermuted's padding
// marks ignored (its x rows read as they are), as before (timing). The persistent kernel honours
// the second part only: its gathered padding rows are always shared stores of zeros.
bool skip_zero_rows() {
    static const bool skip = env_switch("MINIINFER_MOE_SKIP_PADDING", true);
    return skip;
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
                  int(d.max_rows), int(d.n), int(d.k), d.gather, skip_zero_rows());
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

// Whether a call with this grid choice runs persistent (the decode tiles only).
bool runs_persistent(GroupedGemmGrid grid, int64_t tile_rows, int64_t num_experts) {
    static const bool by_default = env_switch("MINIINFER_MOE_PERSISTENT", true);
    if (tile_rows > 32 || num_experts > kPersistentMaxExperts) return false;
    return grid == GroupedGemmGrid::kPersistent ||
           (grid == GroupedGemmGrid::kDefault && by_default);
}

bool aligned(const void* p, uintptr_t bytes) {
    return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Shape `variant` of Variants (Tile16Variants or Tile32Variants), epilogue as asked (kSiluMul
// only where kWithSiluMul: the 32-row shapes are compiled for kStore alone).
template <class Variants, bool kWithSiluMul>
void launch_variant(int variant, const Tensor& x, const Tensor* row_token, const Tensor& w,
                    const Tensor& expert_offsets, GroupedGemmEpilogue epilogue,
                    const GroupedGemmDims& d, Tensor& y, cudaStream_t stream,
                    bool persistent = false) {
    [&]<size_t... I>(std::index_sequence<I...>) {
        const auto one = [&]<class T>() {
            if constexpr (kWithSiluMul)
                launch_tile<T>(x, row_token, w, expert_offsets, epilogue, d, y, stream, persistent);
            else if (persistent)
                launch_persistent<T, false>(x, row_token, w, expert_offsets, d, y, stream);
            else
                launch<T, false>(x, row_token, w, expert_offsets, d, y, stream);
        };
        ((int(I) == variant ? one.template operator()<std::tuple_element_t<I, Variants>>()
                            : void()),
         ...);
    }
    (std::make_index_sequence<std::tuple_size_v<Variants>>{});
}

// MINIINFER_MOE_TILE16=v / MINIINFER_MOE_TILE32=v (read once): the model's GEMMs of that row
// tile in shape v of its variants instead of the default (the 16-row ones with either epilogue,
// the 32-row ones with kStore), to time a shape end to end (bench_cuda_ops times them alone);
// -1 when unset or out of range.
int variant_override(int64_t tile_rows) {
    static const int tile16 = [] {
        const int i = env_int("MINIINFER_MOE_TILE16", -1);
        return i >= 0 && i < int(std::tuple_size_v<Tile16Variants>) ? i : -1;
    }();
    static const int tile32 = [] {
        const int i = env_int("MINIINFER_MOE_TILE32", -1);
        return i >= 0 && i < int(std::tuple_size_v<Tile32Variants>) ? i : -1;
    }();
    return tile_rows == 16 ? tile16 : tile_rows == 32 ? tile32 : -1;
}

}  // namespace

int64_t grouped_gemm_tile_rows(int64_t routed_rows, int64_t num_experts) {
    const double per_expert = double(routed_rows) / double(std::max<int64_t>(num_experts, 1));
    if (per_expert <= 4) return 16;
    // On an sm_90 the 32-row tile's sizes take grouped_gemm_sm90's 64-row tile instead: padding
    // costs it MMAs, not bytes, and its loader keeps three stages of weights in flight by TMA
    // (H200, 30B-A3B: decode256 10,093 -> 10,705 tok/s, balanced 5,535 -> 5,761).
    // MINIINFER_MOE_WGMMA_DECODE=0 (read once) keeps the 32-row mma.sync tile.
    static const bool wgmma_decode = env_switch("MINIINFER_MOE_WGMMA_DECODE", true);
    if (per_expert <= 20) return wgmma_decode && grouped_gemm_sm90_supported() ? 64 : 32;
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
    if (rows == GroupedGemmRows::kPermuted && !skip_zero_rows()) row_token = nullptr;
    const GroupedGemmDims d =
        check_grouped_gemm(x, row_token, w, expert_offsets, epilogue, y, 4, rows);
    if (d.max_rows == 0) return;
    const bool persistent = runs_persistent(grid, tile_rows, d.num_experts);
    switch (tile_rows) {
        case 16:
            if (variant_override(16) >= 0)
                return launch_variant<Tile16Variants, true>(variant_override(16), x, row_token, w,
                                                            expert_offsets, epilogue, d, y, stream,
                                                            persistent);
            return launch_tile<Tile16>(x, row_token, w, expert_offsets, epilogue, d, y, stream,
                                       persistent);
        case 32:
            if (epilogue == GroupedGemmEpilogue::kStore && variant_override(32) >= 0)
                return launch_variant<Tile32Variants, false>(variant_override(32), x, row_token, w,
                                                             expert_offsets, epilogue, d, y, stream,
                                                             persistent);
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

int grouped_gemm_num_variants(int64_t tile_rows) {
    return tile_rows == 16   ? int(std::tuple_size_v<Tile16Variants>)
           : tile_rows == 32 ? int(std::tuple_size_v<Tile32Variants>)
                             : 0;
}

const char* grouped_gemm_variant_name(int64_t tile_rows, int variant) {
    MI_LAUNCH_CHECK(variant >= 0 && variant < grouped_gemm_num_variants(tile_rows),
                    "grouped_gemm_variant: no such variant");
    return tile_rows == 16 ? variant_name<Tile16Variants>(variant)
                           : variant_name<Tile32Variants>(variant);
}

void grouped_gemm_variant(int64_t tile_rows, int variant, const Tensor& x, const Tensor& w,
                          const Tensor& expert_offsets, GroupedGemmEpilogue epilogue, Tensor& y,
                          cudaStream_t stream) {
    grouped_gemm_variant_name(tile_rows, variant);  // checks the tile and the index
    MI_LAUNCH_CHECK(tile_rows == 16 || epilogue == GroupedGemmEpilogue::kStore,
                    "grouped_gemm_variant: the 32-row shapes take kStore only");
    const GroupedGemmDims d = check_grouped_gemm(x, nullptr, w, expert_offsets, epilogue, y, 4);
    if (d.max_rows == 0) return;
    if (tile_rows == 16)
        launch_variant<Tile16Variants, true>(variant, x, nullptr, w, expert_offsets, epilogue, d, y,
                                             stream);
    else
        launch_variant<Tile32Variants, false>(variant, x, nullptr, w, expert_offsets, epilogue, d,
                                              y, stream);
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
