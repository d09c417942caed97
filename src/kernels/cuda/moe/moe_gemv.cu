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
#include "kernels/cuda/moe/moe_gemv.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "kernels/cuda/elementwise/silu_mul.cuh"
#include "kernels/cuda/gemm/gemv.cuh"
#include "kernels/cuda/primitives/check_tensor.h"
#include "kernels/cuda/primitives/launch.cuh"

namespace miniinfer::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kThreads = 32 * kWarpsPerBlock;
constexpr int kVecElems = 8;  // bf16 per 16-byte load

// acc[i] += this lane's share of x[i] · w[i] for kRows (x row, weight row) pairs of k_vecs 16-byte
// vectors each: lane L takes vectors L, L + 32, ...; all loads of one round, of w and of x, are
// issued before any is used (x loaded inside the multiply loop costs a round trip a vector).
// before_x() runs once, after the first round's loads of w and before any load of x: the PDL
// wait of a kernel whose weight rows are known before the kernel it waits for has finished.
template <int kRows, class BeforeX>
__device__ __forceinline__ void partial_dots(const uint4* const (&x)[kRows],
                                             const uint4* const (&w)[kRows], int k_vecs, int lane,
                                             float (&acc)[kRows], BeforeX&& before_x) {
    constexpr int kUnroll = kRows >= 8 ? 1 : 8 / kRows;
    for (int base = lane; base < k_vecs; base += 32 * kUnroll) {
        uint4 w_vec[kUnroll][kRows], x_vec[kUnroll][kRows];
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
                for (int i = 0; i < kRows; ++i) x_vec[u][i] = __ldg(x[i] + base + 32 * u);
            }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int vec = base + 32 * u;
            if (vec >= k_vecs) break;
#pragma unroll
            for (int i = 0; i < kRows; ++i) {
                float w_f[8], x_f[8];
                unpack_bf16x8(w_vec[u][i], w_f);
                unpack_bf16x8(x_vec[u][i], x_f);
#pragma unroll
                for (int q = 0; q < 8; ++q) acc[i] = fmaf(x_f[q], w_f[q], acc[i]);
            }
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
    const uint4* const xs[2] = {x_row, x_row};
    const uint4* const ws[2] = {reinterpret_cast<const uint4*>(w_e + i * hidden),
                                reinterpret_cast<const uint4*>(w_e + (inter + i) * hidden)};
    float acc[2] = {};
    partial_dots<2>(xs, ws, int(hidden / kVecElems), lane, acc, [] {});
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
        const uint4* xs[kPass];
        const uint4* ws[kPass];
#pragma unroll
        for (int q = 0; q < kPass; ++q) {
            const int64_t pair = t * top_k + j0 + q;
            xs[q] = reinterpret_cast<const uint4*>(act + pair * inter);
            ws[q] = reinterpret_cast<const uint4*>(w + (topk_ids[pair] * hidden + c) * inter);
        }
        float acc[kPass] = {};
        partial_dots<kPass>(xs, ws, int(inter / kVecElems), lane, acc, [j0] {
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

}  // namespace miniinfer::cuda
