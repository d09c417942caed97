// Grouped GEMM of the MoE experts on Hopper's warpgroup tensor cores (wgmma.mma_async
// m64n256k16, bf16 operands from shared memory, fp32 accumulators in registers), warp-specialised
// and persistent. Same contract as grouped_gemm (grouped_gemm.h) with a 128- or 64-row tile; sm_90a
// only.
//
// Why a second kernel: mma.sync on the H100/H200 reaches about half of the tensor cores' rate.
// wgmma issues one 64 × 256 × 16 product per warpgroup instruction and reads both operands
// straight from shared memory, so no ldmatrix and no operand registers are needed.
//
// Tiles: 128 rows of x (one expert's, segments being padded to 128) × 256 columns of y, k in
// steps of 64 (128 bytes of bf16 per row: one swizzle row); or 64 rows, for decode-sized steps.
//   - 384 threads: warpgroup 0 loads, warpgroups 1 and 2 multiply (rows 0-63 and 64-127 of the
//     tile and all 256 columns: 128 fp32 accumulators a thread); 256 with 64-row tiles.
//   - a ring of stages (Shape: three of x 16 KB + w 32 KB with 128-row tiles, four of 8 + 32 KB
//     with 64-row ones), each with a "full" and an "empty" mbarrier (hopper_async.cuh). The loader
//     waits for a stage to be empty; thread 0 starts a TMA copy of the w tile (the tensor map's
//     128-byte swizzle writes exactly the layout the wgmma descriptors read) and every loader
//     thread its cp.async's of the x rows (gathered through row_token: TMA cannot gather), arriving
//     on "full" when they land. A multiplier waits for "full", issues the stage's 4 wgmmas, and
//     once the previous stage's wgmmas have retired (wgmma_wait<1>) arrives on that stage's
//     "empty". No barrier of the whole CTA ends a k step.
//   - one CTA an SM walks the working tiles: row tiles below offsets[E] × column tiles, column
//     tiles fastest (the CTAs resident at one time cover every column tile of a few row tiles, so
//     each expert's weights and each row tile of x come from HBM about once); CTA b takes tiles
//     b, b + G, .... The loader runs on into the next tile while the multipliers store the last.
//   - the epilogue: each multiplying warpgroup writes its 64 rows as bf16 into its own staging
//     area (64 × 64 boxes in the 128-byte swizzle: conflict-free) and one thread hands them to
//     TMA stores, which run while the warpgroup starts its next tile; the stores clip at the
//     edges of y, so no row or column tail needs a test.
//   - kSiluMul: two TMA boxes of 128 rows, the gate rows then the up rows of the tile's 128 output
//     columns, so n8 blocks j (gate) and j + 16 (up) of a thread hold the same output columns.
// Shared tiles use the 128-byte swizzle wgmma understands (wgmma.cuh): each operand row is 128
// bytes (64 bf16 of k), rows stacked densely, 16-byte chunk c of row r stored at chunk c ^ (r % 8);
// 8 rows = 1024 bytes is one swizzle atom, atoms 1024-byte aligned. The k16 slices of a 64-wide
// tile start 32 bytes apart: the descriptor's start address advances by 2 per slice.
// Tails: k past its end and rows past the tensors are zero-filled (TMA and cp.async with src-size
// 0); w rows past the expert's n feed output columns that are never stored; so any n, k that are
// multiples of 8 work.
// Measured on the H200 at 8,192 tokens of 30B-A3B against the kernel this one replaced (every
// thread loading by cp.async and multiplying, a __syncthreads a k step, one CTA a tile, its
// output staged in the ring): gate_up 783 -> 663 µs, down 481 -> 399 µs; 30B-A3B prefill256
// 59,340 -> 63,254 prompt tok/s. A first version storing y from registers (a warp's store then
// writes 16 bytes into each of 8 rows) made down slower instead (569 µs); SiLU·mul in the
// epilogue still loses to the separate kernel (prefill256 62,669).
// The 64-row tile at decode sizes (a few to 20 rows an expert, most of the tile padding): the
// weights stream from HBM and the MMAs are nearly free, so what counts is the bytes in flight,
// three stages of 32 KB of weights a CTA by TMA. Against the 32-row mma.sync tile (persistent,
// cp.async): 30B-A3B decode256 10,093 -> 10,705 tok/s, balanced 5,535 -> 5,761.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "kernels/cuda/elementwise/silu_mul.cuh"
#include "kernels/cuda/gemm/grouped_gemm.h"
#include "kernels/cuda/primitives/hopper_async.cuh"
#include "kernels/cuda/primitives/launch.cuh"
#include "kernels/cuda/primitives/mma_bf16.cuh"
#include "kernels/cuda/primitives/tensor_map.h"
#include "kernels/cuda/primitives/wgmma.cuh"

namespace miniinfer::cuda {
namespace {

constexpr int kTileCols = 256;                  // columns of y (rows of w[e]) per tile
constexpr int kTileK = 64;                      // k per stage: one 128-byte swizzle row
constexpr int kWarpgroupRows = 64;              // rows of a multiplying warpgroup: the wgmma's m
constexpr int kRowBytes = kTileK * 2;           // 128
constexpr int kChunksPerRow = kRowBytes / 16;   // 8
constexpr int kAtomBytes = 8 * kRowBytes;       // 1024: one swizzle atom
constexpr int kBBytes = kTileCols * kRowBytes;  // w tile of one stage: 32 KB
constexpr int kOutBox = 64;  // TMA store box: 64 columns (one swizzle row) × 64 rows
constexpr int kMaxExperts = int(kGroupedGemmSm90MaxExperts);  // offsets kept in shared memory

// The row tiles: 128 rows (prefill: two multiplying warpgroups, 3 stages of 48 KB) and 64 (decode
// sizes, where the weights stream from HBM: one multiplying warpgroup, 4 stages of 40 KB, so that
// more weight bytes are in flight).
template <int Rows>
struct Shape {
    static constexpr int kRows = Rows;
    static constexpr int kWarpgroups = Rows / kWarpgroupRows;  // multiplying warpgroups
    static constexpr int kThreads = 128 * (1 + kWarpgroups);   // + the loader warpgroup
    static constexpr int kStages = Rows == 64 ? 4 : 3;
    static constexpr int kABytes = Rows * kRowBytes;  // x tile of one stage
    static constexpr int kStageBytes = kABytes + kBBytes;
    static constexpr int kXRowsPerThread = Rows * kChunksPerRow / 128;  // x rows a loader thread
    static constexpr int kWgOutBytes = kWarpgroupRows * kTileCols * 2;  // a warpgroup's staged y
    static constexpr int kSmemBytes = kStages * kStageBytes + kWarpgroups * kWgOutBytes +
                                      2 * kStages * 8 + (kMaxExperts + 1) * 4 + kAtomBytes;
    static_assert(kABytes % kAtomBytes == 0 && kSmemBytes <= 227 * 1024);
    static_assert(kXRowsPerThread * 128 == Rows * kChunksPerRow, "whole x rows per loader pass");
};

static_assert(kWarpgroupRows == 64 && kTileCols == 256, "one m64n256k16 per warpgroup per k16");
static_assert(kRowBytes == kWgmmaRowBytes && kAtomBytes == kWgmmaAtomBytes,
              "the tiles use wgmma.cuh's swizzle rows and atoms");

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// A multiplying thread's fp32 accumulators: acc[j] holds n8 block j of the tile's columns, in
// wgmma.cuh's layout (wgmma_ss<kTileCols>'s d).
constexpr int kAccBlocks = kTileCols / 8;

constexpr int kXRowStep = 128 / kChunksPerRow;  // 16 tile rows between a loader thread's rows

// The loader warpgroup (threads 0-127): fills the ring for every tile of this CTA.
template <class S, bool kSiluMul>
__device__ __forceinline__ void load_tiles(const CUtensorMap& w_map, const __nv_bfloat16* x,
                                           const int32_t* row_token, const int32_t* seg,
                                           uint32_t ring, uint32_t full, uint32_t empty,
                                           int num_experts, int max_rows, int n, int k, bool gather,
                                           int col_tiles, int num_tiles) {
    constexpr int kOutCols = kSiluMul ? kTileCols / 2 : kTileCols;
    const int y_cols = kSiluMul ? n / 2 : n;
    const int row = int(threadIdx.x) / kChunksPerRow, chunk = int(threadIdx.x) % kChunksPerRow;
    const int num_k_tiles = (k + kTileK - 1) / kTileK;
    int stage = 0;
    uint32_t phase = 0;
    for (int tile = int(blockIdx.x); tile < num_tiles; tile += int(gridDim.x)) {
        const int row0 = tile / col_tiles * S::kRows, out0 = tile % col_tiles * kOutCols;
        const int w_row = segment_of(seg, num_experts, row0) * n + out0;  // row of w as [E n, k]
        const __nv_bfloat16* src[S::kXRowsPerThread];
#pragma unroll
        for (int i = 0; i < S::kXRowsPerThread; ++i) {
            const int r =
                grouped_gemm_source_row(row_token, row0 + row + i * kXRowStep, max_rows, gather);
            src[i] = r < 0 ? nullptr : x + int64_t(r) * k;
        }
        for (int kt = 0; kt < num_k_tiles; ++kt) {
            mbarrier_wait(empty + 8 * stage, phase ^ 1);
            const uint32_t dst = ring + stage * S::kStageBytes, bar = full + 8 * stage;
            if (threadIdx.x == 0) {
                mbarrier_arrive_expect_tx(bar, kBBytes);
                if constexpr (kSiluMul) {
                    tma_load_2d(dst + S::kABytes, &w_map, kt * kTileK, w_row, bar);
                    tma_load_2d(dst + S::kABytes + kBBytes / 2, &w_map, kt * kTileK, w_row + y_cols,
                                bar);
                } else {
                    tma_load_2d(dst + S::kABytes, &w_map, kt * kTileK, w_row, bar);
                }
            }
            const int kk = kt * kTileK + chunk * 8;
#pragma unroll
            for (int i = 0; i < S::kXRowsPerThread; ++i) {
                const bool valid = kk < k && src[i] != nullptr;
                cp_async_16_to(dst + swizzled(row + i * kXRowStep, chunk), valid ? src[i] + kk : x,
                               valid);
            }
            cp_async_arrive_noinc(bar);
            if (++stage == S::kStages) stage = 0, phase ^= 1;
        }
    }
    cp_async_wait_all();  // nothing of this thread's left in flight when it exits
}

// A multiplying warpgroup (`wg` 0 or 1: rows 64 wg .. 64 wg + 63 of each tile).
// `out`: its staging area, 1024-aligned.
template <class S, bool kSiluMul>
__device__ __forceinline__ void multiply_tiles(const CUtensorMap& y_map, uint32_t ring,
                                               uint32_t full, uint32_t empty, uint32_t out, int k,
                                               int col_tiles, int num_tiles, int wg) {
    constexpr int kOutCols = kSiluMul ? kTileCols / 2 : kTileCols;
    const int num_k_tiles = (k + kTileK - 1) / kTileK;
    const int warp = int(threadIdx.x) % 128 / 32, lane = int(threadIdx.x) % 32;
    int stage = 0;
    uint32_t phase = 0;
    float acc[kAccBlocks][4];
    for (int tile = int(blockIdx.x); tile < num_tiles; tile += int(gridDim.x)) {
        const int row0 = tile / col_tiles * S::kRows, out0 = tile % col_tiles * kOutCols;
#pragma unroll
        for (int j = 0; j < kAccBlocks; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
        int last = stage;
        for (int kt = 0; kt < num_k_tiles; ++kt) {
            mbarrier_wait(full + 8 * stage, phase);
            const uint32_t src = ring + stage * S::kStageBytes;
            const uint64_t a_desc = smem_desc(src + wg * kWarpgroupRows * kRowBytes);
            const uint64_t b_desc = smem_desc(src + S::kABytes);
            wgmma_fence();
#pragma unroll
            for (int s = 0; s < kTileK / 16; ++s)
                wgmma_ss<kTileCols>(acc, a_desc + 2 * s, b_desc + 2 * s);
            wgmma_commit();
            wgmma_wait<1>();  // the previous stage's wgmmas have retired: hand it back
            if (kt > 0) mbarrier_arrive(empty + 8 * last);
            last = stage;
            if (++stage == S::kStages) stage = 0, phase ^= 1;
        }
        wgmma_wait<0>();
        mbarrier_arrive(empty + 8 * last);
#pragma unroll
        for (int j = 0; j < kAccBlocks; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i) wgmma_fence_operand(acc[j][i]);

        // The stores of the previous tile have read the staging area: write it again.
        if (threadIdx.x % 128 == 0) tma_store_wait_read();
        named_barrier(1 + wg, 128);
#pragma unroll
        for (int j = 0; j < kOutCols / 8; ++j) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int r = warp * 16 + lane / 4 + half * 8;  // row of the warpgroup's 64
                uint32_t pair;
                if constexpr (kSiluMul) {  // n8 blocks j (gate) and j + 16 (up)
                    const float* g = acc[j] + 2 * half;
                    const float* u = acc[j + kOutCols / 8] + 2 * half;
                    pair = silu_mul_pack(g[0], g[1], u[0], u[1]);
                } else {
                    pair = pack_bf16(acc[j][2 * half], acc[j][2 * half + 1]);
                }
                // Box j / 8 (8 KB each), row r, chunk j % 8 swizzled, bf16 pair lane % 4.
                const uint32_t at = out + (j / 8) * (kWarpgroupRows * kRowBytes) +
                                    swizzled(r, j % 8) + (lane % 4) * 4;
                asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at), "r"(pair) : "memory");
            }
        }
        fence_proxy_async_shared();  // the staged tile, before the TMA reads it
        named_barrier(1 + wg, 128);
        if (threadIdx.x % 128 == 0) {
#pragma unroll
            for (int b = 0; b < kOutCols / kOutBox; ++b)
                tma_store_2d(&y_map, out0 + b * kOutBox, row0 + wg * kWarpgroupRows,
                             out + b * (kWarpgroupRows * kRowBytes));
            tma_store_commit();
        }
    }
    if (threadIdx.x % 128 == 0) tma_store_wait();
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// w_map: w as a [num_experts n, k] bf16 matrix, boxes of 64 k × 256 rows (128 with kSiluMul);
// y_map: y as [max_rows, y_cols] (y_cols = n / 2 with kSiluMul), boxes of 64 × 64; both with the
// 128-byte swizzle. x: [max_rows, k], or [num_tokens, k] with row_token: [max_rows]; offsets:
// [num_experts + 1], multiples of S::kRows; row_token in [-1, num_tokens) (trusted). Grid: up to
// one CTA an SM.
template <class S, bool kSiluMul>
__global__ void __launch_bounds__(S::kThreads, 1)
    grouped_gemm_sm90_kernel(const __grid_constant__ CUtensorMap w_map,
                             const __grid_constant__ CUtensorMap y_map,
                             const __nv_bfloat16* __restrict__ x,
                             const int32_t* __restrict__ row_token,
                             const int32_t* __restrict__ offsets, int num_experts, int max_rows,
                             int n, int k, bool gather) {
    pdl_wait();
    pdl_trigger();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ uint8_t smem_raw[];
    const uint32_t base = smem_u32(smem_raw);
    const uint32_t ring = (base + kAtomBytes - 1) & ~uint32_t(kAtomBytes - 1);
    const uint32_t staging = ring + S::kStages * S::kStageBytes;  // 1024-aligned: stages are
    const uint32_t full = staging + S::kWarpgroups * S::kWgOutBytes, empty = full + S::kStages * 8;
    int32_t* seg = reinterpret_cast<int32_t*>(smem_raw + (empty + S::kStages * 8 - base));
    for (int e = int(threadIdx.x); e <= num_experts; e += S::kThreads) seg[e] = offsets[e];
    if (threadIdx.x == 0) {
        for (int s = 0; s < S::kStages; ++s) {
            mbarrier_init(full + 8 * s, 128 + 1);  // the loaders' cp.async's + the TMA's expect_tx
            mbarrier_init(empty + 8 * s, 128 * S::kWarpgroups);  // every multiplying thread
        }
        mbarrier_init_fence();
    }
    __syncthreads();
    constexpr int kOutCols = kSiluMul ? kTileCols / 2 : kTileCols;
    const int col_tiles = ((kSiluMul ? n / 2 : n) + kOutCols - 1) / kOutCols;
    const int num_tiles = seg[num_experts] / S::kRows * col_tiles;
    if (threadIdx.x < 128)
        load_tiles<S, kSiluMul>(w_map, x, row_token, seg, ring, full, empty, num_experts, max_rows,
                                n, k, gather, col_tiles, num_tiles);
    else
        multiply_tiles<S, kSiluMul>(y_map, ring, full, empty,
                                    staging + (threadIdx.x / 128 - 1) * S::kWgOutBytes, k,
                                    col_tiles, num_tiles, int(threadIdx.x) / 128 - 1);
#else
    __trap();  // built without sm_90a features: the launcher refuses such devices
#endif
}

template <class S, bool kSiluMul>
void launch(const Tensor& x, const Tensor* row_token, const Tensor& w, const Tensor& expert_offsets,
            const GroupedGemmDims& d, Tensor& y, cudaStream_t stream) {
    constexpr int kOutCols = kSiluMul ? kTileCols / 2 : kTileCols;
    const int64_t tiles =
        (d.max_rows + S::kRows - 1) / S::kRows * ((d.y_cols + kOutCols - 1) / kOutCols);  // at most
    const CUtensorMap w_map =
        tensor_map_2d(w.data<__nv_bfloat16>(), CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
                      d.num_experts * d.n, d.k, kTileK, kSiluMul ? kTileCols / 2 : kTileCols);
    const CUtensorMap y_map =
        tensor_map_2d(y.data<__nv_bfloat16>(), CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, d.max_rows,
                      d.y_cols, kOutBox, kOutBox);
    allow_shared_memory<grouped_gemm_sm90_kernel<S, kSiluMul>>(S::kSmemBytes);
    launch_kernel(grouped_gemm_sm90_kernel<S, kSiluMul>,
                  unsigned(std::min<int64_t>(tiles, sm_count())), S::kThreads, S::kSmemBytes,
                  stream, w_map, y_map, x.data<__nv_bfloat16>(),
                  row_token ? row_token->data<int32_t>() : nullptr, expert_offsets.data<int32_t>(),
                  int(d.num_experts), int(d.max_rows), int(d.n), int(d.k), d.gather);
    MI_CUDA_CHECK(cudaGetLastError());
}

template <class S>
void launch(const Tensor& x, const Tensor* row_token, const Tensor& w, const Tensor& expert_offsets,
            GroupedGemmEpilogue epilogue, const GroupedGemmDims& d, Tensor& y,
            cudaStream_t stream) {
    if (epilogue == GroupedGemmEpilogue::kSiluMul)
        launch<S, true>(x, row_token, w, expert_offsets, d, y, stream);
    else
        launch<S, false>(x, row_token, w, expert_offsets, d, y, stream);
}

}  // namespace

bool grouped_gemm_sm90_supported() {
    int device = 0, major = 0, minor = 0;
    MI_CUDA_CHECK(cudaGetDevice(&device));
    MI_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    MI_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    return major == 9 && minor == 0;
}

void grouped_gemm_sm90(const Tensor& x, const Tensor* row_token, const Tensor& w,
                       const Tensor& expert_offsets, GroupedGemmEpilogue epilogue, Tensor& y,
                       cudaStream_t stream, GroupedGemmRows rows, int64_t tile_rows) {
    const GroupedGemmDims d =
        check_grouped_gemm(x, row_token, w, expert_offsets, epilogue, y, 16, rows);
    MI_LAUNCH_CHECK(grouped_gemm_sm90_supported(),
                    "grouped_gemm_sm90: needs an sm_90 device (wgmma is sm_90a only)");
    if (d.max_rows == 0) return;
    MI_LAUNCH_CHECK(d.num_experts <= kMaxExperts, "grouped_gemm_sm90: too many experts");
    MI_LAUNCH_CHECK(tile_rows == 64 || tile_rows == 128, "grouped_gemm_sm90: tile_rows 64 or 128");
    if (tile_rows == 64)
        launch<Shape<64>>(x, row_token, w, expert_offsets, epilogue, d, y, stream);
    else
        launch<Shape<128>>(x, row_token, w, expert_offsets, epilogue, d, y, stream);
}

}  // namespace miniinfer::cuda
