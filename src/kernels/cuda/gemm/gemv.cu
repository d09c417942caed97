// y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias) for a few rows of x: the decode GEMM at small batch.
//
// At m ≤ 8 the GEMM is a stream of w through the SMs: 2 FLOP per weight byte loaded and m
// of them at most, far below the H200's ~160 FLOP/byte balance point, so the only goal is to keep
// enough 16-byte loads of w in flight to saturate HBM. Layout of the work:
//   - one warp owns kCols whole rows of w (output columns) and all m rows of x: no split-K, so
//     no second kernel and no atomics; the 32 lanes stride k in 8-element (16-byte) vectors;
//   - each lane first issues kUnroll × kCols loads of w (L1 bypassed: w is read once), then
//     multiplies them with x, which is tiny and re-read from L1 by every warp;
//   - the m × kCols fp32 partial sums per lane are combined with a butterfly reduce-scatter
//     (each shuffle step halves the values a lane holds), ~1 shuffle per value instead of the
//     5 of a plain warp sum — at m = 8 the plain sum would cost more than the loads;
//   - blocks of 4 warps, grid over n: thousands of warps for every layer of a 0.6B model.
// kCols trades parallelism (small n wants many warps: kCols = 1) against fewer x re-reads.
// Launched with programmatic dependent launch (launch.cuh), a warp issues its first loads of w
// while the kernel that writes x is still finishing.
// Two fused forms take the kernel before them in as a prologue (XFrom): gemv_rms_norm (the
// residual add + RMSNorm) and gemv_silu_mul (SiLU·mul). Each block computes its few x rows into
// shared memory from the previous op's inputs, then runs the same loop reading x from there.
// gemv itself at 1-4 rows (bf16 y) copies x there the same way (XFrom::kCopy): read inside the
// loop, each vector of x cost an L2 round trip after the FMAs before it.
#include "kernels/cuda/gemm/gemv.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "core/cuda/cuda_check.h"
#include "kernels/cuda/elementwise/silu_mul.cuh"
#include "kernels/cuda/gemm/gemv.cuh"
#include "kernels/cuda/norm/rms_norm.cuh"
#include "kernels/cuda/primitives/check_tensor.h"
#include "kernels/cuda/primitives/launch.cuh"
#include "kernels/cuda/primitives/mma_bf16.cuh"
#include "kernels/cuda/primitives/reduce.cuh"

namespace miniinfer::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kThreads = 32 * kWarpsPerBlock;
constexpr int kVecElems = 8;  // bf16 per 16-byte load

constexpr int next_pow2(int v) {
    int p = 1;
    while (p < v) p *= 2;
    return p;
}

// y's element from the fp32 result: bf16 (one rounding) or f32 (as is: the LM head's logits).
__device__ __forceinline__ void store_out(__nv_bfloat16* y, float v) {
    *y = __float2bfloat16_rn(v);
}
__device__ __forceinline__ void store_out(float* y, float v) {
    *y = v;
}

// Where the kernel's x comes from: global memory, or a prologue that computes the rows into
// shared memory from what the kernel before would have turned into x (one kernel fewer).
enum class XFrom {
    kGlobal,   // x itself, read in the loop
    kRmsNorm,  // gemv_rms_norm: the residual add + RMSNorm (rms_norm.h's AddRmsNorm)
    kSiluMul,  // gemv_silu_mul: SiLU(gate) · up of a [rows, 2k] gate_up (silu_mul.h)
    kCopy,     // x itself, copied into shared memory first (gemv at 1-4 rows, bf16 y)
};

struct PrologueArgs {
    // kCopy
    const __nv_bfloat16* x;  // [rows, k]
    // kRmsNorm
    const __nv_bfloat16* delta;  // null: the residual is normalised as it is
    const __nv_bfloat16* residual;
    __nv_bfloat16* residual_out;  // residual + delta, stored by block 0
    const __nv_bfloat16* weight;  // [k]
    __nv_bfloat16* normed;        // the normed rows, stored by block 0; may be null
    float eps;
    // kSiluMul
    const __nv_bfloat16* gate_up;  // [rows, 2k]
};

// x_s[r][:] = weight * norm(residual[r] + delta[r]) for the block's kRows rows of k, with
// add_rms_norm's rounding points (rms_norm.cuh; only the order of the fp32 sum of squares
// differs). Every block computes the rows itself (they are a few KB, read from L2) rather than
// waiting for a separate norm kernel; block 0 also stores residual + delta and the normed rows.
// Called by every thread of the block; ends with a barrier.
template <int kRows>
__device__ __forceinline__ void norm_rows_to_shared(const PrologueArgs& a, int k, uint4* x_s) {
    const int k_vecs = k / kVecElems;
    const bool writer = blockIdx.x == 0;
    const auto* residual = reinterpret_cast<const uint4*>(a.residual);
    float sum_sq[kRows] = {};
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        for (int v = int(threadIdx.x); v < k_vecs; v += kThreads) {
            const int64_t at = int64_t(r) * k_vecs + v;
            uint4 sum = residual[at];
            if (a.delta) {
                sum = add_residual_x8(reinterpret_cast<const uint4*>(a.delta)[at], sum);
                if (writer) reinterpret_cast<uint4*>(a.residual_out)[at] = sum;
            }
            x_s[at] = sum;
            float f[8];
            unpack_bf16x8(sum, f);
#pragma unroll
            for (int j = 0; j < 8; ++j) sum_sq[r] += f[j] * f[j];
        }
    }
    __shared__ float partial[kWarpsPerBlock][kRows];
    const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const float s = warp_sum(sum_sq[r]);
        if (lane == 0) partial[warp][r] = s;
    }
    __syncthreads();
    const auto* weight = reinterpret_cast<const uint4*>(a.weight);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        float total = 0.f;
#pragma unroll
        for (int i = 0; i < kWarpsPerBlock; ++i) total += partial[i][r];
        const float inv_rms = rsqrtf(total / float(k) + a.eps);
        for (int v = int(threadIdx.x); v < k_vecs; v += kThreads) {  // this thread's own vectors
            const int64_t at = int64_t(r) * k_vecs + v;
            const uint4 normed = rms_normed_x8(x_s[at], inv_rms, __ldg(weight + v));
            x_s[at] = normed;
            if (writer && a.normed) reinterpret_cast<uint4*>(a.normed)[at] = normed;
        }
    }
    __syncthreads();
}

// x_s = the block's kRows rows of x, kBatch 16-byte loads a thread issued at once: one L2 round
// trip for a row of up to kBatch x 1,024 values, where the loop's own loads of x (one vector
// at a time after its FMAs) cost one round trip each — 5.5 µs of a 0.6B o_proj's exposed time
// at batch 1 on the H200. Called by every thread of the block; ends with a barrier.
template <int kRows>
__device__ __forceinline__ void copy_rows_to_shared(const __nv_bfloat16* x, int k, uint4* x_s) {
    constexpr int kBatch = 2;
    const int vecs = kRows * (k / kVecElems);
    const auto* src = reinterpret_cast<const uint4*>(x);
    for (int v0 = int(threadIdx.x); v0 < vecs; v0 += kBatch * kThreads) {
        uint4 t[kBatch];
#pragma unroll
        for (int b = 0; b < kBatch; ++b)
            if (v0 + b * kThreads < vecs) t[b] = src[v0 + b * kThreads];
#pragma unroll
        for (int b = 0; b < kBatch; ++b)
            if (v0 + b * kThreads < vecs) x_s[v0 + b * kThreads] = t[b];
    }
    __syncthreads();
}

// x_s[r][:] = silu_mul(gate_up[r]) for the block's kRows rows (k outputs of a [kRows, 2k]
// gate_up), silu_mul's own arithmetic (silu_mul.cuh): the bits of silu_mul, then gemv. Called by
// every thread of the block; ends with a barrier.
template <int kRows, int kBatch>
__device__ __forceinline__ void silu_mul_rows_to_shared(const __nv_bfloat16* gate_up, int k,
                                                        uint4* x_s) {
    const int k_vecs = k / kVecElems;
    const auto* gu = reinterpret_cast<const uint4*>(gate_up);
    // A thread's vectors kBatch at a time, all of a batch's loads issued before any is used: one
    // L2 round trip a batch instead of one a vector (a row of 3,072 is 3 vectors a thread).
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        for (int v0 = int(threadIdx.x); v0 < k_vecs; v0 += kBatch * kThreads) {
            uint4 g[kBatch], u[kBatch];
#pragma unroll
            for (int b = 0; b < kBatch; ++b) {
                const int v = v0 + b * kThreads;
                if (v < k_vecs) {
                    g[b] = gu[int64_t(r) * 2 * k_vecs + v];
                    u[b] = gu[int64_t(r) * 2 * k_vecs + k_vecs + v];
                }
            }
#pragma unroll
            for (int b = 0; b < kBatch; ++b) {
                const int v = v0 + b * kThreads;
                if (v >= k_vecs) break;
                const auto* gh = reinterpret_cast<const __nv_bfloat16*>(&g[b]);
                const auto* uh = reinterpret_cast<const __nv_bfloat16*>(&u[b]);
                uint4 out;
                auto* oh = reinterpret_cast<__nv_bfloat16*>(&out);
#pragma unroll
                for (int j = 0; j < kVecElems; ++j) oh[j] = silu_mul_bf16(gh[j], uh[j]);
                x_s[int64_t(r) * k_vecs + v] = out;
            }
        }
    }
    __syncthreads();
}

// x: [kRows, k] bf16 (kX == kGlobal; else not read: the prologue computes the rows into
// kRows * k bf16 of dynamic shared memory); w: [n, k] bf16; bias: [n] bf16 or null; y: [kRows, n]
// bf16 or f32 (Out). k % 8 == 0 and x, w 16-byte aligned (checked by the launcher). Warp g of the
// grid owns output columns [g * kCols, g * kCols + kCols) for every row.
template <int kRows, int kCols, typename Out, XFrom kX>
__global__ void __launch_bounds__(kThreads)
    gemv_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                const __nv_bfloat16* __restrict__ bias, Out* __restrict__ y, int64_t n, int k,
                PrologueArgs pro) {
    constexpr bool kPrologue = kX != XFrom::kGlobal;
    constexpr int kValues = next_pow2(kRows * kCols);  // padded for the reduce-scatter
    // Loads of w in flight per lane: 8, or 16 at one column a warp and one or two rows, so that
    // a whole row of w up to 4,096 wide (the 0.6B's down projection: 3,072) is loaded before the
    // PDL wait. (16 everywhere doubles the wider kernels' registers: half the blocks an SM.)
    constexpr int kInFlight = kCols == 1 && kRows <= 2 ? 16 : 8;
    constexpr int kUnroll = kCols >= kInFlight ? 1 : kInFlight / kCols;
    const int lane = int(threadIdx.x) % 32;
    const int64_t col0 = (int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32) * kCols;
    // Whole warps leave (no shuffle partner is lost); with a prologue after its barriers.
    const bool active = col0 < n;
    if (!kPrologue && !active) return;
    const int k_vecs = k / kVecElems;

    const uint4* w_rows[kCols];  // columns past n read row n - 1; their sums are dropped
#pragma unroll
    for (int c = 0; c < kCols; ++c)
        w_rows[c] =
            reinterpret_cast<const uint4*>(w + (col0 + c < n ? col0 + c : n - 1) * int64_t(k));
    const uint4* x_vecs = reinterpret_cast<const uint4*>(x);

    uint4 w_vec[kUnroll][kCols];
    auto load_w = [&](int base) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            if (base + 32 * u < k_vecs) {
#pragma unroll
                for (int c = 0; c < kCols; ++c)
                    w_vec[u][c] = load_streaming(w_rows[c] + base + 32 * u);
            }
        }
    };
    // No earlier kernel writes w: the first kUnroll x kCols loads of it are issued before
    // waiting for the kernel that writes x (launch.cuh).
    if (active) load_w(lane);
    pdl_wait();
    pdl_trigger();
    extern __shared__ uint4 x_shared[];  // with a prologue: [kRows][k_vecs]
    if constexpr (kX == XFrom::kCopy) copy_rows_to_shared<kRows>(pro.x, k, x_shared);
    if constexpr (kX == XFrom::kRmsNorm) norm_rows_to_shared<kRows>(pro, k, x_shared);
    // The batch's registers add to the w loads held across the prologue: 4 at one column a warp
    // (a 3,072-wide row in one batch), else 2.
    if constexpr (kX == XFrom::kSiluMul)
        silu_mul_rows_to_shared<kRows, kCols == 1 ? 4 : 2>(pro.gate_up, k, x_shared);
    if (kPrologue && !active) return;

    float acc[kRows * kCols] = {};  // acc[r * kCols + c]: row r of x times column c of the warp
    for (int base = lane; base < k_vecs; base += 32 * kUnroll) {
        if (base != lane) load_w(base);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int vec = base + 32 * u;
            if (vec >= k_vecs) break;
            float w_f[kCols][8];
#pragma unroll
            for (int c = 0; c < kCols; ++c) unpack_bf16x8(w_vec[u][c], w_f[c]);
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
                float x_f[8];
                if constexpr (kPrologue)
                    unpack_bf16x8(x_shared[r * k_vecs + vec], x_f);
                else
                    unpack_bf16x8(__ldg(x_vecs + int64_t(r) * k_vecs + vec), x_f);
#pragma unroll
                for (int c = 0; c < kCols; ++c) {
#pragma unroll
                    for (int j = 0; j < 8; ++j)
                        acc[r * kCols + c] = fmaf(x_f[j], w_f[c][j], acc[r * kCols + c]);
                }
            }
        }
    }

    float sum;
    if constexpr (kValues == kRows * kCols) {
        warp_reduce_scatter(acc, lane);
        sum = acc[0];
    } else {
        float padded[kValues];  // zeros up to a power of two
#pragma unroll
        for (int i = 0; i < kValues; ++i) padded[i] = i < kRows * kCols ? acc[i] : 0.f;
        warp_reduce_scatter(padded, lane);
        sum = padded[0];
    }
    constexpr int kLanesPerValue = 32 / kValues;
    if (lane % kLanesPerValue != 0) return;
    const int value = lane / kLanesPerValue;
    const int r = value / kCols, c = value % kCols;
    const int64_t col = col0 + c;
    if (r >= kRows || col >= n) return;
    if (bias) sum += __bfloat162float(bias[col]);
    store_out(y + int64_t(r) * n + col, sum);
}

template <typename Out>
using KernelFn = void (*)(const __nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, Out*,
                          int64_t, int, PrologueArgs);

template <typename Out, XFrom kX, int kCols, int... kRowsLess1>
constexpr std::array<KernelFn<Out>, sizeof...(kRowsLess1)> by_rows(
    std::integer_sequence<int, kRowsLess1...>) {
    return {gemv_kernel<kRowsLess1 + 1, kCols, Out, kX>...};
}

// Every compiled specialisation for one output type and x source: [cols_per_block index (1, 2,
// 4)][rows - 1], up to kMaxRows rows.
template <typename Out, XFrom kX, int kMaxRows>
constexpr std::array<std::array<KernelFn<Out>, kMaxRows>, 3> kKernels = {
    by_rows<Out, kX, 1>(std::make_integer_sequence<int, kMaxRows>{}),
    by_rows<Out, kX, 2>(std::make_integer_sequence<int, kMaxRows>{}),
    by_rows<Out, kX, 4>(std::make_integer_sequence<int, kMaxRows>{}),
};
template <typename Out>
constexpr const auto& kPlainKernels = kKernels<Out, XFrom::kGlobal, kGemvRowsPerLaunch>;
// f32 out only with the norm prologue: the MoE router's logits.
template <XFrom kX, typename Out = __nv_bfloat16>
constexpr const auto& kFusedKernels = kKernels<Out, kX, kGemvFusedMaxRows>;

// Rows beyond one launch's kGemvRowsPerLaunch: further launches, each re-reading w.
template <typename Out>
void launch_rows(const Tensor& x, const Tensor& w, const __nv_bfloat16* bias, Tensor& y,
                 int cols_idx, int64_t blocks, cudaStream_t stream) {
    const int64_t n = w.size(0), k = w.size(1), m = x.numel() / k;
    for (int64_t row0 = 0; row0 < m; row0 += kGemvRowsPerLaunch) {
        const int64_t rows = std::min(kGemvRowsPerLaunch, m - row0);
        launch_kernel(kPlainKernels<Out>[cols_idx][rows - 1], unsigned(blocks), kThreads, 0, stream,
                      x.data<__nv_bfloat16>() + row0 * k, w.data<__nv_bfloat16>(), bias,
                      y.data<Out>() + row0 * n, n, int(k), PrologueArgs{});
        MI_CUDA_CHECK(cudaGetLastError());
    }
}

// Columns per warp by n and k: small n (the 1024-wide o_proj and down of a 0.6B model) needs one
// column per warp for enough warps in flight; wide n (lm_head) can share x reads over more. Rows
// of 2,048 or more keep one column a warp up to n = 16,384: a lane's whole share of the row
// (8 vectors and up) is then loaded before the PDL wait. Measured at batch 1 on the H200: the
// 30B-A3B's qkv (5,120 x 2,048) with one column made a token 2.748 ms against 2.823; the 0.6B's
// qkv and gate_up (4,096 and 6,144 x 1,024: 4 vectors a lane) 0.867 against 0.791 — twice the
// blocks, each repeating the norm prologue, for half the work a warp.
int pick_cols(int64_t n, int64_t k) {
    if (n >= 16384) return 4;
    if (n >= 4096 && k < 2048) return 2;
    return 1;
}

// The grid for n columns at cols (1, 2 or 4) a warp: the kernel tables' column index and blocks.
struct Grid {
    int cols_idx;
    int64_t blocks;
};
Grid grid_for(int64_t n, int cols) {
    const int64_t cols_per_cta = int64_t(cols) * kWarpsPerBlock;
    const int64_t blocks = (n + cols_per_cta - 1) / cols_per_cta;
    MI_LAUNCH_CHECK(blocks <= INT32_MAX, "gemv: n too large for the grid");
    return {cols == 1 ? 0 : cols == 2 ? 1 : 2, blocks};
}

// What both fused forms need besides their prologue's operands: m rows of k (the x that the
// prologue computes) with w, bias and a bf16 y as gemv takes them, few enough rows, and room in
// shared memory.
bool fused_supported(int64_t m, int64_t k, const Tensor& w, const Tensor* bias, const Tensor& y,
                     bool f32_out = false) {
    const bool y_ok =
        is_cuda_tensor(y, DType::kBF16) || (f32_out && is_cuda_tensor(y, DType::kF32));
    if (!is_cuda_tensor(w, DType::kBF16) || !y_ok || w.ndim() != 2) return false;
    const int64_t n = w.size(0);
    if (k <= 0 || w.size(1) != k || k % kVecElems != 0 || !aligned16(w.raw())) return false;
    if (m < 1 || m > kGemvFusedMaxRows || m * k * 2 > kGemvFusedMaxSharedBytes) return false;
    if (y.numel() != m * n || y.ndim() < 1 || y.size(-1) != n) return false;
    return !bias ||
           (is_cuda_tensor(*bias, DType::kBF16) && bias->ndim() == 1 && bias->size(0) == n);
}

template <XFrom kX, typename Out = __nv_bfloat16>
void launch_fused(const Tensor& w, const Tensor* bias, Tensor& y, int64_t m,
                  const PrologueArgs& args, cudaStream_t stream) {
    const int64_t n = w.size(0), k = w.size(1);
    if (n == 0) return;
    const Grid g = grid_for(n, pick_cols(n, k));
    static const bool shared_allowed = [] {  // every specialisation, once
        for (const auto& by_cols : kFusedKernels<kX, Out>)
            for (const KernelFn<Out> f : by_cols)
                MI_CUDA_CHECK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   int(kGemvFusedMaxSharedBytes)));
        return true;
    }();
    (void)shared_allowed;
    launch_kernel(kFusedKernels<kX, Out>[g.cols_idx][m - 1], unsigned(g.blocks), kThreads,
                  size_t(m * k * 2), stream, static_cast<const __nv_bfloat16*>(nullptr),
                  w.data<__nv_bfloat16>(), bias ? bias->data<__nv_bfloat16>() : nullptr,
                  y.data<Out>(), n, int(k), args);
    MI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

bool gemv_supported(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y) {
    if (!is_cuda_tensor(x, DType::kBF16) || !is_cuda_tensor(w, DType::kBF16) ||
        !(is_cuda_tensor(y, DType::kBF16) || is_cuda_tensor(y, DType::kF32)) || w.ndim() != 2)
        return false;
    const int64_t n = w.size(0), k = w.size(1);
    if (k <= 0 || k % kVecElems != 0 || k > INT32_MAX || x.ndim() < 1 || x.size(-1) != k)
        return false;
    if (!aligned16(x.raw()) || !aligned16(w.raw())) return false;
    const int64_t m = x.numel() / k;
    if (y.numel() != m * n || y.ndim() < 1 || y.size(-1) != n) return false;
    return !bias ||
           (is_cuda_tensor(*bias, DType::kBF16) && bias->ndim() == 1 && bias->size(0) == n);
}

void gemv(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y, cudaStream_t stream,
          int cols_per_block) {
    MI_LAUNCH_CHECK(
        gemv_supported(x, w, bias, y),
        "gemv: operands must be contiguous bf16 CUDA tensors (y bf16 or f32), w [n, k] with "
        "k % 8 == 0, x [.., k] and w 16-byte aligned, y [.., n] with m * n elements, bias [n]");
    MI_LAUNCH_CHECK(
        cols_per_block == 0 || cols_per_block == 1 || cols_per_block == 2 || cols_per_block == 4,
        "gemv: cols_per_block must be 0 (auto), 1, 2 or 4");
    const int64_t n = w.size(0), k = w.size(1), m = x.numel() / k;
    if (m == 0 || n == 0) return;

    // A few rows for a bf16 y: x through shared memory (XFrom::kCopy), one round trip for it.
    if (cols_per_block == 0 && y.dtype() == DType::kBF16 && fused_supported(m, k, w, bias, y)) {
        PrologueArgs args{};
        args.x = x.data<__nv_bfloat16>();
        return launch_fused<XFrom::kCopy>(w, bias, y, m, args, stream);
    }
    const Grid g = grid_for(n, cols_per_block ? cols_per_block : pick_cols(n, k));
    const auto* bias_ptr = bias ? bias->data<__nv_bfloat16>() : nullptr;
    if (y.dtype() == DType::kF32)
        launch_rows<float>(x, w, bias_ptr, y, g.cols_idx, g.blocks, stream);
    else
        launch_rows<__nv_bfloat16>(x, w, bias_ptr, y, g.cols_idx, g.blocks, stream);
}

bool gemv_rms_norm_supported(const AddRmsNorm& in, const Tensor& w, const Tensor* bias,
                             const Tensor& y) {
    if (!in.residual || !in.weight || (in.delta && !in.residual_out)) return false;
    const Tensor& r = *in.residual;
    if (!is_cuda_tensor(r, DType::kBF16) || r.ndim() < 1 || w.ndim() != 2 ||
        r.size(-1) != w.size(1) || !aligned16(r.raw()) ||
        !fused_supported(r.numel() / std::max<int64_t>(w.size(1), 1), w.size(1), w, bias, y,
                         /*f32_out=*/true))
        return false;
    if (!is_cuda_tensor(*in.weight, DType::kBF16) || in.weight->ndim() != 1 ||
        in.weight->size(0) != w.size(1) || !aligned16(in.weight->raw()))
        return false;
    const auto same_rows = [&](const Tensor* t) {
        return is_cuda_tensor(*t, DType::kBF16) && t->shape() == r.shape() && aligned16(t->raw());
    };
    if (in.delta &&
        (!same_rows(in.delta) || !same_rows(in.residual_out) || in.residual_out->raw() == r.raw() ||
         in.residual_out->raw() == in.delta->raw()))
        return false;
    return !in.normed || (same_rows(in.normed) && in.normed->raw() != r.raw());
}

void gemv_rms_norm(const AddRmsNorm& in, const Tensor& w, const Tensor* bias, Tensor& y,
                   cudaStream_t stream) {
    MI_LAUNCH_CHECK(gemv_rms_norm_supported(in, w, bias, y),
                    "gemv_rms_norm: operands as for gemv with the norm's rows as x, at "
                    "most 4 rows whose bf16 values fit in 64 KB, weight [k], and residual_out "
                    "a third buffer besides residual and delta");
    const PrologueArgs args{
        .delta = in.delta ? in.delta->data<__nv_bfloat16>() : nullptr,
        .residual = in.residual->data<__nv_bfloat16>(),
        .residual_out = in.delta ? in.residual_out->data<__nv_bfloat16>() : nullptr,
        .weight = in.weight->data<__nv_bfloat16>(),
        .normed = in.normed ? in.normed->data<__nv_bfloat16>() : nullptr,
        .eps = in.eps,
        .gate_up = nullptr};
    const int64_t m = in.residual->numel() / w.size(1);
    if (y.dtype() == DType::kF32)
        launch_fused<XFrom::kRmsNorm, float>(w, bias, y, m, args, stream);
    else
        launch_fused<XFrom::kRmsNorm>(w, bias, y, m, args, stream);
}

bool gemv_silu_mul_supported(const Tensor& gate_up, const Tensor& w, const Tensor* bias,
                             const Tensor& y) {
    if (!is_cuda_tensor(gate_up, DType::kBF16) || gate_up.ndim() != 2 || w.ndim() != 2 ||
        gate_up.size(1) != 2 * w.size(1) || !aligned16(gate_up.raw()))
        return false;
    // k % 8 == 0 (fused_supported) keeps every 8-element vector of gate_up 16-byte aligned.
    return fused_supported(gate_up.size(0), w.size(1), w, bias, y);
}

void gemv_silu_mul(const Tensor& gate_up, const Tensor& w, const Tensor* bias, Tensor& y,
                   cudaStream_t stream) {
    MI_LAUNCH_CHECK(gemv_silu_mul_supported(gate_up, w, bias, y),
                    "gemv_silu_mul: gate_up [rows, 2k] bf16, 16-byte aligned, at most 4 rows of k "
                    "fitting in 64 KB as bf16; w, bias, y (bf16) as for gemv");
    PrologueArgs args{};
    args.gate_up = gate_up.data<__nv_bfloat16>();
    launch_fused<XFrom::kSiluMul>(w, bias, y, gate_up.size(0), args, stream);
}

}  // namespace miniinfer::cuda
