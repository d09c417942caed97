// Grouped GEMM of the MoE experts on Hopper's warpgroup tensor cores (wgmma.mma_async
// m64n256k16, bf16 operands from shared memory, fp32 accumulators in registers). Same contract as
// grouped_gemm (grouped_gemm.h) with a 128-row tile; sm_90a only.
//
// Why a second kernel: mma.sync on the H100/H200 reaches about half of the tensor cores' rate.
// wgmma issues one 64 × 256 × 16 product per warpgroup instruction and reads both operands
// straight from shared memory, so no ldmatrix and no operand registers are needed.
//
// The grid is (n / 256 column tiles, max_rows / 128 row tiles), column tiles fastest: the CTAs
// resident at one time cover every column tile of a few row tiles, so each expert's weights and
// each row tile of x come from HBM about once (x-fastest would re-read x once per column tile).
//   - a CTA finds the expert of its 128-row tile as grouped_gemm does: __syncthreads_count of
//     (offsets[e + 1] <= row0) over e; num_experts means past the last segment: exit.
//   - 256 threads = 2 warpgroups. Warpgroup g owns rows 64 g .. 64 g + 63 of the tile and all 256
//     columns: 128 fp32 accumulators per thread.
//   - k advances 64 at a time (128 bytes of bf16 per row: one swizzle row). Every thread loads
//     with cp.async into a 4-slot ring (x tile 16 KB + w tile 32 KB per slot); tile t + 2 is
//     loaded while the wgmmas of tiles t - 1 (still in flight) and t run. Per tile:
//       cp.async.wait_group 1     this thread's copies of tile t have landed
//       fence.proxy.async         ... and are visible to the async proxy, where wgmma reads
//       __syncthreads             everyone's copies of tile t; and both warpgroups have retired
//                                 the wgmmas of tile t - 2, so its slot may be refilled
//       cp.async tile t + 2 into slot (t + 2) % 4 = (t - 2) % 4
//       wgmma.fence; 4 × wgmma (k 16 each); commit_group; wait_group 1 (tile t - 1 retired)
//   - shared tiles use the 128-byte swizzle wgmma understands: each operand row is 128 bytes
//     (64 bf16 of k), rows stacked densely, 16-byte chunk c of row r stored at chunk c ^ (r % 8).
//     8 rows × 128 bytes = 1024 bytes is one swizzle atom; atoms must be 1024-byte aligned (the
//     hardware applies the XOR to address bits [4, 7) from bits [7, 10)). The same XOR makes the
//     cp.async stores conflict-free: the 8 threads writing one row cover all 32 banks.
//   - matrix descriptors (64 bits): start address >> 4 in bits 0-13, leading byte offset >> 4 in
//     bits 16-29 (unused for a swizzled K-major operand whose k16 slice lies inside one swizzle
//     row; set to 1), stride byte offset >> 4 in bits 32-45 (1024: from one 8-row atom to the
//     next along m or n), base offset 0 in bits 49-51 (atoms are 1024-aligned), swizzle mode in
//     bits 62-63 (1 = 128 bytes). The k16 slices of a 64-wide tile start 32 bytes apart: the
//     descriptor's start address advances by 2 per slice, the XOR being applied by the hardware
//     on the final address.
//   - epilogue: accumulators -> bf16 pairs in shared memory (rows padded to 264 bf16: the 32
//     lanes of a store hit 32 distinct banks), then 16-byte coalesced stores to y.
// Tails: rows past max_rows, columns past n and k past its end are zero-filled by cp.async
// (src-size 0) and never stored, so any n, k that are multiples of 8 work.
// Fused gather (row_token given): a thread loads the same 4 x rows of the tile every k tile, so it
// looks their row_token entries up once and keeps the 4 row pointers in registers (with
// GroupedGemmRows::kPermuted its own rows, row_token only marking the padding).
// Fused SiLU (kSiluMul): the w tile's rows interleave gate and up in blocks of 8 (rows 16 j ..
// 16 j + 7 gate columns c0 + 8 j .., rows 16 j + 8 .. 16 j + 15 the up columns, c0 the CTA's first
// output column), so the accumulator's n8 blocks 2 j' and 2 j' + 1 are gate and up of the same
// output columns 8 j' .. 8 j' + 7, held by the same thread: the epilogue stages silu_mul of the
// pair, a [128, 128] tile of act. A thread's w rows (t / 8 + 32 i) then step 16 output columns
// apart, not 32.
//
// Column tiles of 64 and 128 (kCols) and k split over a thread-block cluster serve decode_gemm:
// a dense GEMM of decode size (grouped_gemm.h) has one expert, so the grid would be only
// n / 256 × a row tile or two; narrower column tiles and `splits` blocks per tile, each summing a
// share of k, fill the GPU. The split blocks add their fp32 sums in block order through
// distributed shared memory (cluster_reduce: the same bits every run).
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "kernels/cuda/check_tensor.h"
#include "kernels/cuda/grouped_gemm.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma_bf16.cuh"
#include "kernels/cuda/silu_mul.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace miniinfer::cuda {
namespace {

constexpr int kTileRows = int(kGroupedGemmSm90TileRows);  // rows of x per CTA
constexpr int kTileK = 64;                                // k per stage: one 128-byte swizzle row
constexpr int kStages = 4;
constexpr int kWarpgroups = 2;
constexpr int kThreads = 128 * kWarpgroups;
constexpr int kWarpgroupRows = kTileRows / kWarpgroups;  // 64: the wgmma's m
constexpr int kRowBytes = kTileK * 2;                    // 128
constexpr int kChunksPerRow = kRowBytes / 16;            // 8
constexpr int kAtomBytes = 8 * kRowBytes;                // 1024: one swizzle atom
constexpr int kABytes = kTileRows * kRowBytes;           // x tile of one stage: 16 KB
constexpr int kRowStep = kThreads / kChunksPerRow;       // 32: tile rows between a thread's rows
constexpr int kXRowsPerThread = kTileRows / kRowStep;    // 4

// The tile shape of kCols columns of y (rows of w[e]) per CTA: 256 for the MoE, 64 or 128 for
// decode_gemm.
template <int kCols>
struct Shape {
    static constexpr int kBBytes = kCols * kRowBytes;  // w tile of one stage: 8 to 32 KB
    static constexpr int kStageBytes = kABytes + kBBytes;
    static constexpr int kOutStride = kCols + 8;              // bf16 per staged output row
    static constexpr int kOutBytes = 2 * kTileRows * kOutStride;  // the staged output tile
    static constexpr int kSumStride = kCols + 8;                  // floats per staged sum row
    static constexpr int kSumBytes = 4 * kTileRows * kSumStride;  // cluster_reduce's tile
    static constexpr int kSmemBytes =
        std::max({kStages * kStageBytes, kOutBytes, kSumBytes}) + kAtomBytes;  // + align
    static constexpr int kAccPerThread = kWarpgroupRows * kCols / 128;  // fp32: 32 to 128
    static constexpr int kWRowsPerThread = kCols / kRowStep;            // 2 to 8
    static_assert(kCols == 64 || kCols == 128 || kCols == 256, "a wgmma n of 64, 128 or 256");
    static_assert(kABytes % kAtomBytes == 0 && kStageBytes % kAtomBytes == 0);
    static_assert(kCols * kChunksPerRow % kThreads == 0);
};

static_assert(kWarpgroupRows == 64, "one m64nNk16 per warpgroup per k16");
static_assert(kStages == 4, "the ring refills slot (t - 2) % kStages: wait_group counts assume 4");
static_assert(kRowBytes == kWgmmaRowBytes && kAtomBytes == kWgmmaAtomBytes,
              "the tiles use wgmma.cuh's swizzle rows and atoms");
static_assert(kTileRows * kChunksPerRow % kThreads == 0);

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// d[64 × N] += a[64 × 16] · b[N × 16]ᵀ, both K-major in shared memory (no transposes).
// Thread (warp w of the warpgroup, lane l) holds d[4 j + i] = D[16 w + l / 4 + 8 (i / 2)]
// [8 j + 2 (l % 4) + i % 2], j < N / 8, i < 4: mma.sync's m16n8 fragment, repeated along n.
template <int N>
__device__ __forceinline__ void wgmma_m64nk16(float (&d)[N / 2], uint64_t a_desc,
                                              uint64_t b_desc);
template <>
__device__ __forceinline__ void wgmma_m64nk16<64>(float (&d)[32], uint64_t a_desc,
                                                   uint64_t b_desc) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, p, 1, 1, 0, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(a_desc), "l"(b_desc), "r"(1)
        : "memory");
}
template <>
__device__ __forceinline__ void wgmma_m64nk16<128>(float (&d)[64], uint64_t a_desc,
                                                   uint64_t b_desc) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, "
        "%40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, "
        "%56, %57, %58, %59, %60, %61, %62, %63"
        "}, %64, %65, p, 1, 1, 0, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(a_desc), "l"(b_desc), "r"(1)
        : "memory");
}
template <>
__device__ __forceinline__ void wgmma_m64nk16<256>(float (&d)[128], uint64_t a_desc,
                                                   uint64_t b_desc) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, "
        "%40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, "
        "%56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, "
        "%72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, "
        "%88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, "
        "%104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, "
        "%120, %121, %122, %123, %124, %125, %126, %127"
        "}, %128, %129, p, 1, 1, 0, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(a_desc), "l"(b_desc), "r"(1)
        : "memory");
}

// The expert whose segment holds row0 (see grouped_gemm.cu); num_experts past the last segment.
// Every thread must call it.
__device__ __forceinline__ int find_expert(const int32_t* offsets, int num_experts, int row0) {
    int ended = 0;
    for (int base = 0; base < num_experts; base += kThreads) {
        const int e = base + int(threadIdx.x);
        ended += __syncthreads_count(e < num_experts && offsets[e + 1] <= row0);
    }
    return ended;
}

// The global rows a thread copies in every k tile (load_x, load_w), found once per CTA. Thread t
// copies chunk t % 8 of tile rows t / 8 + 32 i: one row's 128 bytes come from 8 neighbouring
// threads (coalesced), and the row's swizzle phase (row % 8 == (t / 8) % 8) is the same for all
// of a thread's rows.
struct ThreadRows {
    const __nv_bfloat16* x[kXRowsPerThread];  // x row of tile row t / 8 + 32 i; null: zeros
    const __nv_bfloat16* w;                   // w row of tile row t / 8 (valid or not)
    int64_t w_step;                           // elements from one of its w rows to the next
    unsigned w_valid;                         // bit i: tile row t / 8 + 32 i has a w row
};

// Tile `k_tile` of x (load_x) or w (load_w) into the stage at shared address `stage`; x and w
// are the kernel's operands, named (never read) by the zero-filling copies.
__device__ __forceinline__ void load_x(uint32_t stage, const ThreadRows& rows,
                                       const __nv_bfloat16* x, int k, int k_tile) {
    const int row = int(threadIdx.x) / kChunksPerRow, chunk = int(threadIdx.x) % kChunksPerRow;
    const int kk = k_tile * kTileK + chunk * 8;
    const uint32_t dst = stage + swizzled(row, chunk);
#pragma unroll
    for (int i = 0; i < kXRowsPerThread; ++i) {
        const bool valid = kk < k && rows.x[i] != nullptr;
        cp_async_16_to(dst + uint32_t(i * kRowStep * kRowBytes), valid ? rows.x[i] + kk : x, valid);
    }
}
template <int kCols>
__device__ __forceinline__ void load_w(uint32_t stage, const ThreadRows& rows,
                                       const __nv_bfloat16* w, int k, int k_tile) {
    const int row = int(threadIdx.x) / kChunksPerRow, chunk = int(threadIdx.x) % kChunksPerRow;
    const int kk = k_tile * kTileK + chunk * 8;
    const uint32_t dst = stage + kABytes + swizzled(row, chunk);
#pragma unroll
    for (int i = 0; i < Shape<kCols>::kWRowsPerThread; ++i) {
        const bool valid = kk < k && (rows.w_valid >> i) & 1u;
        cp_async_16_to(dst + uint32_t(i * kRowStep * kRowBytes),
                       valid ? rows.w + i * rows.w_step + kk : w, valid);
    }
}

// Split k: the gridDim.z blocks of a cluster hold the fp32 sums of their k tiles for the same row
// and column tile. Each stages its sums in its shared memory (`sums`, the ring's space); block s
// then adds up its share of the tile's outputs over the cluster's blocks in block order (through
// distributed shared memory: a fixed order, so the same bits every run) and stores them as the
// one-block epilogue would: bf16 of the sum, or silu_mul_pack of the gate and up sums.
template <int kCols, bool kSiluMul>
__device__ __forceinline__ void cluster_reduce(const float (&acc)[Shape<kCols>::kAccPerThread],
                                               float* sums, int row0, int out0, int rows_valid,
                                               int cols_valid, int y_cols,
                                               __nv_bfloat16* __restrict__ y) {
    constexpr int kStride = Shape<kCols>::kSumStride;
    const int warpgroup = int(threadIdx.x) / 128, warp = int(threadIdx.x) % 128 / 32;
    const int lane = int(threadIdx.x) % 32;
    const int row_base = warpgroup * kWarpgroupRows + warp * 16 + lane / 4;
#pragma unroll
    for (int j = 0; j < kCols / 8; ++j)
#pragma unroll
        for (int half = 0; half < 2; ++half)
            *reinterpret_cast<float2*>(sums + (row_base + half * 8) * kStride + j * 8 +
                                       (lane % 4) * 2) =
                make_float2(acc[4 * j + 2 * half], acc[4 * j + 2 * half + 1]);
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    cluster.sync();  // every block's sums staged and visible to the cluster
    const int splits = int(cluster.num_blocks()), rank = int(cluster.block_rank());
    constexpr int kOutCols = kSiluMul ? kCols / 2 : kCols;
    const auto sum_at = [&](int offset) {  // Σ over the blocks, in block order
        float2 total = *cluster.map_shared_rank(reinterpret_cast<float2*>(sums + offset), 0);
        for (int s = 1; s < splits; ++s) {
            const float2 v = *cluster.map_shared_rank(reinterpret_cast<float2*>(sums + offset), s);
            total.x += v.x;
            total.y += v.y;
        }
        return total;
    };
    for (int p = rank * kThreads + int(threadIdx.x); p < kTileRows * kOutCols / 2;
         p += splits * kThreads) {
        const int r = p / (kOutCols / 2), c = p % (kOutCols / 2) * 2;  // output column pair
        if (r >= rows_valid || c >= cols_valid) continue;
        uint32_t packed;
        if constexpr (kSiluMul) {  // n8 blocks 2 j (gate) and 2 j + 1 (up)
            const int gate = (c / 8) * 16 + c % 8;
            const float2 g = sum_at(r * kStride + gate), u = sum_at(r * kStride + gate + 8);
            packed = silu_mul_pack(g.x, g.y, u.x, u.y);
        } else {
            const float2 v = sum_at(r * kStride + c);
            packed = pack_bf16(v.x, v.y);
        }
        *reinterpret_cast<uint32_t*>(y + int64_t(row0 + r) * y_cols + out0 + c) = packed;
    }
    cluster.sync();  // no block leaves while another still reads its shared memory
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// x: [max_rows, k], or [num_tokens, k] with row_token: [max_rows]; w: [num_experts, n, k];
// offsets: [num_experts + 1]; y: [max_rows, n], or [max_rows, n / 2] with kSiluMul. bf16 but
// offsets and row_token (i32). Grid: (column tiles of n, row tiles, splits of k). n, k multiples
// of 8 (n of 16 with kSiluMul), x, w and y 16-byte aligned (the launcher checks); offsets
// multiples of 128, row_token in [-1, num_tokens) (trusted).
// dense (decode_gemm): one expert, no offsets; its weights are no earlier kernel's output, so the
// first stages' weight loads go out before the PDL wait.
// Split k (gridDim.z > 1, launched in clusters of gridDim.z blocks along z): block z sums k tiles
// [z · per, (z + 1) · per) of its row and column tile, and cluster_reduce adds the blocks' sums.
template <int kCols, bool kSiluMul>
__global__ void __launch_bounds__(kThreads, 1)
    grouped_gemm_sm90_kernel(const __nv_bfloat16* __restrict__ x,
                             const int32_t* __restrict__ row_token,
                             const __nv_bfloat16* __restrict__ w,
                             const int32_t* __restrict__ offsets, __nv_bfloat16* __restrict__ y,
                             int num_experts, int max_rows, int n, int k, bool gather, bool dense) {
    using S = Shape<kCols>;
    if (!dense) {
        pdl_wait();
        pdl_trigger();
    }
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    // kSiluMul: output columns out0 .. out0 + kCols / 2 - 1 of inter = n / 2; else columns of n.
    constexpr int kOutCols = kSiluMul ? kCols / 2 : kCols;
    const int y_cols = kSiluMul ? n / 2 : n;
    const int out0 = int(blockIdx.x) * kOutCols;
    const int row0 = int(blockIdx.y) * kTileRows;

    // This thread's source rows, looked up before the expert so that the loads overlap.
    ThreadRows rows;
    const int my_row = int(threadIdx.x) / kChunksPerRow;
#pragma unroll
    for (int i = 0; i < kXRowsPerThread; ++i) {
        const int r = row0 + my_row + i * kRowStep;
        const int token = r >= max_rows ? -1 : row_token ? row_token[r] : r;
        const int src = gather || token < 0 ? token : r;  // kPermuted: row_token marks padding
        rows.x[i] = src < 0 ? nullptr : x + int64_t(src) * k;
    }
    const int expert = dense ? 0 : find_expert(offsets, num_experts, row0);
    if (expert >= num_experts) return;  // the whole CTA: past the last segment

    // kSiluMul: tile row s is gate (s / 8 even) or up of output column out0 + (s / 16) * 8 + s % 8;
    // a thread's rows s = my_row + 32 i are then 16 output columns apart.
    const int my_col = kSiluMul ? out0 + (my_row / 16) * 8 + my_row % 8 : out0 + my_row;
    constexpr int kColStep = kSiluMul ? kRowStep / 2 : kRowStep;
    const int w_row = kSiluMul ? (my_row / 8) % 2 * y_cols + my_col : my_col;
    rows.w = w + (int64_t(expert) * n + w_row) * k;
    rows.w_step = int64_t(kColStep) * k;
    rows.w_valid = 0;
#pragma unroll
    for (int i = 0; i < S::kWRowsPerThread; ++i)
        rows.w_valid |= unsigned(my_col + i * kColStep < y_cols) << i;

    extern __shared__ uint8_t smem_raw[];
    const uint32_t ring = (smem_u32(smem_raw) + kAtomBytes - 1) & ~uint32_t(kAtomBytes - 1);
    const int rows_valid = min(kTileRows, max_rows - row0);
    const int cols_valid = min(kOutCols, y_cols - out0);
    const int warpgroup = int(threadIdx.x) / 128;

    float acc[S::kAccPerThread];
#pragma unroll
    for (int i = 0; i < S::kAccPerThread; ++i) acc[i] = 0.f;

    // This block's k tiles [t_begin, t_begin + num_k_tiles): all, or its split's share.
    const int all_k_tiles = (k + kTileK - 1) / kTileK;
    const int per_split = (all_k_tiles + int(gridDim.z) - 1) / int(gridDim.z);
    const int t_begin = int(blockIdx.z) * per_split;
    const int num_k_tiles = max(0, min(all_k_tiles, t_begin + per_split) - t_begin);
    if (dense) {  // the first stages' weights, then wait (their copies join group 0)
#pragma unroll
        for (int t = 0; t < kStages - 2; ++t)
            if (t < num_k_tiles) load_w<kCols>(ring + t * S::kStageBytes, rows, w, k, t_begin + t);
        pdl_wait();
        pdl_trigger();
    }
    // Every step commits a group, empty or not, so that wait_group 1 always means "tile t".
#pragma unroll
    for (int t = 0; t < kStages - 2; ++t) {
        if (t < num_k_tiles) {
            load_x(ring + t * S::kStageBytes, rows, x, k, t_begin + t);
            if (!dense) load_w<kCols>(ring + t * S::kStageBytes, rows, w, k, t_begin + t);
        }
        cp_async_commit();
    }
    for (int t = 0; t < num_k_tiles; ++t) {
        cp_async_wait_all_but_one();
        fence_proxy_async_shared();
        __syncthreads();
        const int next = t + kStages - 2;
        if (next < num_k_tiles) {
            const uint32_t slot = ring + (next % kStages) * S::kStageBytes;
            load_x(slot, rows, x, k, t_begin + next);
            load_w<kCols>(slot, rows, w, k, t_begin + next);
        }
        cp_async_commit();

        const uint32_t stage = ring + (t % kStages) * S::kStageBytes;
        const uint64_t a_desc = smem_desc(stage + warpgroup * kWarpgroupRows * kRowBytes);
        const uint64_t b_desc = smem_desc(stage + kABytes);
        wgmma_fence();
#pragma unroll
        for (int s = 0; s < kTileK / 16; ++s)  // k16 slices: 32 bytes apart, 2 in >> 4 units
            wgmma_m64nk16<kCols>(acc, a_desc + 2 * s, b_desc + 2 * s);
        wgmma_commit();
        wgmma_wait<1>();
    }
    wgmma_wait<0>();
    cp_async_wait_all();
    fence_proxy_async_shared();  // wgmma's reads of the ring before the generic writes below
    __syncthreads();  // both warpgroups done with the ring: it becomes the output staging tile

    if (gridDim.z > 1) {
        cluster_reduce<kCols, kSiluMul>(
            acc, reinterpret_cast<float*>(smem_raw + (ring - smem_u32(smem_raw))), row0, out0,
            rows_valid, cols_valid, y_cols, y);
        return;
    }

    // Accumulators -> bf16 [kTileRows, kOutStride] in shared memory (kOutCols used).
    __nv_bfloat16* out = reinterpret_cast<__nv_bfloat16*>(smem_raw + (ring - smem_u32(smem_raw)));
    const int warp = int(threadIdx.x) % 128 / 32, lane = int(threadIdx.x) % 32;
    const int row_base = warpgroup * kWarpgroupRows + warp * 16 + lane / 4;
#pragma unroll
    for (int j = 0; j < kOutCols / 8; ++j) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int r = row_base + half * 8, c = j * 8 + (lane % 4) * 2;
            uint32_t pair;
            if constexpr (kSiluMul) {  // n8 blocks 2 j (gate) and 2 j + 1 (up)
                const float* g = acc + 4 * (2 * j) + 2 * half;
                const float* u = acc + 4 * (2 * j + 1) + 2 * half;
                pair = silu_mul_pack(g[0], g[1], u[0], u[1]);
            } else {
                pair = pack_bf16(acc[4 * j + 2 * half], acc[4 * j + 2 * half + 1]);
            }
            *reinterpret_cast<uint32_t*>(out + r * S::kOutStride + c) = pair;
        }
    }
    __syncthreads();

    // Shared -> y in 16-byte chunks: a warp stores whole row segments.
    constexpr int kOutChunksPerRow = kOutCols / 8;
#pragma unroll 4
    for (int c = int(threadIdx.x); c < kTileRows * kOutChunksPerRow; c += kThreads) {
        const int r = c / kOutChunksPerRow, col = (c % kOutChunksPerRow) * 8;
        if (r < rows_valid && col < cols_valid)
            *reinterpret_cast<uint4*>(y + int64_t(row0 + r) * y_cols + out0 + col) =
                *reinterpret_cast<const uint4*>(out + r * S::kOutStride + col);
    }
#else
    __trap();  // built without sm_90a features: the launcher refuses such devices
#endif
}

// offsets: the device's expert offsets, or null with `dense` (decode_gemm: one expert). splits:
// blocks a row and column tile's k is split over (one cluster; cluster_reduce).
template <int kCols, bool kSiluMul>
void launch(const Tensor& x, const Tensor* row_token, const Tensor& w, const int32_t* offsets,
            const GroupedGemmDims& d, Tensor& y, cudaStream_t stream, int splits = 1,
            bool dense = false) {
    using S = Shape<kCols>;
    const int64_t row_tiles = (d.max_rows + kTileRows - 1) / kTileRows;
    const int64_t col_tiles = (d.n + kCols - 1) / kCols;
    MI_LAUNCH_CHECK(row_tiles <= 65535, "grouped_gemm_sm90: max_rows too large for the grid");
    allow_shared_memory<grouped_gemm_sm90_kernel<kCols, kSiluMul>>(S::kSmemBytes);  // > 48 KB
    launch_kernel_clustered(grouped_gemm_sm90_kernel<kCols, kSiluMul>,
                            dim3(unsigned(col_tiles), unsigned(row_tiles), unsigned(splits)),
                            dim3(1, 1, unsigned(splits)), kThreads, S::kSmemBytes, stream,
                            x.data<__nv_bfloat16>(),
                            row_token ? row_token->data<int32_t>() : nullptr,
                            w.data<__nv_bfloat16>(), offsets, y.data<__nv_bfloat16>(),
                            int(d.num_experts), int(d.max_rows), int(d.n), int(d.k), d.gather,
                            dense);
    MI_CUDA_CHECK(cudaGetLastError());
}

template <int kCols>
void launch_dense(const Tensor& x, const Tensor& w3, GroupedGemmEpilogue epilogue,
                  const GroupedGemmDims& d, Tensor& y, cudaStream_t stream, int splits) {
    if (epilogue == GroupedGemmEpilogue::kSiluMul)
        launch<kCols, true>(x, nullptr, w3, nullptr, d, y, stream, splits, true);
    else
        launch<kCols, false>(x, nullptr, w3, nullptr, d, y, stream, splits, true);
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
                       cudaStream_t stream, GroupedGemmRows rows) {
    const GroupedGemmDims d =
        check_grouped_gemm(x, row_token, w, expert_offsets, epilogue, y, 16, rows);
    MI_LAUNCH_CHECK(grouped_gemm_sm90_supported(),
                    "grouped_gemm_sm90: needs an sm_90 device (wgmma is sm_90a only)");
    if (d.max_rows == 0) return;
    if (epilogue == GroupedGemmEpilogue::kSiluMul)
        launch<256, true>(x, row_token, w, expert_offsets.data<int32_t>(), d, y, stream);
    else
        launch<256, false>(x, row_token, w, expert_offsets.data<int32_t>(), d, y, stream);
}

DecodeGemmPlan decode_gemm_plan(int64_t m, int64_t n, int64_t k) {
    // Column tiles of 128 while they alone give a block an SM, else 64; then enough k splits
    // for a block an SM, each at least four k tiles, clusters of at most kDecodeGemmMaxSplits.
    const int64_t row_tiles = (m + kTileRows - 1) / kTileRows, sms = sm_count();
    const int64_t cols = (n + 127) / 128 * row_tiles >= sms ? 128 : 64;
    const int64_t blocks = (n + cols - 1) / cols * row_tiles;
    const int64_t k_tiles = (k + kTileK - 1) / kTileK;
    const int64_t splits = std::clamp<int64_t>(std::min((sms + blocks - 1) / blocks, k_tiles / 4),
                                               1, kDecodeGemmMaxSplits);
    return {cols, int(splits)};
}

void decode_gemm(const Tensor& x, const Tensor& w, GroupedGemmEpilogue epilogue, Tensor& y,
                 cudaStream_t stream, DecodeGemmPlan plan) {
    check_cuda_tensor(w, DType::kBF16, "decode_gemm: w", {kAnySize, kAnySize});
    const int64_t n = w.size(0), k = w.size(1);
    const Tensor w3 = w.view({1, n, k});
    const GroupedGemmDims d = check_grouped_gemm(x, nullptr, w3, w3, epilogue, y, 16,
                                                 GroupedGemmRows::kGather, /*offsets=*/false);
    MI_LAUNCH_CHECK(grouped_gemm_sm90_supported(),
                    "decode_gemm: needs an sm_90 device (wgmma is sm_90a only)");
    if (d.max_rows == 0) return;
    if (plan.cols == 0) plan = decode_gemm_plan(d.max_rows, n, k);
    MI_LAUNCH_CHECK(plan.splits >= 1 && plan.splits <= kDecodeGemmMaxSplits,
                    "decode_gemm: splits must be 1 to kDecodeGemmMaxSplits");
    switch (plan.cols) {
        case 64:
            return launch_dense<64>(x, w3, epilogue, d, y, stream, plan.splits);
        case 128:
            return launch_dense<128>(x, w3, epilogue, d, y, stream, plan.splits);
        case 256:
            return launch_dense<256>(x, w3, epilogue, d, y, stream, plan.splits);
        default:
            MI_LAUNCH_CHECK(false, "decode_gemm: cols must be 64, 128 or 256");
    }
}

}  // namespace miniinfer::cuda
