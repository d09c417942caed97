// y[m, n] = block-scaled FP8 x[m, k] · w[n, k]ᵀ (+ bias) for a few rows of x: the FP8 decode GEMM
// at small batch, with cpu::fp8_block_linear's arithmetic (fp8_gemv.h).
//
// As in gemv.cu the only goal is keeping enough 16-byte loads of w in flight to saturate HBM; an
// e4m3 weight is half the bytes of a bf16 one, so the time is half gemv's when that holds. Layout:
//   - every block first quantizes all m rows of x into shared memory (fp8.cuh's helpers: a
//     half-warp per 128-group, its amax by shuffles), storing each q as its exact value in bf16
//     (an e4m3 value has 4 significant bits): widening a bf16 is one integer op, where an e4m3
//     byte would take conversions (slow on the SM) for every row of every weight vector;
//   - the grid is persistent (at most as many blocks as fit on the SMs at once), because each
//     block pays for that prologue: a warp then walks output columns kCols at a time, lanes
//     striding k in 16-byte vectors of 16 e4m3 (L1 bypassed), 4 to 8 loads in flight a lane;
//   - a vector lies in one 128-block, so a lane's 16 products (exact in fp32) make its share of
//     that block's partial, scaled at once by s_x · w_scale (the CPU's partial · s · w_scale):
//     the sum differs from the CPU's only in order and in where the scales are applied;
//   - the m x kCols sums per lane end in gemv.cuh's reduce-scatter.
// Launched with PDL: a warp issues its first loads of w before waiting for the kernel that
// writes x. The fused forms (XFrom) compute x in the prologue from the previous op's inputs.
#include "kernels/cuda/gemm/fp8_gemv.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <tuple>
#include <utility>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "kernels/cuda/elementwise/silu_mul.cuh"
#include "kernels/cuda/gemm/gemv.cuh"
#include "kernels/cuda/norm/rms_norm.cuh"
#include "kernels/cuda/primitives/check_tensor.h"
#include "kernels/cuda/primitives/fp8.cuh"
#include "kernels/cuda/primitives/launch.cuh"
#include "kernels/cuda/primitives/reduce.cuh"

namespace miniinfer::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kCols = 2;                                   // output columns a warp owns at a time
constexpr int kFp8PerVec = 16;                             // e4m3 weights per 16-byte load
constexpr int kBf16PerVec = 8;                             // bf16 per 16-byte vector of x
constexpr int kVecsPerGroup = kFp8GroupSize / kFp8PerVec;  // 8 weight vectors a block
constexpr int kBf16VecsPerGroup = kFp8GroupSize / kBf16PerVec;  // 16 lanes a group of x

constexpr int next_pow2(int v) {
    int p = 1;
    while (p < v) p *= 2;
    return p;
}

__device__ __forceinline__ void store_out(__nv_bfloat16* y, float v) {
    *y = __float2bfloat16_rn(v);
}
__device__ __forceinline__ void store_out(float* y, float v) {
    *y = v;
}

// Sixteen e4m3 weights (a 16-byte vector) as floats, low byte first.
__device__ __forceinline__ void widen_e4m3x16(const uint4& v, float (&out)[16]) {
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 lo = fp8x2_values(uint16_t(words[i] & 0xffffu));
        const float2 hi = fp8x2_values(uint16_t(words[i] >> 16));
        out[4 * i] = lo.x;
        out[4 * i + 1] = lo.y;
        out[4 * i + 2] = hi.x;
        out[4 * i + 3] = hi.y;
    }
}

// Where the kernel's x comes from: global memory, or a prologue computing it from what the
// kernel before would have turned into x (one kernel fewer).
enum class XFrom {
    kGlobal,   // fp8_gemv: x itself
    kRmsNorm,  // fp8_gemv_rms_norm: the residual add + RMSNorm (rms_norm.h's AddRmsNorm)
    kSiluMul,  // fp8_gemv_silu_mul: SiLU(gate) · up of a [rows, 2k] gate_up (silu_mul.h)
};

struct XSource {
    const __nv_bfloat16* x;  // kGlobal: [rows, k]
    // kRmsNorm
    const __nv_bfloat16* delta;  // null: the residual is normalised as it is
    const __nv_bfloat16* residual;
    __nv_bfloat16* residual_out;  // residual + delta, stored by block 0
    const __nv_bfloat16* weight;  // [k]
    __nv_bfloat16* normed;        // the normed rows, stored by block 0; may be null
    float eps;
    const __nv_bfloat16* gate_up;  // kSiluMul: [rows, 2k]
};

// inv_rms_s[r] = 1 / rms(residual[r] + delta[r]) for the block's rows: add_rms_norm's bf16 sums
// (rms_norm.cuh), squared and added in fp32 in this kernel's order. Block 0 stores the sums in
// residual_out. Called by every thread of the block; ends with a barrier.
template <int kRows>
__device__ __forceinline__ void rms_of_rows(const XSource& a, int k, float* inv_rms_s) {
    const int k_vecs = k / kBf16PerVec;
    const auto* residual = reinterpret_cast<const uint4*>(a.residual);
    float sum_sq[kRows] = {};
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        for (int v = int(threadIdx.x); v < k_vecs; v += kThreads) {
            const int64_t at = int64_t(r) * k_vecs + v;
            uint4 sum = residual[at];
            if (a.delta) {
                sum = add_residual_x8(reinterpret_cast<const uint4*>(a.delta)[at], sum);
                if (blockIdx.x == 0) reinterpret_cast<uint4*>(a.residual_out)[at] = sum;
            }
            float f[8];
            unpack_bf16x8(sum, f);
#pragma unroll
            for (int j = 0; j < 8; ++j) sum_sq[r] += f[j] * f[j];
        }
    }
    __shared__ float partial[kWarps][kRows];
    const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const float s = warp_sum(sum_sq[r]);
        if (lane == 0) partial[warp][r] = s;
    }
    __syncthreads();
    if (threadIdx.x < kRows) {
        float total = 0.f;
#pragma unroll
        for (int i = 0; i < kWarps; ++i) total += partial[i][threadIdx.x];
        inv_rms_s[threadIdx.x] = rsqrtf(total / float(k) + a.eps);
    }
    __syncthreads();
}

// Vector v (8 bf16) of x's row r, from the source; v < k / 8.
template <XFrom kX>
__device__ __forceinline__ uint4 x_vector(const XSource& a, int k, int r, int v,
                                          const float* inv_rms_s) {
    const int k_vecs = k / kBf16PerVec;
    const int64_t at = int64_t(r) * k_vecs + v;
    if constexpr (kX == XFrom::kGlobal) {
        return reinterpret_cast<const uint4*>(a.x)[at];
    } else if constexpr (kX == XFrom::kRmsNorm) {
        uint4 sum = reinterpret_cast<const uint4*>(a.residual)[at];
        if (a.delta) sum = add_residual_x8(reinterpret_cast<const uint4*>(a.delta)[at], sum);
        return rms_normed_x8(sum, inv_rms_s[r],
                             __ldg(reinterpret_cast<const uint4*>(a.weight) + v));
    } else {
        const auto* gu = reinterpret_cast<const uint4*>(a.gate_up) + int64_t(r) * 2 * k_vecs;
        const uint4 g = gu[v], u = gu[k_vecs + v];
        const auto* gh = reinterpret_cast<const __nv_bfloat16*>(&g);
        const auto* uh = reinterpret_cast<const __nv_bfloat16*>(&u);
        uint4 out;
        auto* oh = reinterpret_cast<__nv_bfloat16*>(&out);
#pragma unroll
        for (int j = 0; j < kBf16PerVec; ++j) oh[j] = silu_mul_bf16(gh[j], uh[j]);
        return out;
    }
}

// x_s[r][:] = the quantized rows of x (each e4m3 value exact in bf16) and scales_s[r][g] their
// groups' scales, with fp8.cuh's arithmetic (the CPU's bits). A half-warp takes one 128-group,
// 8 values a lane (a shorter last group: lanes past k hold zeros, which leave the amax alone);
// a warp issues the loads of kBatch pairs of groups before using any. Block 0 of the norm form
// also stores the normed rows. Called by every thread of the block; ends with a barrier.
template <int kRows, XFrom kX>
__device__ __forceinline__ void quantize_rows_to_shared(const XSource& a, int k,
                                                        const float* inv_rms_s, uint4* x_s,
                                                        float* scales_s) {
    constexpr int kBatch = 4;
    const int groups = (k + kFp8GroupSize - 1) / kFp8GroupSize;
    const int k_vecs = k / kBf16PerVec;
    const int units = kRows * groups;
    const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
    const int half = lane / 16, sub = lane % 16;
    for (int base = warp * 2 * kBatch; base < units; base += kWarps * 2 * kBatch) {
        uint4 t[kBatch];
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
            const int unit = base + 2 * b + half;
            const int r = unit / groups, v = (unit % groups) * kBf16VecsPerGroup + sub;
            t[b] = unit < units && v < k_vecs ? x_vector<kX>(a, k, r, v, inv_rms_s)
                                              : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
            const int unit = base + 2 * b + half;
            const int r = unit / groups, g = unit % groups, v = g * kBf16VecsPerGroup + sub;
            float f[8];
            unpack_bf16x8(t[b], f);
            uint4 q;
            const float scale = fp8_quantize_group8(f, q);  // every lane: a shuffle
            if (unit >= units || v >= k_vecs) continue;
            x_s[int64_t(r) * k_vecs + v] = q;
            if (sub == 0) scales_s[r * groups + g] = scale;
            if constexpr (kX == XFrom::kRmsNorm) {
                if (blockIdx.x == 0 && a.normed)
                    reinterpret_cast<uint4*>(a.normed)[int64_t(r) * k_vecs + v] = t[b];
            }
        }
    }
    __syncthreads();
}

// w: [n, k] e4m3; w_scale: [ceil(n / 128), ceil(k / 128)] f32; bias: [n] bf16 or null; y: [kRows,
// n] bf16 or f32 (Out); x from src (kX), kRows * k bf16 then kRows * ceil(k / 128) f32 of dynamic
// shared memory. k % 16 == 0 and x, w 16-byte aligned (checked by the launcher). Warp g of the
// grid owns columns [g * kCols, g * kCols + kCols), then the same plus the grid's width, ...
template <int kRows, typename Out, XFrom kX>
__global__ void __launch_bounds__(kThreads)
    fp8_gemv_kernel(const uint8_t* __restrict__ w, const float* __restrict__ w_scale,
                    const __nv_bfloat16* __restrict__ bias, Out* __restrict__ y, int64_t n, int k,
                    XSource src) {
    constexpr int kValues = next_pow2(kRows * kCols);  // padded for the reduce-scatter
    // Vectors of each column a lane loads at once: 8 loads in flight, 4 from 5 rows on (where the
    // rows' products outweigh the loads, and 8 would spill registers).
    constexpr int kUnroll = kRows <= 4 ? 4 : 2;
    const int lane = int(threadIdx.x) % 32;
    const int k_vecs = k / kFp8PerVec, groups = (k + kFp8GroupSize - 1) / kFp8GroupSize;
    const int64_t col_step = int64_t(gridDim.x) * kWarps * kCols;
    int64_t col0 = (int64_t(blockIdx.x) * kWarps + threadIdx.x / 32) * kCols;

    const uint4* w_rows[kCols];  // columns past n read row n - 1; their sums are dropped
    const float* s_rows[kCols];  // their rows of w_scale
    auto point_at = [&](int64_t first_col) {
#pragma unroll
        for (int c = 0; c < kCols; ++c) {
            const int64_t row = first_col + c < n ? first_col + c : n - 1;
            w_rows[c] = reinterpret_cast<const uint4*>(w + row * k);
            s_rows[c] = w_scale + (row / kFp8GroupSize) * groups;
        }
    };
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
    // No earlier kernel writes w: the first round of it is loaded before the wait (launch.cuh).
    if (col0 < n) {
        point_at(col0);
        load_w(lane);
    }
    pdl_wait();
    pdl_trigger();
    extern __shared__ uint4 x_shared[];  // [kRows][k / 8] bf16, then scales [kRows][groups]
    auto* scales_s = reinterpret_cast<float*>(x_shared + kRows * (k / kBf16PerVec));
    __shared__ float inv_rms_s[kRows];
    if constexpr (kX == XFrom::kRmsNorm) rms_of_rows<kRows>(src, k, inv_rms_s);
    quantize_rows_to_shared<kRows, kX>(src, k, inv_rms_s, x_shared, scales_s);

    for (bool first = true; col0 < n; col0 += col_step, first = false) {
        if (!first) {
            point_at(col0);
            load_w(lane);
        }
        float acc[kRows * kCols] = {};  // acc[r * kCols + c]: row r of x times column c
        for (int base = lane; base < k_vecs; base += 32 * kUnroll) {
            if (base != lane) load_w(base);
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
                const int vec = base + 32 * u;
                if (vec >= k_vecs) break;
                const int g = vec / kVecsPerGroup;
                float w_f[kCols][16], w_s[kCols];
#pragma unroll
                for (int c = 0; c < kCols; ++c) {
                    widen_e4m3x16(w_vec[u][c], w_f[c]);
                    w_s[c] = __ldg(s_rows[c] + g);
                }
#pragma unroll
                for (int r = 0; r < kRows; ++r) {
                    float x_f[2][8];  // the vector's 16 values of x as two bf16 vectors
                    const uint4* xv = x_shared + int64_t(r) * (k / kBf16PerVec) + 2 * vec;
                    unpack_bf16x8(xv[0], x_f[0]);
                    unpack_bf16x8(xv[1], x_f[1]);
                    const float x_s = scales_s[r * groups + g];
#pragma unroll
                    for (int c = 0; c < kCols; ++c) {
                        float partial = 0.f;
#pragma unroll
                        for (int j = 0; j < 16; ++j)
                            partial = fmaf(x_f[j / 8][j % 8], w_f[c][j], partial);
                        // The CPU's partial * s_x * w_scale, never contracted into an FMA.
                        acc[r * kCols + c] = __fadd_rn(acc[r * kCols + c],
                                                       __fmul_rn(__fmul_rn(partial, x_s), w_s[c]));
                    }
                }
            }
        }

        float padded[kValues];  // zeros up to a power of two
#pragma unroll
        for (int i = 0; i < kValues; ++i) padded[i] = i < kRows * kCols ? acc[i] : 0.f;
        warp_reduce_scatter(padded, lane);
        constexpr int kLanesPerValue = 32 / kValues;
        const int value = lane / kLanesPerValue;
        const int r = value / kCols, c = value % kCols;
        const int64_t col = col0 + c;
        if (lane % kLanesPerValue == 0 && r < kRows && col < n) {
            float sum = padded[0];
            if (bias) sum += __bfloat162float(bias[col]);
            store_out(y + int64_t(r) * n + col, sum);
        }
    }
}

template <typename Out>
using KernelFn = void (*)(const uint8_t*, const float*, const __nv_bfloat16*, Out*, int64_t, int,
                          XSource);

template <typename Out, XFrom kX, int... kRowsLess1>
constexpr std::array<KernelFn<Out>, sizeof...(kRowsLess1)> by_rows(
    std::integer_sequence<int, kRowsLess1...>) {
    return {fp8_gemv_kernel<kRowsLess1 + 1, Out, kX>...};
}

// Every compiled specialisation for one output type and x source, by rows - 1.
template <typename Out, XFrom kX>
constexpr std::array<KernelFn<Out>, kFp8GemvMaxRows> kKernels =
    by_rows<Out, kX>(std::make_integer_sequence<int, int(kFp8GemvMaxRows)>{});

int64_t groups_of(int64_t len) {
    return (len + kFp8GroupSize - 1) / kFp8GroupSize;
}

// The dynamic shared memory of m rows of k: the quantized values as bf16, then the scales.
int64_t shared_bytes(int64_t m, int64_t k) {
    return m * k * 2 + m * groups_of(k) * 4;
}

// What every form needs besides its x operands: m rows of k, w, w_scale, bias and y.
bool operands_supported(int64_t m, int64_t k, const Tensor& w, const Tensor& w_scale,
                        const Tensor* bias, const Tensor& y) {
    if (!is_cuda_tensor(w, DType::kF8E4M3) || !is_cuda_tensor(w_scale, DType::kF32) ||
        !(is_cuda_tensor(y, DType::kBF16) || is_cuda_tensor(y, DType::kF32)) || w.ndim() != 2 ||
        w_scale.ndim() != 2)
        return false;
    const int64_t n = w.size(0);
    if (k <= 0 || w.size(1) != k || k % kFp8PerVec != 0 || k > INT32_MAX || !aligned16(w.raw()))
        return false;
    if (w_scale.size(0) != groups_of(n) || w_scale.size(1) != groups_of(k)) return false;
    if (m < 1 || m > kFp8GemvMaxRows || shared_bytes(m, k) > kFp8GemvMaxSharedBytes) return false;
    if (y.numel() != m * n || y.ndim() < 1 || y.size(-1) != n) return false;
    return !bias ||
           (is_cuda_tensor(*bias, DType::kBF16) && bias->ndim() == 1 && bias->size(0) == n);
}

// One launch: a persistent grid of at most as many blocks as fit on the SMs at once.
template <XFrom kX, typename Out>
void launch_typed(const Tensor& w, const Tensor& w_scale, const Tensor* bias, Tensor& y, int64_t m,
                  const XSource& src, cudaStream_t stream) {
    const int64_t n = w.size(0), k = w.size(1);
    const KernelFn<Out> kernel = kKernels<Out, kX>[m - 1];
    static const bool shared_allowed = [] {  // every specialisation, once
        for (const KernelFn<Out> f : kKernels<Out, kX>)
            MI_CUDA_CHECK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               int(kFp8GemvMaxSharedBytes)));
        return true;
    }();
    (void)shared_allowed;
    const size_t bytes = size_t(shared_bytes(m, k));
    // Blocks that fit on the device at once, asked once per kernel, size and device (an eager
    // step launches this for every projection).
    int device = 0;
    MI_CUDA_CHECK(cudaGetDevice(&device));
    thread_local std::map<std::tuple<const void*, size_t, int>, int64_t> resident_blocks;
    int64_t& resident = resident_blocks[{reinterpret_cast<const void*>(kernel), bytes, device}];
    if (resident == 0) {
        int per_sm = 0;
        MI_CUDA_CHECK(
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, bytes));
        MI_LAUNCH_CHECK(per_sm > 0, "fp8_gemv: no block fits on an SM");
        resident = int64_t(per_sm) * sm_count();
    }
    const int64_t cols_per_block = int64_t(kWarps) * kCols;
    const int64_t blocks = std::min<int64_t>((n + cols_per_block - 1) / cols_per_block, resident);
    launch_kernel(kernel, unsigned(blocks), kThreads, bytes, stream, w.data<uint8_t>(),
                  w_scale.data<float>(), bias ? bias->data<__nv_bfloat16>() : nullptr,
                  y.data<Out>(), n, int(k), src);
    MI_CUDA_CHECK(cudaGetLastError());
}

template <XFrom kX>
void launch(const Tensor& w, const Tensor& w_scale, const Tensor* bias, Tensor& y, int64_t m,
            const XSource& src, cudaStream_t stream) {
    if (w.size(0) == 0) return;
    if (y.dtype() == DType::kF32)
        launch_typed<kX, float>(w, w_scale, bias, y, m, src, stream);
    else
        launch_typed<kX, __nv_bfloat16>(w, w_scale, bias, y, m, src, stream);
}

}  // namespace

bool fp8_gemv_supported(const Tensor& x, const Tensor& w, const Tensor& w_scale, const Tensor* bias,
                        const Tensor& y) {
    if (!is_cuda_tensor(x, DType::kBF16) || w.ndim() != 2 || x.ndim() < 1 ||
        x.size(-1) != w.size(1) || !aligned16(x.raw()) || w.size(1) <= 0)
        return false;
    return operands_supported(x.numel() / w.size(1), w.size(1), w, w_scale, bias, y);
}

void fp8_gemv(const Tensor& x, const Tensor& w, const Tensor& w_scale, const Tensor* bias,
              Tensor& y, cudaStream_t stream) {
    MI_LAUNCH_CHECK(fp8_gemv_supported(x, w, w_scale, bias, y),
                    "fp8_gemv: x bf16 [.., k] with 1..8 rows, w f8e4m3 [n, k] with k % 16 == 0, "
                    "x and w 16-byte aligned, w_scale f32 [ceil(n / 128), ceil(k / 128)], bias "
                    "bf16 [n], y bf16 or f32 [.., n], the rows' bf16 values within 224 KiB");
    XSource src{};
    src.x = x.data<__nv_bfloat16>();
    launch<XFrom::kGlobal>(w, w_scale, bias, y, x.numel() / w.size(1), src, stream);
}

bool fp8_gemv_rms_norm_supported(const AddRmsNorm& in, const Tensor& w, const Tensor& w_scale,
                                 const Tensor* bias, const Tensor& y) {
    if (!in.residual || !in.weight || (in.delta && !in.residual_out)) return false;
    const Tensor& r = *in.residual;
    if (!is_cuda_tensor(r, DType::kBF16) || r.ndim() < 1 || w.ndim() != 2 || w.size(1) <= 0 ||
        r.size(-1) != w.size(1) || !aligned16(r.raw()) ||
        !operands_supported(r.numel() / w.size(1), w.size(1), w, w_scale, bias, y))
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

void fp8_gemv_rms_norm(const AddRmsNorm& in, const Tensor& w, const Tensor& w_scale,
                       const Tensor* bias, Tensor& y, cudaStream_t stream) {
    MI_LAUNCH_CHECK(fp8_gemv_rms_norm_supported(in, w, w_scale, bias, y),
                    "fp8_gemv_rms_norm: operands as for fp8_gemv with the norm's rows as x, "
                    "weight [k], and residual_out a third buffer besides residual and delta");
    XSource src{};
    src.delta = in.delta ? in.delta->data<__nv_bfloat16>() : nullptr;
    src.residual = in.residual->data<__nv_bfloat16>();
    src.residual_out = in.delta ? in.residual_out->data<__nv_bfloat16>() : nullptr;
    src.weight = in.weight->data<__nv_bfloat16>();
    src.normed = in.normed ? in.normed->data<__nv_bfloat16>() : nullptr;
    src.eps = in.eps;
    launch<XFrom::kRmsNorm>(w, w_scale, bias, y, in.residual->numel() / w.size(1), src, stream);
}

bool fp8_gemv_silu_mul_supported(const Tensor& gate_up, const Tensor& w, const Tensor& w_scale,
                                 const Tensor* bias, const Tensor& y) {
    if (!is_cuda_tensor(gate_up, DType::kBF16) || gate_up.ndim() != 2 || w.ndim() != 2 ||
        gate_up.size(1) != 2 * w.size(1) || !aligned16(gate_up.raw()))
        return false;
    // k % 16 == 0 keeps every 8-element vector of gate_up's up half 16-byte aligned.
    return operands_supported(gate_up.size(0), w.size(1), w, w_scale, bias, y);
}

void fp8_gemv_silu_mul(const Tensor& gate_up, const Tensor& w, const Tensor& w_scale,
                       const Tensor* bias, Tensor& y, cudaStream_t stream) {
    MI_LAUNCH_CHECK(fp8_gemv_silu_mul_supported(gate_up, w, w_scale, bias, y),
                    "fp8_gemv_silu_mul: gate_up [rows, 2k] bf16, 16-byte aligned, 1..8 rows; w, "
                    "w_scale, bias, y as for fp8_gemv");
    XSource src{};
    src.gate_up = gate_up.data<__nv_bfloat16>();
    launch<XFrom::kSiluMul>(w, w_scale, bias, y, gate_up.size(0), src, stream);
}

}  // namespace miniinfer::cuda
