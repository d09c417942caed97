// Block-scaled FP8 GEMMs on Hopper's warpgroup tensor cores (wgmma m64n128k32 e4m3, fp32
// accumulators), warp-specialised and persistent: grouped_gemm_sm90.cu's pipeline with FP8 tiles
// and the scales promoted once per k block. sm_90a only.
//
// Why the promotion: the tensor cores' FP8 accumulation keeps fewer bits than fp32, and every
// k block has its own pair of scales anyway. So each stage (one k block of 128: one 128-byte
// swizzle row of e4m3) runs its four k32 wgmmas into a fresh fp32 product, waits for them, and
// adds product · x_scale[row] · w_scale into the accumulators (one FMA each): the CPU reference's
// arithmetic (kernels/cpu/fp8_linear.h) in another order.
// Tiles: 128 or 64 rows × 128 columns (one weight block of rows, so one w scale a stage) × 128 k.
//   - warpgroup 0 loads: a TMA copy of the w tile, cp.async's of the x rows (gathered through
//     row_token) and of their x scales and the w scale into the stage's scale slots, all arriving
//     on the stage's "full" mbarrier;
//   - warpgroups 1 (and 2) multiply 64 rows each: the product and the accumulators are 64 fp32
//     registers a thread each, so the two fit where one 256-column tile would not;
//   - the epilogue as grouped_gemm_sm90's: bf16 (bias added in fp32 first) staged in the
//     128-byte swizzle and stored by TMA, clipped at y's edges.
// While one multiplying warpgroup promotes, the other's wgmmas run. The dense GEMM is the same
// kernel with one expert and implicit offsets [0, m rounded up to the tile].
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "kernels/cuda/gemm/fp8_gemm.h"
#include "kernels/cuda/primitives/check_tensor.h"
#include "kernels/cuda/primitives/fp8.cuh"
#include "kernels/cuda/primitives/hopper_async.cuh"
#include "kernels/cuda/primitives/launch.cuh"
#include "kernels/cuda/primitives/mma_bf16.cuh"
#include "kernels/cuda/primitives/tensor_map.h"
#include "kernels/cuda/primitives/wgmma.cuh"

namespace miniinfer::cuda {
namespace {

constexpr int kTileCols = 128;         // columns of y per tile: one block of weight rows
constexpr int kTileK = kFp8GroupSize;  // k per stage: one k block, one 128-byte swizzle row
constexpr int kWarpgroupRows = 64;     // rows of a multiplying warpgroup: the wgmma's m
constexpr int kRowBytes = kTileK;      // e4m3: a byte an element
constexpr int kChunksPerRow = kRowBytes / 16;
constexpr int kAtomBytes = 8 * kRowBytes;
constexpr int kBBytes = kTileCols * kRowBytes;  // 16 KB of w a stage
constexpr int kOutBox = 64;                     // TMA store box: 64 bf16 columns × 64 rows
constexpr int kMaxExperts = int(kGroupedGemmSm90MaxExperts);

template <int Rows>
struct Shape {
    static constexpr int kRows = Rows;
    static constexpr int kWarpgroups = Rows / kWarpgroupRows;
    static constexpr int kThreads = 128 * (1 + kWarpgroups);
    static constexpr int kStages = Rows == 64 ? 7 : 5;
    static constexpr int kABytes = Rows * kRowBytes;
    static constexpr int kStageBytes = kABytes + kBBytes;
    static constexpr int kScaleFloats = Rows + 4;  // the rows' x scales, then w's (16-byte rounded)
    static constexpr int kXRowsPerThread = Rows * kChunksPerRow / 128;
    static constexpr int kWgOutBytes = kWarpgroupRows * kTileCols * 2;
    static constexpr int kSmemBytes = kAtomBytes + kStages * kStageBytes +
                                      kWarpgroups * kWgOutBytes + kStages * kScaleFloats * 4 +
                                      2 * kStages * 8 + (kMaxExperts + 1) * 4;
    static_assert(kStageBytes % kAtomBytes == 0 && kSmemBytes <= 227 * 1024);
    static_assert(kXRowsPerThread * 128 == Rows * kChunksPerRow, "whole x rows per loader pass");
};

static_assert(kRowBytes == kWgmmaRowBytes && kAtomBytes == kWgmmaAtomBytes);

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

constexpr int kAccBlocks = kTileCols / 8;       // n8 blocks of a multiplying thread
constexpr int kXRowStep = 128 / kChunksPerRow;  // 16 tile rows between a loader thread's rows

template <class S>
__device__ __forceinline__ void load_tiles(const CUtensorMap& w_map, const uint8_t* xq,
                                           const float* x_scale, const float* w_scale,
                                           const int32_t* row_token, const int32_t* seg,
                                           uint32_t ring, uint32_t scales, uint32_t full,
                                           uint32_t empty, int num_experts, int max_rows, int n,
                                           int k, bool gather, int col_tiles, int num_tiles) {
    const int row = int(threadIdx.x) / kChunksPerRow, chunk = int(threadIdx.x) % kChunksPerRow;
    const int k_blocks = (k + kTileK - 1) / kTileK, n_blocks = (n + kTileCols - 1) / kTileCols;
    int stage = 0;
    uint32_t phase = 0;
    for (int tile = int(blockIdx.x); tile < num_tiles; tile += int(gridDim.x)) {
        const int row0 = tile / col_tiles * S::kRows, out0 = tile % col_tiles * kTileCols;
        const int expert = segment_of(seg, num_experts, row0);
        const int w_row = expert * n + out0;  // row of w as [E n, k]
        const float* w_scales =
            w_scale + (int64_t(expert) * n_blocks + out0 / kTileCols) * k_blocks;
        int src[S::kXRowsPerThread];
#pragma unroll
        for (int i = 0; i < S::kXRowsPerThread; ++i)
            src[i] =
                grouped_gemm_source_row(row_token, row0 + row + i * kXRowStep, max_rows, gather);
        for (int kt = 0; kt < k_blocks; ++kt) {
            mbarrier_wait(empty + 8 * stage, phase ^ 1);
            const uint32_t dst = ring + stage * S::kStageBytes, bar = full + 8 * stage;
            const uint32_t scale_dst = scales + stage * S::kScaleFloats * 4;
            if (threadIdx.x == 0) {
                mbarrier_arrive_expect_tx(bar, kBBytes);
                tma_load_2d(dst + S::kABytes, &w_map, kt * kTileK, w_row, bar);
            }
            const int kk = kt * kTileK + chunk * 16;
#pragma unroll
            for (int i = 0; i < S::kXRowsPerThread; ++i) {
                const bool valid = kk < k && src[i] >= 0;
                cp_async_16_to(dst + swizzled(row + i * kXRowStep, chunk),
                               valid ? xq + int64_t(src[i]) * k + kk : xq, valid);
            }
            if (chunk == 0) {
#pragma unroll
                for (int i = 0; i < S::kXRowsPerThread; ++i) {
                    const bool valid = src[i] >= 0;
                    cp_async_4_to(scale_dst + (row + i * kXRowStep) * 4,
                                  valid ? x_scale + int64_t(src[i]) * k_blocks + kt : x_scale,
                                  valid);
                }
            }
            if (threadIdx.x == 1) cp_async_4_to(scale_dst + S::kRows * 4, w_scales + kt, true);
            cp_async_arrive_noinc(bar);
            if (++stage == S::kStages) stage = 0, phase ^= 1;
        }
    }
    cp_async_wait_all();
}

// A multiplying warpgroup (`wg` 0 or 1: rows 64 wg .. 64 wg + 63 of each tile); `out` its
// staging area (1024-aligned), `scale_area` the stages' scale slots.
template <class S>
__device__ __forceinline__ void multiply_tiles(const CUtensorMap& y_map, const __nv_bfloat16* bias,
                                               const float* scale_area, uint32_t ring,
                                               uint32_t full, uint32_t empty, uint32_t out, int n,
                                               int k, int col_tiles, int num_tiles, int wg) {
    const int k_blocks = (k + kTileK - 1) / kTileK;
    const int warp = int(threadIdx.x) % 128 / 32, lane = int(threadIdx.x) % 32;
    const int my_row = wg * kWarpgroupRows + warp * 16 + lane / 4;  // and my_row + 8
    int stage = 0;
    uint32_t phase = 0;
    float acc[kAccBlocks][4], part[kAccBlocks][4];
    for (int tile = int(blockIdx.x); tile < num_tiles; tile += int(gridDim.x)) {
        const int row0 = tile / col_tiles * S::kRows, out0 = tile % col_tiles * kTileCols;
#pragma unroll
        for (int j = 0; j < kAccBlocks; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
        for (int kt = 0; kt < k_blocks; ++kt) {
            mbarrier_wait(full + 8 * stage, phase);
            const uint32_t src = ring + stage * S::kStageBytes;
            const uint64_t a_desc = smem_desc(src + wg * kWarpgroupRows * kRowBytes);
            const uint64_t b_desc = smem_desc(src + S::kABytes);
            wgmma_fence();
#pragma unroll
            for (int s = 0; s < kTileK / 32; ++s)
                wgmma_ss_e4m3_n128(part, a_desc + 2 * s, b_desc + 2 * s, s > 0);
            wgmma_commit();
            wgmma_wait<0>();
#pragma unroll
            for (int j = 0; j < kAccBlocks; ++j)
#pragma unroll
                for (int i = 0; i < 4; ++i) wgmma_fence_operand(part[j][i]);
            const float* sc = scale_area + stage * S::kScaleFloats;
            const float w_s = sc[S::kRows];
            const float f_lo = sc[my_row] * w_s, f_hi = sc[my_row + 8] * w_s;
            mbarrier_arrive(empty + 8 * stage);  // operands and scales read: hand the stage back
#pragma unroll
            for (int j = 0; j < kAccBlocks; ++j) {
                acc[j][0] = fmaf(part[j][0], f_lo, acc[j][0]);
                acc[j][1] = fmaf(part[j][1], f_lo, acc[j][1]);
                acc[j][2] = fmaf(part[j][2], f_hi, acc[j][2]);
                acc[j][3] = fmaf(part[j][3], f_hi, acc[j][3]);
            }
            if (++stage == S::kStages) stage = 0, phase ^= 1;
        }

        if (threadIdx.x % 128 == 0) tma_store_wait_read();  // the last tile's stores have read out
        named_barrier(1 + wg, 128);
#pragma unroll
        for (int j = 0; j < kAccBlocks; ++j) {
            const int col = out0 + j * 8 + 2 * (lane % 4);
            float b0 = 0.f, b1 = 0.f;
            if (bias != nullptr && col < n) {
                b0 = __bfloat162float(bias[col]);
                b1 = __bfloat162float(bias[col + 1]);
            }
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int r = warp * 16 + lane / 4 + half * 8;
                const uint32_t pair = pack_bf16(acc[j][2 * half] + b0, acc[j][2 * half + 1] + b1);
                const uint32_t at = out + (j / 8) * (kWarpgroupRows * kRowBytes) +
                                    swizzled(r, j % 8) + (lane % 4) * 4;
                asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at), "r"(pair) : "memory");
            }
        }
        fence_proxy_async_shared();
        named_barrier(1 + wg, 128);
        if (threadIdx.x % 128 == 0) {
#pragma unroll
            for (int b = 0; b < kTileCols / kOutBox; ++b)
                tma_store_2d(&y_map, out0 + b * kOutBox, row0 + wg * kWarpgroupRows,
                             out + b * (kWarpgroupRows * kRowBytes));
            tma_store_commit();
        }
    }
    if (threadIdx.x % 128 == 0) tma_store_wait();
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// w_map: w as [E n, k] bytes, boxes of 128 × 128; y_map: y [max_rows, n] bf16, boxes of 64 × 64.
// offsets null: one expert over rows [0, max_rows rounded up to the tile) (the dense GEMM).
template <class S>
__global__ void __launch_bounds__(S::kThreads, 1)
    fp8_gemm_kernel(const __grid_constant__ CUtensorMap w_map,
                    const __grid_constant__ CUtensorMap y_map, const uint8_t* __restrict__ xq,
                    const float* __restrict__ x_scale, const float* __restrict__ w_scale,
                    const __nv_bfloat16* __restrict__ bias, const int32_t* __restrict__ row_token,
                    const int32_t* __restrict__ offsets, int num_experts, int max_rows, int n,
                    int k, bool gather) {
    pdl_wait();
    pdl_trigger();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ uint8_t smem_raw[];
    const uint32_t base = smem_u32(smem_raw);
    const uint32_t ring = (base + kAtomBytes - 1) & ~uint32_t(kAtomBytes - 1);
    const uint32_t staging = ring + S::kStages * S::kStageBytes;
    const uint32_t scales = staging + S::kWarpgroups * S::kWgOutBytes;
    const uint32_t full = scales + S::kStages * S::kScaleFloats * 4, empty = full + S::kStages * 8;
    const float* scale_area = reinterpret_cast<const float*>(smem_raw + (scales - base));
    int32_t* seg = reinterpret_cast<int32_t*>(smem_raw + (empty + S::kStages * 8 - base));
    if (offsets != nullptr) {
        for (int e = int(threadIdx.x); e <= num_experts; e += S::kThreads) seg[e] = offsets[e];
    } else if (threadIdx.x == 0) {
        seg[0] = 0;
        seg[1] = (max_rows + S::kRows - 1) / S::kRows * S::kRows;
    }
    if (threadIdx.x == 0) {
        for (int s = 0; s < S::kStages; ++s) {
            mbarrier_init(full + 8 * s, 128 + 1);
            mbarrier_init(empty + 8 * s, 128 * S::kWarpgroups);
        }
        mbarrier_init_fence();
    }
    __syncthreads();
    const int col_tiles = (n + kTileCols - 1) / kTileCols;
    const int num_tiles = seg[num_experts] / S::kRows * col_tiles;
    if (threadIdx.x < 128)
        load_tiles<S>(w_map, xq, x_scale, w_scale, row_token, seg, ring, scales, full, empty,
                      num_experts, max_rows, n, k, gather, col_tiles, num_tiles);
    else
        multiply_tiles<S>(y_map, bias, scale_area, ring, full, empty,
                          staging + (threadIdx.x / 128 - 1) * S::kWgOutBytes, n, k, col_tiles,
                          num_tiles, int(threadIdx.x) / 128 - 1);
#else
    __trap();  // built without sm_90a features: the launchers refuse such devices
#endif
}

struct Dims {
    int64_t num_experts, n, k, max_rows;
};

template <class S>
void launch(const Tensor& xq, const Tensor& x_scale, const Tensor* row_token, const Tensor& w,
            const Tensor& w_scale, const Tensor* bias, const int32_t* offsets, const Dims& d,
            bool gather, Tensor& y, cudaStream_t stream) {
    const int64_t tiles =
        (d.max_rows + S::kRows - 1) / S::kRows * ((d.n + kTileCols - 1) / kTileCols);
    const CUtensorMap w_map = tensor_map_2d(w.raw(), CU_TENSOR_MAP_DATA_TYPE_UINT8, 1,
                                            d.num_experts * d.n, d.k, kTileK, kTileCols);
    const CUtensorMap y_map = tensor_map_2d(y.raw(), CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
                                            d.max_rows, d.n, kOutBox, kOutBox);
    allow_shared_memory<fp8_gemm_kernel<S>>(S::kSmemBytes);
    launch_kernel(fp8_gemm_kernel<S>, unsigned(std::min<int64_t>(tiles, sm_count())), S::kThreads,
                  S::kSmemBytes, stream, w_map, y_map, static_cast<const uint8_t*>(xq.raw()),
                  x_scale.data<float>(), w_scale.data<float>(),
                  bias ? bias->data<__nv_bfloat16>() : nullptr,
                  row_token ? row_token->data<int32_t>() : nullptr, offsets, int(d.num_experts),
                  int(d.max_rows), int(d.n), int(d.k), gather);
    MI_CUDA_CHECK(cudaGetLastError());
}

int64_t blocks(int64_t v) {
    return (v + kFp8GroupSize - 1) / kFp8GroupSize;
}

void check_common(const Tensor& xq, const Tensor& x_scale, const Tensor& w, const Tensor& w_scale,
                  const Tensor& y, int64_t k, int64_t n) {
    check_cuda_tensor(xq, DType::kF8E4M3, "fp8_gemm: xq");
    check_cuda_tensor(x_scale, DType::kF32, "fp8_gemm: x_scale");
    check_cuda_tensor(w, DType::kF8E4M3, "fp8_gemm: w");
    check_cuda_tensor(w_scale, DType::kF32, "fp8_gemm: w_scale");
    check_cuda_tensor(y, DType::kBF16, "fp8_gemm: y");
    MI_LAUNCH_CHECK(fp8_gemm_supported(), "fp8_gemm: needs an sm_90 device (wgmma e4m3)");
    MI_LAUNCH_CHECK(k > 0 && k % 16 == 0 && n > 0 && n % 8 == 0,
                    "fp8_gemm: k must be a multiple of 16 and n of 8");
    MI_LAUNCH_CHECK(xq.size(-1) == k && xq.numel() / k * blocks(k) <= x_scale.numel(),
                    "fp8_gemm: xq's rows do not end in k or x_scale is too small");
    MI_LAUNCH_CHECK(aligned16(xq.raw()) && aligned16(w.raw()) && aligned16(y.raw()),
                    "fp8_gemm: xq, w and y must be 16-byte aligned");
}

}  // namespace

bool fp8_gemm_supported() {
    return grouped_gemm_sm90_supported();
}

void fp8_gemm(const Tensor& xq, const Tensor& x_scale, const Tensor& w, const Tensor& w_scale,
              const Tensor* bias, Tensor& y, cudaStream_t stream) {
    MI_LAUNCH_CHECK(w.ndim() == 2, "fp8_gemm: w must be [n, k]");
    const int64_t n = w.size(0), k = w.size(1);
    check_common(xq, x_scale, w, w_scale, y, k, n);
    const int64_t m = xq.numel() / k;
    MI_LAUNCH_CHECK(w_scale.numel() == blocks(n) * blocks(k),
                    "fp8_gemm: w_scale is not [n/128, k/128]");
    MI_LAUNCH_CHECK(y.numel() == m * n && y.size(-1) == n, "fp8_gemm: y is not [m, n]");
    if (bias) check_cuda_tensor(*bias, DType::kBF16, "fp8_gemm: bias", {n});
    if (m == 0) return;
    const Dims d{1, n, k, m};
    // 64-row tiles while 128-row ones would leave SMs idle (decode batches).
    const int64_t tiles128 = (m + 127) / 128 * ((n + kTileCols - 1) / kTileCols);
    if (tiles128 < sm_count())
        launch<Shape<64>>(xq, x_scale, nullptr, w, w_scale, bias, nullptr, d, true, y, stream);
    else
        launch<Shape<128>>(xq, x_scale, nullptr, w, w_scale, bias, nullptr, d, true, y, stream);
}

void fp8_grouped_gemm(const Tensor& xq, const Tensor& x_scale, const Tensor* row_token,
                      const Tensor& w, const Tensor& w_scale, const Tensor& expert_offsets,
                      int64_t tile_rows, Tensor& y, cudaStream_t stream, GroupedGemmRows rows) {
    MI_LAUNCH_CHECK(w.ndim() == 3, "fp8_grouped_gemm: w must be [E, n, k]");
    const int64_t num_experts = w.size(0), n = w.size(1), k = w.size(2);
    check_common(xq, x_scale, w, w_scale, y, k, n);
    check_cuda_tensor(expert_offsets, DType::kI32, "fp8_grouped_gemm: expert_offsets",
                      {num_experts + 1});
    MI_LAUNCH_CHECK(w_scale.numel() == num_experts * blocks(n) * blocks(k),
                    "fp8_grouped_gemm: w_scale is not [E, n/128, k/128]");
    MI_LAUNCH_CHECK(y.ndim() == 2 && y.size(1) == n, "fp8_grouped_gemm: y is not [max_rows, n]");
    const int64_t max_rows = y.size(0);
    if (row_token)
        check_cuda_tensor(*row_token, DType::kI32, "fp8_grouped_gemm: row_token", {max_rows});
    const bool gather = row_token != nullptr && rows == GroupedGemmRows::kGather;
    MI_LAUNCH_CHECK(gather || xq.numel() / k >= max_rows,
                    "fp8_grouped_gemm: permuted xq must hold max_rows rows");
    MI_LAUNCH_CHECK(num_experts <= kMaxExperts, "fp8_grouped_gemm: too many experts");
    MI_LAUNCH_CHECK(tile_rows == 64 || tile_rows == 128, "fp8_grouped_gemm: tile_rows 64 or 128");
    if (max_rows == 0) return;
    const Dims d{num_experts, n, k, max_rows};
    const int32_t* offsets = expert_offsets.data<int32_t>();
    if (tile_rows == 64)
        launch<Shape<64>>(xq, x_scale, row_token, w, w_scale, nullptr, offsets, d, gather, y,
                          stream);
    else
        launch<Shape<128>>(xq, x_scale, row_token, w, w_scale, nullptr, offsets, d, gather, y,
                           stream);
}

}  // namespace miniinfer::cuda
