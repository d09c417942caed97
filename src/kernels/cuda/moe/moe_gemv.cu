// The MoE expert projections for a few tokens: one warp per output value, streaming the chosen
// experts' weight rows once (the layout of gemv.cu, with the expert picked per warp).
//
// At one decode token Qwen3-30B-A3B's MoE block reads 8 experts × 9.4 MB = 75 MB a layer and does
// 2 FLOP per weight byte: a stream of weights, like the dense gemv. The grouped GEMMs pay for
// their generality there (a permutation, tiles padded to 16 rows, separate SiLU·mul and combine
// kernels); these two kernels take (token, choice) pairs straight from moe_route:
//   - gate_up: warp (pair p, column i) dots x[token(p)] with expert e's gate row i and up row i
//     and writes silu(g) · u for that one value: 2 weight rows per warp, n·k·inter warps;
//   - down: warp (token t, column c) dots each choice's activation row with its expert's down row
//     c, rounds each to bf16 (as the grouped path's y_perm), and adds them weighted in choice
//     order (moe_combine's sum): the combine costs nothing extra and needs no atomics.
// Lanes stride the reduction dimension in 16-byte vectors with ~8 weight loads in flight each,
// issued with their x vectors (tiny rows, from L1 after the first warp of an SM). down knows its
// experts before its PDL wait (moe_route ran two kernels back) and loads its first round of
// weights before waiting for gate_up, not all of its rows: those would take bandwidth from the
// gate_up kernel still running. The routing stays in moe_route's own kernel: warps routing their
// own token from the router's logits slowed gate_up by more than that kernel costs. Both measured
// at batch 1 on the H200 (bench/RESULTS.md#moe-gemv-routing).
// The FP8 experts (block-scaled e4m3, moe_gemv.h) run the same dot loop (partial_dots, with
// Fp8Dot for Bf16Dot: 16 weights a load) after a prologue that quantizes the block's activation
// rows into shared memory; since every block pays for that, a block takes one pair (gate_up) or
// one token (down) and kFp8ColsPerBlock columns, each warp several. Not yet measured.
#include "kernels/cuda/moe/moe_gemv.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "kernels/cuda/elementwise/silu_mul.cuh"
#include "kernels/cuda/gemm/fp8_gemv.h"
#include "kernels/cuda/gemm/gemv.cuh"
#include "kernels/cuda/primitives/check_tensor.h"
#include "kernels/cuda/primitives/fp8.cuh"
#include "kernels/cuda/primitives/launch.cuh"
#include "kernels/cuda/primitives/reduce.cuh"

namespace miniinfer::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kThreads = 32 * kWarpsPerBlock;
constexpr int kVecElems = 8;  // bf16 per 16-byte load
// Output columns a block of the FP8 kernels takes (each warp a quarter of them): every block
// quantizes its activation rows once, so it should own more than one column a warp.
constexpr int kFp8ColsPerBlock = 16;

// The bf16 dot of partial_dots: x rows in global memory (tiny, from L1 after the first warp of an
// SM), 8 bf16 a 16-byte vector of w.
template <int kRows>
struct Bf16Dot {
    using XVec = uint4;
    const uint4* x[kRows];  // [k_vecs] each
    __device__ __forceinline__ XVec load_x(int i, int vec) const { return __ldg(x[i] + vec); }
    __device__ __forceinline__ void accumulate(int, int, const uint4& w_vec, const XVec& x_vec,
                                               float& acc) const {
        float w_f[8], x_f[8];
        unpack_bf16x8(w_vec, w_f);
        unpack_bf16x8(x_vec, x_f);
#pragma unroll
        for (int q = 0; q < 8; ++q) acc = fmaf(x_f[q], w_f[q], acc);
    }
};

// The block-scaled FP8 dot (fp8_linear.h's arithmetic): x rows quantized in shared memory (each
// e4m3 value as its exact bf16, quantize_rows_to_shared), 16 e4m3 a 16-byte vector of w, which lies
// in one 128-block: the lane's 16 products (exact in fp32) are its share of that block's partial,
// scaled at once by the two block scales (the CPU's partial · s_x · w_scale, in another order).
template <int kRows>
struct Fp8Dot {
    static constexpr int kVecElems = 16;
    struct XVec {
        uint4 lo, hi;
    };
    const uint4* x[kRows];         // shared: [k / 8] bf16 vectors each
    const float* x_scales[kRows];  // shared: [ceil(k / 128)] each
    const float* w_scales[kRows];  // global: the weight row's block scales, [ceil(k / 128)]
    __device__ __forceinline__ XVec load_x(int i, int vec) const {
        return {x[i][2 * vec], x[i][2 * vec + 1]};
    }
    __device__ __forceinline__ void accumulate(int i, int vec, const uint4& w_vec,
                                               const XVec& x_vec, float& acc) const {
        const int block = vec / (kFp8GroupSize / kVecElems);
        float x_f[2][8];
        unpack_bf16x8(x_vec.lo, x_f[0]);
        unpack_bf16x8(x_vec.hi, x_f[1]);
        const uint32_t words[4] = {w_vec.x, w_vec.y, w_vec.z, w_vec.w};
        float partial = 0.f;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const float2 lo = fp8x2_values(uint16_t(words[q] & 0xffffu));
            const float2 hi = fp8x2_values(uint16_t(words[q] >> 16));
            partial = fmaf(x_f[q / 2][4 * (q % 2)], lo.x, partial);
            partial = fmaf(x_f[q / 2][4 * (q % 2) + 1], lo.y, partial);
            partial = fmaf(x_f[q / 2][4 * (q % 2) + 2], hi.x, partial);
            partial = fmaf(x_f[q / 2][4 * (q % 2) + 3], hi.y, partial);
        }
        // Rounded as the CPU's partial * s_x * w_scale, never contracted into an FMA.
        acc = __fadd_rn(
            acc, __fmul_rn(__fmul_rn(partial, x_scales[i][block]), __ldg(w_scales[i] + block)));
    }
};

// acc[i] += this lane's share of x[i] · w[i] for kRows (x row, weight row) pairs of k_vecs 16-byte
// weight vectors each (Dot: Bf16Dot or Fp8Dot, which holds the x rows): lane L takes vectors L,
// L + 32, ...; all loads of one round, of w and of x, are issued before any is used (x loaded
// inside the multiply loop costs a round trip a vector). before_x() runs once, after the first
// round's loads of w and before any load of x: the PDL wait of a kernel whose weight rows are
// known before the kernel it waits for has finished.
template <int kRows, class Dot, class BeforeX>
__device__ __forceinline__ void partial_dots(const Dot& dot, const uint4* const (&w)[kRows],
                                             int k_vecs, int lane, float (&acc)[kRows],
                                             BeforeX&& before_x) {
    constexpr int kUnroll = kRows >= 8 ? 1 : 8 / kRows;
    for (int base = lane; base < k_vecs; base += 32 * kUnroll) {
        uint4 w_vec[kUnroll][kRows];
        typename Dot::XVec x_vec[kUnroll][kRows];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            if (base + 32 * u < k_vecs) {
#pragma unroll
                for (int i = 0; i < kRows; ++i) w_vec[u][i] = load_streaming(w[i] + base + 32 * u);
            }
        }
        if (base == lane) before_x();
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            if (base + 32 * u < k_vecs) {
#pragma unroll
                for (int i = 0; i < kRows; ++i) x_vec[u][i] = dot.load_x(i, base + 32 * u);
            }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int vec = base + 32 * u;
            if (vec >= k_vecs) break;
#pragma unroll
            for (int i = 0; i < kRows; ++i)
                dot.accumulate(i, vec, w_vec[u][i], x_vec[u][i], acc[i]);
        }
    }
    if (k_vecs <= lane) before_x();  // a lane without vectors still waits
}

// Warp (p, i) of pairs × inter; see the file comment.
__global__ void __launch_bounds__(kThreads)
    gate_up_silu_kernel(const __nv_bfloat16* __restrict__ x, const int32_t* __restrict__ topk_ids,
                        const __nv_bfloat16* __restrict__ w, __nv_bfloat16* __restrict__ act,
                        int64_t pairs, int top_k, int64_t inter, int64_t hidden) {
    pdl_wait();
    pdl_trigger();
    const int lane = int(threadIdx.x) % 32;
    const int64_t warp = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
    if (warp >= pairs * inter) return;  // whole warp
    const int64_t p = warp / inter, i = warp % inter;
    const __nv_bfloat16* w_e = w + int64_t(topk_ids[p]) * 2 * inter * hidden;
    const auto* x_row = reinterpret_cast<const uint4*>(x + (p / top_k) * hidden);
    const Bf16Dot<2> dot{{x_row, x_row}};
    const uint4* const ws[2] = {reinterpret_cast<const uint4*>(w_e + i * hidden),
                                reinterpret_cast<const uint4*>(w_e + (inter + i) * hidden)};
    float acc[2] = {};
    partial_dots<2>(dot, ws, int(hidden / kVecElems), lane, acc, [] {});
    warp_all_reduce(acc);
    if (lane == 0)
        act[p * inter + i] =
            silu_mul_bf16(__float2bfloat16_rn(acc[0]), __float2bfloat16_rn(acc[1]));
}

// Warp (t, c) of n × hidden, kPass choices at a time (kPass divides top_k); see the file comment.
template <int kPass>
__global__ void __launch_bounds__(kThreads)
    down_combine_kernel(const __nv_bfloat16* __restrict__ act, const int32_t* __restrict__ topk_ids,
                        const float* __restrict__ topk_weights, const __nv_bfloat16* __restrict__ w,
                        __nv_bfloat16* __restrict__ out, int64_t n, int top_k, int64_t hidden,
                        int64_t inter) {
    // The choices (topk_ids, topk_weights) come from moe_route, two kernels back: the kernel in
    // between (gate_up_silu_kernel) waited for it before letting this one start, so they are
    // read, and the first round of the chosen experts' weight rows loaded, before this kernel's
    // PDL wait; act, gate_up's output, only after it.
    const int lane = int(threadIdx.x) % 32;
    const int64_t warp = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
    if (warp >= n * hidden) {  // whole warp
        pdl_wait();
        pdl_trigger();
        return;
    }
    const int64_t t = warp / hidden, c = warp % hidden;
    float sum = 0.f;
    for (int j0 = 0; j0 < top_k; j0 += kPass) {
        Bf16Dot<kPass> dot;
        const uint4* ws[kPass];
#pragma unroll
        for (int q = 0; q < kPass; ++q) {
            const int64_t pair = t * top_k + j0 + q;
            dot.x[q] = reinterpret_cast<const uint4*>(act + pair * inter);
            ws[q] = reinterpret_cast<const uint4*>(w + (topk_ids[pair] * hidden + c) * inter);
        }
        float acc[kPass] = {};
        partial_dots<kPass>(dot, ws, int(inter / kVecElems), lane, acc, [j0] {
            if (j0 == 0) {
                pdl_wait();
                pdl_trigger();
            }
        });
        warp_all_reduce(acc);
#pragma unroll
        for (int q = 0; q < kPass; ++q)
            sum = __fmaf_rn(topk_weights[t * top_k + j0 + q],
                            __bfloat162float(__float2bfloat16_rn(acc[q])), sum);
    }
    if (lane == 0) out[t * hidden + c] = __float2bfloat16_rn(sum);
}

// x_s[r][:], scales_s[r][:] = row r of x (num_rows rows of len, row r at x + r * row_stride)
// quantized per 128-group with fp8.cuh's arithmetic (the CPU's bits), each e4m3 value kept as its
// exact bf16 (4 significant bits): a half-warp takes one group, 8 values a lane (a shorter last
// group: lanes past len hold zeros, which leave the amax alone); a warp issues the loads of kBatch
// pairs of groups before using any (a top-8 token's act rows of 768 in one round trip). Called by
// every thread of the block; ends with a barrier.
__device__ __forceinline__ void quantize_rows_to_shared(const __nv_bfloat16* x, int64_t row_stride,
                                                        int num_rows, int len, uint4* x_s,
                                                        float* scales_s) {
    constexpr int kLanesPerGroup = kFp8GroupSize / kVecElems;  // 16
    constexpr int kBatch = 8;
    const int groups = (len + kFp8GroupSize - 1) / kFp8GroupSize, len_vecs = len / kVecElems;
    const int units = num_rows * groups, sub = int(threadIdx.x) % kLanesPerGroup;
    const int warp = int(threadIdx.x) / 32, half = int(threadIdx.x) % 32 / kLanesPerGroup;
    // Whole warps loop alike (their shuffles need every lane): units past the end hold zeros.
    for (int base = 2 * kBatch * warp; base < units; base += kBatch * kThreads / kLanesPerGroup) {
        uint4 t[kBatch];
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
            const int unit = base + 2 * b + half;
            const int r = unit / groups, v = unit % groups * kLanesPerGroup + sub;
            t[b] = unit < units && v < len_vecs
                       ? reinterpret_cast<const uint4*>(x + r * row_stride)[v]
                       : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
            const int unit = base + 2 * b + half;
            const int r = unit / groups, g = unit % groups, v = g * kLanesPerGroup + sub;
            float f[8];
            unpack_bf16x8(t[b], f);
            uint4 q;
            const float scale = fp8_quantize_group8(f, q);  // every lane: a shuffle
            if (unit >= units || v >= len_vecs) continue;
            x_s[r * len_vecs + v] = q;
            if (sub == 0) scales_s[r * groups + g] = scale;
        }
    }
    __syncthreads();
}

// FP8 gate_up: block (column chunk, pair p) quantizes x[token(p)] once, then each warp takes
// columns i of the chunk kWarpsPerBlock apart: 2 weight rows (gate i, up i) per column. Shared:
// [hidden / 8] bf16 vectors, then [ceil(hidden / 128)] scales.
__global__ void __launch_bounds__(kThreads)
    gate_up_silu_fp8_kernel(const __nv_bfloat16* __restrict__ x,
                            const int32_t* __restrict__ topk_ids, const uint8_t* __restrict__ w,
                            const float* __restrict__ w_scale, __nv_bfloat16* __restrict__ act,
                            int top_k, int64_t inter, int64_t hidden) {
    pdl_wait();
    pdl_trigger();
    const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
    const int64_t p = blockIdx.y;
    const int h_groups = int((hidden + kFp8GroupSize - 1) / kFp8GroupSize);
    const int64_t row_groups = (2 * inter + kFp8GroupSize - 1) / kFp8GroupSize;
    extern __shared__ uint4 x_s[];
    auto* scales_s = reinterpret_cast<float*>(x_s + hidden / kVecElems);
    quantize_rows_to_shared(x + (p / top_k) * hidden, hidden, 1, int(hidden), x_s, scales_s);

    const int64_t e = topk_ids[p];
    const uint8_t* w_e = w + e * 2 * inter * hidden;
    const float* s_e = w_scale + e * row_groups * h_groups;
    const int64_t end = std::min<int64_t>(inter, (int64_t(blockIdx.x) + 1) * kFp8ColsPerBlock);
    for (int64_t i = int64_t(blockIdx.x) * kFp8ColsPerBlock + warp; i < end; i += kWarpsPerBlock) {
        const Fp8Dot<2> dot{
            {x_s, x_s},
            {scales_s, scales_s},
            {s_e + (i / kFp8GroupSize) * h_groups, s_e + ((inter + i) / kFp8GroupSize) * h_groups}};
        const uint4* const ws[2] = {reinterpret_cast<const uint4*>(w_e + i * hidden),
                                    reinterpret_cast<const uint4*>(w_e + (inter + i) * hidden)};
        float acc[2] = {};
        partial_dots<2>(dot, ws, int(hidden / Fp8Dot<2>::kVecElems), lane, acc, [] {});
        warp_all_reduce(acc);
        if (lane == 0)
            act[p * inter + i] =
                silu_mul_bf16(__float2bfloat16_rn(acc[0]), __float2bfloat16_rn(acc[1]));
    }
}

// FP8 down + combine: block (column chunk, token t) quantizes the token's top_k act rows once,
// then each warp takes columns c of the chunk kWarpsPerBlock apart, kPass choices at a time
// (kPass divides top_k), summing as down_combine_kernel does. Shared: [top_k][inter / 8] bf16
// vectors, then [top_k][ceil(inter / 128)] scales. The choices come from moe_route, two kernels
// back (see down_combine_kernel): before the PDL wait each lane prefetches into L2 what its first
// round of the first column's weights will load (registers cannot hold it across the
// quantization's barrier); act, gate_up's output, only after it.
template <int kPass>
__global__ void __launch_bounds__(kThreads)
    down_combine_fp8_kernel(const __nv_bfloat16* __restrict__ act,
                            const int32_t* __restrict__ topk_ids,
                            const float* __restrict__ topk_weights, const uint8_t* __restrict__ w,
                            const float* __restrict__ w_scale, __nv_bfloat16* __restrict__ out,
                            int top_k, int64_t hidden, int64_t inter) {
    const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
    const int64_t t = blockIdx.y;
    const int64_t first_col = int64_t(blockIdx.x) * kFp8ColsPerBlock + warp;
    constexpr int kFirstRoundBytes = 32 * 16 * (kPass >= 8 ? 1 : 8 / kPass);  // partial_dots'
    if (first_col < hidden) {
#pragma unroll
        for (int j = 0; j < kPass; ++j) {
            const uint8_t* row = w + (topk_ids[t * top_k + j] * hidden + first_col) * inter;
            for (int64_t at = int64_t(lane) * 16; at < std::min<int64_t>(inter, kFirstRoundBytes);
                 at += 32 * 16)
                asm volatile("prefetch.global.L2 [%0];" ::"l"(row + at));
        }
    }
    pdl_wait();
    pdl_trigger();
    const int i_groups = int((inter + kFp8GroupSize - 1) / kFp8GroupSize);
    const int64_t h_groups = (hidden + kFp8GroupSize - 1) / kFp8GroupSize;
    const int64_t inter_vecs = inter / kVecElems;
    extern __shared__ uint4 x_s[];
    auto* scales_s = reinterpret_cast<float*>(x_s + top_k * inter_vecs);
    quantize_rows_to_shared(act + t * top_k * inter, inter, top_k, int(inter), x_s, scales_s);

    const int64_t end = std::min<int64_t>(hidden, (int64_t(blockIdx.x) + 1) * kFp8ColsPerBlock);
    for (int64_t c = int64_t(blockIdx.x) * kFp8ColsPerBlock + warp; c < end; c += kWarpsPerBlock) {
        float sum = 0.f;
        for (int j0 = 0; j0 < top_k; j0 += kPass) {
            Fp8Dot<kPass> dot;
            const uint4* ws[kPass];
#pragma unroll
            for (int q = 0; q < kPass; ++q) {
                const int j = j0 + q;
                const int64_t e = topk_ids[t * top_k + j];
                dot.x[q] = x_s + j * inter_vecs;
                dot.x_scales[q] = scales_s + j * i_groups;
                dot.w_scales[q] = w_scale + (e * h_groups + c / kFp8GroupSize) * i_groups;
                ws[q] = reinterpret_cast<const uint4*>(w + (e * hidden + c) * inter);
            }
            float acc[kPass] = {};
            partial_dots<kPass>(dot, ws, int(inter / Fp8Dot<kPass>::kVecElems), lane, acc, [] {});
            warp_all_reduce(acc);
#pragma unroll
            for (int q = 0; q < kPass; ++q)
                sum = __fmaf_rn(topk_weights[t * top_k + j0 + q],
                                __bfloat162float(__float2bfloat16_rn(acc[q])), sum);
        }
        if (lane == 0) out[t * hidden + c] = __float2bfloat16_rn(sum);
    }
}

int64_t fp8_groups(int64_t len) {
    return (len + kFp8GroupSize - 1) / kFp8GroupSize;
}

// The FP8 kernels' dynamic shared memory for rows of len: bf16 values, then f32 scales.
int64_t fp8_rows_bytes(int64_t rows, int64_t len) {
    return rows * len * 2 + rows * fp8_groups(len) * 4;
}

template <auto Kernel, typename... Args>
void launch_fp8(unsigned column_blocks, int64_t rows, int64_t shared, cudaStream_t stream,
                Args&&... args) {
    MI_LAUNCH_CHECK(rows <= 65535 && shared <= kFp8GemvMaxSharedBytes,
                    "moe_gemv fp8: too many pairs or tokens, or rows too long for shared memory");
    allow_shared_memory<Kernel>(size_t(kFp8GemvMaxSharedBytes));
    launch_kernel(Kernel, dim3(column_blocks, unsigned(rows)), kThreads, size_t(shared), stream,
                  std::forward<Args>(args)...);
    MI_CUDA_CHECK(cudaGetLastError());
}

unsigned blocks_for(int64_t warps) {
    const int64_t blocks = (warps + kWarpsPerBlock - 1) / kWarpsPerBlock;
    MI_LAUNCH_CHECK(blocks <= INT32_MAX, "moe_gemv: too many outputs for the grid");
    return unsigned(blocks);
}

}  // namespace

bool moe_gemv_supported(const Tensor& experts_gate_up, const Tensor& experts_down) {
    if (!is_cuda_tensor(experts_gate_up, DType::kBF16) ||
        !is_cuda_tensor(experts_down, DType::kBF16) || experts_gate_up.ndim() != 3 ||
        experts_down.ndim() != 3)
        return false;
    const int64_t hidden = experts_down.size(1), inter = experts_down.size(2);
    return experts_gate_up.size(0) == experts_down.size(0) &&
           experts_gate_up.size(1) == 2 * inter && experts_gate_up.size(2) == hidden &&
           hidden % kVecElems == 0 && inter % kVecElems == 0 && aligned16(experts_gate_up.raw()) &&
           aligned16(experts_down.raw());
}

void moe_gemv_gate_up_silu(const Tensor& x, const Tensor& topk_ids, const Tensor& w, Tensor& act,
                           cudaStream_t stream) {
    check_cuda_tensor(w, DType::kBF16, "moe_gemv_gate_up_silu: w", {kAnySize, kAnySize, kAnySize});
    const int64_t hidden = w.size(2), inter = w.size(1) / 2;
    check_cuda_tensor(x, DType::kBF16, "moe_gemv_gate_up_silu: x", {kAnySize, hidden});
    const int64_t n = x.size(0);
    check_cuda_tensor(topk_ids, DType::kI32, "moe_gemv_gate_up_silu: topk_ids", {n, kAnySize});
    const int64_t top_k = topk_ids.size(1), pairs = n * top_k;
    check_cuda_tensor(act, DType::kBF16, "moe_gemv_gate_up_silu: act", {kAnySize, inter});
    MI_LAUNCH_CHECK(w.size(1) == 2 * inter && hidden % kVecElems == 0 && inter > 0 &&
                        aligned16(x.raw()) && aligned16(w.raw()) && act.size(0) >= pairs,
                    "moe_gemv_gate_up_silu: w [E, 2 * inter, hidden] with hidden % 8 == 0, x and "
                    "w 16-byte aligned, act with at least n * k rows");
    if (pairs == 0) return;
    launch_kernel(gate_up_silu_kernel, blocks_for(pairs * inter), kThreads, 0, stream,
                  x.data<__nv_bfloat16>(), topk_ids.data<int32_t>(), w.data<__nv_bfloat16>(),
                  act.data<__nv_bfloat16>(), pairs, int(top_k), inter, hidden);
    MI_CUDA_CHECK(cudaGetLastError());
}

void moe_gemv_down_combine(const Tensor& act, const Tensor& topk_ids, const Tensor& topk_weights,
                           const Tensor& w, Tensor& out, cudaStream_t stream) {
    check_cuda_tensor(w, DType::kBF16, "moe_gemv_down_combine: w", {kAnySize, kAnySize, kAnySize});
    const int64_t hidden = w.size(1), inter = w.size(2);
    check_cuda_tensor(out, DType::kBF16, "moe_gemv_down_combine: out", {kAnySize, hidden});
    const int64_t n = out.size(0);
    check_cuda_tensor(topk_ids, DType::kI32, "moe_gemv_down_combine: topk_ids", {n, kAnySize});
    const int64_t top_k = topk_ids.size(1);
    check_cuda_tensor(topk_weights, DType::kF32, "moe_gemv_down_combine: topk_weights", {n, top_k});
    check_cuda_tensor(act, DType::kBF16, "moe_gemv_down_combine: act", {kAnySize, inter});
    MI_LAUNCH_CHECK(inter % kVecElems == 0 && top_k >= 1 && aligned16(act.raw()) &&
                        aligned16(w.raw()) && act.size(0) >= n * top_k,
                    "moe_gemv_down_combine: w [E, hidden, inter] with inter % 8 == 0, act and w "
                    "16-byte aligned with at least n * k rows, k >= 1");
    if (n == 0) return;
    const auto* a = act.data<__nv_bfloat16>();
    const auto* ids = topk_ids.data<int32_t>();
    const auto* weights = topk_weights.data<float>();
    const auto* wd = w.data<__nv_bfloat16>();
    auto* o = out.data<__nv_bfloat16>();
    const unsigned blocks = blocks_for(n * hidden);
    const int k = int(top_k);
    // The widest pass that divides k: every weight row is read once, all in one round when k <= 8.
    if (top_k % 8 == 0)
        launch_kernel(down_combine_kernel<8>, blocks, kThreads, 0, stream, a, ids, weights, wd, o,
                      n, k, hidden, inter);
    else if (top_k % 4 == 0)
        launch_kernel(down_combine_kernel<4>, blocks, kThreads, 0, stream, a, ids, weights, wd, o,
                      n, k, hidden, inter);
    else if (top_k % 2 == 0)
        launch_kernel(down_combine_kernel<2>, blocks, kThreads, 0, stream, a, ids, weights, wd, o,
                      n, k, hidden, inter);
    else
        launch_kernel(down_combine_kernel<1>, blocks, kThreads, 0, stream, a, ids, weights, wd, o,
                      n, k, hidden, inter);
    MI_CUDA_CHECK(cudaGetLastError());
}

bool moe_gemv_fp8_supported(const Tensor& experts_gate_up, const Tensor& experts_down) {
    if (!is_cuda_tensor(experts_gate_up, DType::kF8E4M3) ||
        !is_cuda_tensor(experts_down, DType::kF8E4M3) || experts_gate_up.ndim() != 3 ||
        experts_down.ndim() != 3)
        return false;
    const int64_t hidden = experts_down.size(1), inter = experts_down.size(2);
    return experts_gate_up.size(0) == experts_down.size(0) &&
           experts_gate_up.size(1) == 2 * inter && experts_gate_up.size(2) == hidden &&
           hidden % 16 == 0 && inter % 16 == 0 && inter > 0 && aligned16(experts_gate_up.raw()) &&
           aligned16(experts_down.raw()) && fp8_rows_bytes(1, hidden) <= kFp8GemvMaxSharedBytes;
}

void moe_gemv_gate_up_silu_fp8(const Tensor& x, const Tensor& topk_ids, const Tensor& w,
                               const Tensor& w_scale, Tensor& act, cudaStream_t stream) {
    check_cuda_tensor(w, DType::kF8E4M3, "moe_gemv_gate_up_silu_fp8: w",
                      {kAnySize, kAnySize, kAnySize});
    const int64_t num_experts = w.size(0), hidden = w.size(2), inter = w.size(1) / 2;
    check_cuda_tensor(w_scale, DType::kF32, "moe_gemv_gate_up_silu_fp8: w_scale",
                      {num_experts, fp8_groups(2 * inter), fp8_groups(hidden)});
    check_cuda_tensor(x, DType::kBF16, "moe_gemv_gate_up_silu_fp8: x", {kAnySize, hidden});
    const int64_t n = x.size(0);
    check_cuda_tensor(topk_ids, DType::kI32, "moe_gemv_gate_up_silu_fp8: topk_ids", {n, kAnySize});
    const int64_t top_k = topk_ids.size(1), pairs = n * top_k;
    check_cuda_tensor(act, DType::kBF16, "moe_gemv_gate_up_silu_fp8: act", {kAnySize, inter});
    MI_LAUNCH_CHECK(w.size(1) == 2 * inter && hidden % 16 == 0 && inter > 0 && aligned16(x.raw()) &&
                        aligned16(w.raw()) && act.size(0) >= pairs,
                    "moe_gemv_gate_up_silu_fp8: w [E, 2 * inter, hidden] with hidden % 16 == 0, "
                    "x and w 16-byte aligned, act with at least n * k rows");
    if (pairs == 0) return;
    launch_fp8<gate_up_silu_fp8_kernel>(unsigned((inter + kFp8ColsPerBlock - 1) / kFp8ColsPerBlock),
                                        pairs, fp8_rows_bytes(1, hidden), stream,
                                        x.data<__nv_bfloat16>(), topk_ids.data<int32_t>(),
                                        w.data<uint8_t>(), w_scale.data<float>(),
                                        act.data<__nv_bfloat16>(), int(top_k), inter, hidden);
}

void moe_gemv_down_combine_fp8(const Tensor& act, const Tensor& topk_ids,
                               const Tensor& topk_weights, const Tensor& w, const Tensor& w_scale,
                               Tensor& out, cudaStream_t stream) {
    check_cuda_tensor(w, DType::kF8E4M3, "moe_gemv_down_combine_fp8: w",
                      {kAnySize, kAnySize, kAnySize});
    const int64_t num_experts = w.size(0), hidden = w.size(1), inter = w.size(2);
    check_cuda_tensor(w_scale, DType::kF32, "moe_gemv_down_combine_fp8: w_scale",
                      {num_experts, fp8_groups(hidden), fp8_groups(inter)});
    check_cuda_tensor(out, DType::kBF16, "moe_gemv_down_combine_fp8: out", {kAnySize, hidden});
    const int64_t n = out.size(0);
    check_cuda_tensor(topk_ids, DType::kI32, "moe_gemv_down_combine_fp8: topk_ids", {n, kAnySize});
    const int64_t top_k = topk_ids.size(1);
    check_cuda_tensor(topk_weights, DType::kF32, "moe_gemv_down_combine_fp8: topk_weights",
                      {n, top_k});
    check_cuda_tensor(act, DType::kBF16, "moe_gemv_down_combine_fp8: act", {kAnySize, inter});
    MI_LAUNCH_CHECK(inter % 16 == 0 && top_k >= 1 && aligned16(act.raw()) && aligned16(w.raw()) &&
                        act.size(0) >= n * top_k,
                    "moe_gemv_down_combine_fp8: w [E, hidden, inter] with inter % 16 == 0, act "
                    "and w 16-byte aligned with at least n * k rows, k >= 1");
    if (n == 0 || hidden == 0) return;
    const unsigned blocks = unsigned((hidden + kFp8ColsPerBlock - 1) / kFp8ColsPerBlock);
    const int64_t shared = fp8_rows_bytes(top_k, inter);
    const auto* a = act.data<__nv_bfloat16>();
    const auto* ids = topk_ids.data<int32_t>();
    const auto* weights = topk_weights.data<float>();
    const auto* wd = w.data<uint8_t>();
    const auto* scales = w_scale.data<float>();
    auto* o = out.data<__nv_bfloat16>();
    const int k = int(top_k);
    // The widest pass that divides k, as moe_gemv_down_combine.
    if (top_k % 8 == 0)
        launch_fp8<down_combine_fp8_kernel<8>>(blocks, n, shared, stream, a, ids, weights, wd,
                                               scales, o, k, hidden, inter);
    else if (top_k % 4 == 0)
        launch_fp8<down_combine_fp8_kernel<4>>(blocks, n, shared, stream, a, ids, weights, wd,
                                               scales, o, k, hidden, inter);
    else if (top_k % 2 == 0)
        launch_fp8<down_combine_fp8_kernel<2>>(blocks, n, shared, stream, a, ids, weights, wd,
                                               scales, o, k, hidden, inter);
    else
        launch_fp8<down_combine_fp8_kernel<1>>(blocks, n, shared, stream, a, ids, weights, wd,
                                               scales, o, k, hidden, inter);
}

}  // namespace miniinfer::cuda
