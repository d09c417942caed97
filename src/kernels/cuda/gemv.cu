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
#include "kernels/cuda/gemv.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "kernels/cuda/check_tensor.h"
#include "kernels/cuda/gemv.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma_bf16.cuh"
#include "kernels/cuda/reduce.cuh"

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

// x: [kRows, k] bf16; w: [n, k] bf16; bias: [n] bf16 or null; y: [kRows, n] bf16 or f32 (Out).
// k % 8 == 0 and x, w 16-byte aligned (checked by the launcher). Warp g of the grid owns
// output columns [g * kCols, g * kCols + kCols) for every row.
// The residual add + RMSNorm in front of gemv_rms_norm's GEMV (rms_norm.h's AddRmsNorm).
struct NormArgs {
    const __nv_bfloat16* delta;  // null: the residual is normalised as it is
    const __nv_bfloat16* residual;
    __nv_bfloat16* residual_out;  // residual + delta, stored by block 0
    const __nv_bfloat16* weight;  // [k]
    __nv_bfloat16* normed;        // the normed rows, stored by block 0; may be null
    float eps;
};

// Eight bf16 sums a + b, each rounded once from fp32 (add_rms_norm's residual add).
__device__ __forceinline__ uint4 add_bf16x8(const uint4& a, const uint4& b) {
    float fa[8], fb[8];
    unpack_bf16x8(a, fa);
    unpack_bf16x8(b, fb);
    uint32_t out[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
        out[i] = pack_bf16(fa[2 * i] + fb[2 * i], fa[2 * i + 1] + fb[2 * i + 1]);
    return make_uint4(out[0], out[1], out[2], out[3]);
}

// x_s[r][:] = weight * norm(residual[r] + delta[r]) for the block's kRows rows of k, with
// add_rms_norm's rounding points (rms_norm.cu; only the order of the fp32 sum of squares
// differs). Every block computes the rows itself (they are a few KB, read from L2) rather than
// waiting for a separate norm kernel; block 0 also stores residual + delta and the normed rows.
// Called by every thread of the block; ends with a barrier.
template <int kRows>
__device__ __forceinline__ void norm_rows_to_shared(const NormArgs& a, int k, uint4* x_s) {
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
                sum = add_bf16x8(reinterpret_cast<const uint4*>(a.delta)[at], sum);
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
            float f[8], g[8];
            unpack_bf16x8(x_s[at], f);
            unpack_bf16x8(__ldg(weight + v), g);
            uint32_t out[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float n0 = __bfloat162float(__float2bfloat16(f[2 * i] * inv_rms));
                const float n1 = __bfloat162float(__float2bfloat16(f[2 * i + 1] * inv_rms));
                out[i] = pack_bf16(n0 * g[2 * i], n1 * g[2 * i + 1]);
            }
            const uint4 normed = make_uint4(out[0], out[1], out[2], out[3]);
            x_s[at] = normed;
            if (writer && a.normed) reinterpret_cast<uint4*>(a.normed)[at] = normed;
        }
    }
    __syncthreads();
}

// kNorm: x is not read; the block first normalises its rows into shared memory
// (norm_rows_to_shared, kRows * k bf16 of dynamic shared memory) and multiplies those.
template <int kRows, int kCols, typename Out, bool kNorm = false>
__global__ void __launch_bounds__(kThreads)
    gemv_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                const __nv_bfloat16* __restrict__ bias, Out* __restrict__ y, int64_t n, int k,
                NormArgs norm) {
    constexpr int kValues = next_pow2(kRows * kCols);    // padded for the reduce-scatter
    constexpr int kUnroll = kCols >= 8 ? 1 : 8 / kCols;  // ~8 loads of w in flight per lane
    const int lane = int(threadIdx.x) % 32;
    const int64_t col0 = (int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32) * kCols;
    // Whole warps leave (no shuffle partner is lost); with kNorm only after the norm's barriers.
    const bool active = col0 < n;
    if (!kNorm && !active) return;
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
    extern __shared__ uint4 x_shared[];  // kNorm: [kRows][k_vecs]
    if constexpr (kNorm) {
        norm_rows_to_shared<kRows>(norm, k, x_shared);
        if (!active) return;
    }

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
                if constexpr (kNorm)
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
                          int64_t, int, NormArgs);

// Every compiled specialisation for one output type: [cols_per_block index (1, 2, 4)][rows - 1].
template <typename Out, bool kNorm = false>
constexpr KernelFn<Out> kKernels[3][kGemvRowsPerLaunch] = {
    {gemv_kernel<1, 1, Out, kNorm>, gemv_kernel<2, 1, Out, kNorm>, gemv_kernel<3, 1, Out, kNorm>,
     gemv_kernel<4, 1, Out, kNorm>, gemv_kernel<5, 1, Out, kNorm>, gemv_kernel<6, 1, Out, kNorm>,
     gemv_kernel<7, 1, Out, kNorm>, gemv_kernel<8, 1, Out, kNorm>},
    {gemv_kernel<1, 2, Out, kNorm>, gemv_kernel<2, 2, Out, kNorm>, gemv_kernel<3, 2, Out, kNorm>,
     gemv_kernel<4, 2, Out, kNorm>, gemv_kernel<5, 2, Out, kNorm>, gemv_kernel<6, 2, Out, kNorm>,
     gemv_kernel<7, 2, Out, kNorm>, gemv_kernel<8, 2, Out, kNorm>},
    {gemv_kernel<1, 4, Out, kNorm>, gemv_kernel<2, 4, Out, kNorm>, gemv_kernel<3, 4, Out, kNorm>,
     gemv_kernel<4, 4, Out, kNorm>, gemv_kernel<5, 4, Out, kNorm>, gemv_kernel<6, 4, Out, kNorm>,
     gemv_kernel<7, 4, Out, kNorm>, gemv_kernel<8, 4, Out, kNorm>},
};

// Rows beyond one launch's kGemvRowsPerLaunch: further launches, each re-reading w.
template <typename Out>
void launch_rows(const Tensor& x, const Tensor& w, const __nv_bfloat16* bias, Tensor& y,
                 int cols_idx, int64_t blocks, cudaStream_t stream) {
    const int64_t n = w.size(0), k = w.size(1), m = x.numel() / k;
    for (int64_t row0 = 0; row0 < m; row0 += kGemvRowsPerLaunch) {
        const int64_t rows = std::min(kGemvRowsPerLaunch, m - row0);
        launch_kernel(kKernels<Out>[cols_idx][rows - 1], unsigned(blocks), kThreads, 0, stream,
                      x.data<__nv_bfloat16>() + row0 * k, w.data<__nv_bfloat16>(), bias,
                      y.data<Out>() + row0 * n, n, int(k), NormArgs{});
        MI_CUDA_CHECK(cudaGetLastError());
    }
}

// Columns per warp by n: small n (the 1024-wide o_proj and down of a 0.6B model) needs one column
// per warp for enough warps in flight; wide n (lm_head) can share x reads over more.
int pick_cols(int64_t n) {
    if (n >= 16384) return 4;
    if (n >= 4096) return 2;
    return 1;
}

bool aligned16(const void* p) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0;
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

    const int cols = cols_per_block ? cols_per_block : pick_cols(n);
    const int cols_idx = cols == 1 ? 0 : cols == 2 ? 1 : 2;
    const int64_t cols_per_cta = int64_t(cols) * kWarpsPerBlock;
    const int64_t blocks = (n + cols_per_cta - 1) / cols_per_cta;
    MI_LAUNCH_CHECK(blocks <= INT32_MAX, "gemv: n too large for the grid");
    const auto* bias_ptr = bias ? bias->data<__nv_bfloat16>() : nullptr;
    if (y.dtype() == DType::kF32)
        launch_rows<float>(x, w, bias_ptr, y, cols_idx, blocks, stream);
    else
        launch_rows<__nv_bfloat16>(x, w, bias_ptr, y, cols_idx, blocks, stream);
}

bool gemv_rms_norm_supported(const AddRmsNorm& in, const Tensor& w, const Tensor* bias,
                             const Tensor& y) {
    if (!in.residual || !in.weight || (in.delta && !in.residual_out)) return false;
    const Tensor& r = *in.residual;
    if (!gemv_supported(r, w, bias, y) || y.dtype() != DType::kBF16) return false;
    const int64_t k = w.size(1), m = r.numel() / k;
    if (m < 1 || m > kGemvRowsPerLaunch || m * k * 2 > kGemvNormMaxSharedBytes) return false;
    if (!is_cuda_tensor(*in.weight, DType::kBF16) || in.weight->ndim() != 1 ||
        in.weight->size(0) != k || !aligned16(in.weight->raw()))
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
                    "gemv_rms_norm: operands as for gemv (y bf16) with the norm's rows as x, at "
                    "most 8 rows whose bf16 values fit in 64 KB, weight [k], and residual_out "
                    "a third buffer besides residual and delta");
    const int64_t n = w.size(0), k = w.size(1), m = in.residual->numel() / k;
    if (n == 0) return;
    const int cols = pick_cols(n);
    const int cols_idx = cols == 1 ? 0 : cols == 2 ? 1 : 2;
    const int64_t cols_per_cta = int64_t(cols) * kWarpsPerBlock;
    const int64_t blocks = (n + cols_per_cta - 1) / cols_per_cta;
    MI_LAUNCH_CHECK(blocks <= INT32_MAX, "gemv: n too large for the grid");
    const KernelFn<__nv_bfloat16> kernel = kKernels<__nv_bfloat16, true>[cols_idx][m - 1];
    static const bool shared_allowed = [] {  // every specialisation, once
        for (const auto& by_rows : kKernels<__nv_bfloat16, true>)
            for (const KernelFn<__nv_bfloat16> f : by_rows)
                MI_CUDA_CHECK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   int(kGemvNormMaxSharedBytes)));
        return true;
    }();
    (void)shared_allowed;
    const NormArgs args{.delta = in.delta ? in.delta->data<__nv_bfloat16>() : nullptr,
                        .residual = in.residual->data<__nv_bfloat16>(),
                        .residual_out = in.delta ? in.residual_out->data<__nv_bfloat16>() : nullptr,
                        .weight = in.weight->data<__nv_bfloat16>(),
                        .normed = in.normed ? in.normed->data<__nv_bfloat16>() : nullptr,
                        .eps = in.eps};
    launch_kernel(kernel, unsigned(blocks), kThreads, size_t(m * k * 2), stream,
                  static_cast<const __nv_bfloat16*>(nullptr), w.data<__nv_bfloat16>(),
                  bias ? bias->data<__nv_bfloat16>() : nullptr, y.data<__nv_bfloat16>(), n, int(k),
                  args);
    MI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace miniinfer::cuda
