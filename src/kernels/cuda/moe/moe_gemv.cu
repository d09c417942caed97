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
// The FP8 experts (block-scaled e4m3, moe_gemv.h) run on the tensor cores instead (widening every
// e4m3 weight on the CUDA cores made them slower than bf16): each block quantizes its activation
// rows into shared memory as e4m3 bytes, then its warps stream 16 weight rows of an expert at a
// time through mma m16n8k32 (the activation row as B), a k-block of 128 at a time with a few
// k-blocks of loads in flight a lane, and meet in shared memory in a fixed order (see the FP8
// section below). Not yet measured.
#include "kernels/cuda/moe/moe_gemv.h"

#include <cuda_bf16.h>

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

// acc[i] += this lane's share of x[i] · w[i] for kRows (x row, weight row) pairs of k_vecs 16-byte
// weight vectors each (Dot: Bf16Dot, which holds the x rows): lane L takes vectors L,
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

// ---------------------------------------------------------------------------------------------
// FP8 (block-scaled e4m3, W8A8) on the tensor cores: mma_e4m3_16x8x32 (fp8.cuh) with A = 16 weight
// rows straight from global memory and B = an activation row quantized into shared memory as e4m3
// bytes (one useful column: every lane loads the same row, so all of D's columns hold the same
// dot and a lane of t == 0 reads d0 (A row g) and d2 (A row g + 8)). A k-block of 128 is two
// 64-wide chunks: lane (g, t) loads 16 bytes of rows g and g + 8 at 16 t of each chunk (4 loads,
// 64 bytes), the same bytes of the activation row, and 4 mmas (each from zero, summed in fp32) give
// the block's partial, promoted into the fp32 sum as the CPU's acc += partial · s_x · s_w.

constexpr int kFp8MmaK = 64;       // bytes of a row one lane's 16-byte load serves (two mmas)
constexpr int kFp8InFlight = 4;    // k-blocks of weights (64 bytes each) a lane loads ahead
constexpr int kGateUpWarps = 4;    // gate_up: a block = 8 columns (16 rows) of a few pairs
constexpr int kGateUpChoices = 2;  // gate_up: pairs of one token a block takes (one quantization)
constexpr int kDownWarps = 8;      // down: a block = 16 columns of one token, every choice
constexpr int kFp8QuantBatch = 4;  // groups a half-warp loads before quantizing any

__host__ __device__ constexpr int64_t fp8_groups(int64_t len) {
    return (len + kFp8GroupSize - 1) / kFp8GroupSize;
}

// x_s[r][:], scales_s[r][:] = row r of x (num_rows rows of len, row r at x + r * row_stride)
// quantized per 128-group with fp8.cuh's arithmetic (the CPU's bits) as e4m3 bytes, each row
// padded with zeros to groups · 128 bytes: a half-warp takes one group, 8 values a lane (lanes past
// len hold zeros, which leave the amax alone and quantize to 0x00, the padding). Units (row, group)
// are dealt to the warps in turn, in rounds of kFp8QuantBatch units a half-warp whose loads are
// issued before any is quantized. The kernels issue the first round's loads (load(0, v)) before
// their weight loads, so that these small L2 reads do not queue behind them, then run(v, ...).
// Every thread of the block (kWarps warps) calls both; no barrier.
template <int kWarps>
struct RowQuantizer {
    static constexpr int kLanesPerGroup = kFp8GroupSize / kVecElems;  // 16
    static constexpr int kRound = 2 * kWarps * kFp8QuantBatch;        // units a round
    const __nv_bfloat16* x;
    int64_t row_stride;
    int groups, len_vecs, units;

    __device__ RowQuantizer(const __nv_bfloat16* x_, int64_t row_stride_, int num_rows, int len)
        : x(x_),
          row_stride(row_stride_),
          groups(int(fp8_groups(len))),
          len_vecs(len / kVecElems),
          units(num_rows * groups) {}
    __device__ static int unit(int base, int b) {
        return base + 2 * (b * kWarps + int(threadIdx.x) / 32) + int(threadIdx.x) % 32 / 16;
    }
    __device__ void load(int base, uint4 (&v)[kFp8QuantBatch]) const {
        const int sub = int(threadIdx.x) % kLanesPerGroup;
#pragma unroll
        for (int b = 0; b < kFp8QuantBatch; ++b) {
            const int u = unit(base, b), r = u / groups, vec = u % groups * kLanesPerGroup + sub;
            v[b] = u < units && vec < len_vecs
                       ? reinterpret_cast<const uint4*>(x + r * row_stride)[vec]
                       : make_uint4(0, 0, 0, 0);
        }
    }
    // Whole warps loop alike (their shuffles need every lane): units past the end hold zeros.
    __device__ void run(uint4 (&v)[kFp8QuantBatch], uint8_t* x_s, float* scales_s) const {
        const int sub = int(threadIdx.x) % kLanesPerGroup;
        for (int base = 0; base < units; base += kRound) {
            if (base > 0) load(base, v);
#pragma unroll
            for (int b = 0; b < kFp8QuantBatch; ++b) {
                if (unit(base, b) - int(threadIdx.x) % 32 / 16 >= units) break;  // whole warp
                const int u = unit(base, b), r = u / groups, grp = u % groups;
                float f[8];
                unpack_bf16x8(v[b], f);
                uint2 q;
                const float scale = fp8_quantize_group8_bytes(f, q);  // every lane: a shuffle
                if (u >= units) continue;
                reinterpret_cast<uint2*>(x_s + (int64_t(r) * groups + grp) * kFp8GroupSize)[sub] =
                    q;
                if (sub == 0) scales_s[r * groups + grp] = scale;
            }
        }
    }
};

// a = this lane's 64 bytes of one k-block of two weight rows: row (its row g) and row + row8 (its
// row g + 8), at k = k0 (the block's start + 16 t) and k0 + 64, 16-byte streaming loads; chunks at
// or past k_end (k_end % 16 == 0) are zeros, never loaded.
__device__ __forceinline__ void load_weight_kblock(const uint8_t* row, int64_t row8, int k0,
                                                   int k_end, uint4 (&a)[4]) {
    const uint4 zero = make_uint4(0, 0, 0, 0);
    const bool lo = k0 < k_end, hi = k0 + kFp8MmaK < k_end;
    a[0] = lo ? load_streaming(reinterpret_cast<const uint4*>(row + k0)) : zero;
    a[1] = lo ? load_streaming(reinterpret_cast<const uint4*>(row + row8 + k0)) : zero;
    a[2] = hi ? load_streaming(reinterpret_cast<const uint4*>(row + k0 + kFp8MmaK)) : zero;
    a[3] = hi ? load_streaming(reinterpret_cast<const uint4*>(row + row8 + k0 + kFp8MmaK)) : zero;
}

// part = one k-block's products of the lane's weight bytes a (load_weight_kblock's) with the
// activation row x_row_s (shared, padded to whole blocks) at the same k0: fp8.cuh's permutation,
// bytes 0-7 of each 16-byte load then 8-15. Each mma starts from zero and the four are summed in
// fp32 (the FP8 mma may keep fewer than fp32's bits of an accumulator it is given: SageAttention2,
// DeepSeek-V3 on Hopper); only part[0] and part[2] (column 0, rows g and g + 8) are summed.
__device__ __forceinline__ void mma_kblock(const uint4 (&a)[4], const uint8_t* x_row_s, int k0,
                                           float (&part)[4]) {
    const uint4 x0 = *reinterpret_cast<const uint4*>(x_row_s + k0);
    const uint4 x1 = *reinterpret_cast<const uint4*>(x_row_s + k0 + kFp8MmaK);
    float d[4][4] = {};
    mma_e4m3_16x8x32(d[0], {a[0].x, a[1].x, a[0].y, a[1].y}, {x0.x, x0.y});
    mma_e4m3_16x8x32(d[1], {a[0].z, a[1].z, a[0].w, a[1].w}, {x0.z, x0.w});
    mma_e4m3_16x8x32(d[2], {a[2].x, a[3].x, a[2].y, a[3].y}, {x1.x, x1.y});
    mma_e4m3_16x8x32(d[3], {a[2].z, a[3].z, a[2].w, a[3].w}, {x1.z, x1.w});
    part[1] = part[3] = 0.f;
#pragma unroll
    for (int q = 0; q < 4; q += 2)
        part[q] = __fadd_rn(__fadd_rn(d[0][q], d[1][q]), __fadd_rn(d[2][q], d[3][q]));
}

// acc + partial · s_x · s_w, rounded as the CPU's, never contracted into an FMA.
__device__ __forceinline__ float promote(float acc, float partial, float x_scale, float w_scale) {
    return __fadd_rn(acc, __fmul_rn(__fmul_rn(partial, x_scale), w_scale));
}

// The warp's k-blocks 0 .. count - 1 through a ring of kFp8InFlight register slots:
// prefetch_kblocks loads the first ones (load(i, a, s): block i's weights and weight scales into a
// slot), then stream_kblocks runs compute(i, a, s) on each in order and reloads its slot with block
// i + kFp8InFlight, so that kFp8InFlight - 1 to kFp8InFlight blocks are in flight while one is
// computed. count is warp-uniform (the mmas need the whole warp).
template <class Load>
__device__ __forceinline__ void prefetch_kblocks(int count, uint4 (&a)[kFp8InFlight][4],
                                                 float (&s)[kFp8InFlight][2], Load&& load) {
#pragma unroll
    for (int q = 0; q < kFp8InFlight; ++q)
        if (q < count) load(q, a[q], s[q]);
}
template <class Load, class Compute>
__device__ __forceinline__ void stream_kblocks(int count, uint4 (&a)[kFp8InFlight][4],
                                               float (&s)[kFp8InFlight][2], Load&& load,
                                               Compute&& compute) {
    for (int i0 = 0; i0 < count; i0 += kFp8InFlight) {
#pragma unroll
        for (int q = 0; q < kFp8InFlight; ++q) {
            const int i = i0 + q;
            if (i < count) {
                compute(i, a[q], s[q]);
                if (i + kFp8InFlight < count) load(i + kFp8InFlight, a[q], s[q]);
            }
        }
    }
}

// FP8 gate_up: block (column tile, token tok, choice group) computes act[p, i0 .. i0 + 7]
// (i0 = 8 · tile) for the kGateUpChoices pairs p = tok · top_k + j of its group (fewer in the last
// group), which share x[tok]: quantized once for them all. For a pair, A rows 0-7 are gate rows
// i0 .. i0 + 7 of its expert, rows 8-15 the up rows inter + i0 .., so a lane's d0 and d2 are g and
// u of column i0 + g. The (pair, k-block) units, pair-major, are dealt to the warps in turn (warp
// w: units w, w + kGateUpWarps, ...), each warp keeping one running sum of g and u and storing it
// into sums[pair][w] when its pair changes; the first kFp8InFlight units' loads are issued before
// the quantization (in flight across it). Then per column the sums over warps in warp order, and
// silu_mul. Dynamic shared: [ceil(hidden / 128) · 128] e4m3 bytes, then [ceil(hidden / 128)]
// scales.
__global__ void __launch_bounds__(32 * kGateUpWarps, 4)
    gate_up_silu_fp8_kernel(const __nv_bfloat16* __restrict__ x,
                            const int32_t* __restrict__ topk_ids, const uint8_t* __restrict__ w,
                            const float* __restrict__ w_scale, __nv_bfloat16* __restrict__ act,
                            int top_k, int64_t inter, int64_t hidden) {
    pdl_wait();  // topk_ids come from moe_route, the kernel just before
    pdl_trigger();
    const int groups_per_token = (top_k + kGateUpChoices - 1) / kGateUpChoices;
    const int64_t tok = blockIdx.y / groups_per_token;
    const RowQuantizer<kGateUpWarps> quant(x + tok * hidden, hidden, 1, int(hidden));
    uint4 x_vecs[kFp8QuantBatch];
    quant.load(0, x_vecs);
    const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
    const int g = lane / 4, t = lane % 4;
    const int j0 = int(blockIdx.y % groups_per_token) * kGateUpChoices;
    const int choices = min(kGateUpChoices, top_k - j0);
    const int64_t p0 = tok * top_k + j0, i0 = int64_t(blockIdx.x) * 8;
    const int h_groups = int(fp8_groups(hidden));
    const int64_t row_groups = fp8_groups(2 * inter);
    const int units = choices * h_groups;
    const int count = (units - warp + kGateUpWarps - 1) / kGateUpWarps;  // ≤ 0: none
    auto load = [&](int i, uint4(&a)[4], float(&s)[2]) {
        const int u = warp + kGateUpWarps * i, jl = u / h_groups, kb = u % h_groups;
        const int64_t e = topk_ids[p0 + jl];
        // 8 rows from a multiple of 8 lie in one 128-row block.
        load_weight_kblock(w + (e * 2 * inter + i0 + g) * hidden, inter * hidden,
                           kb * kFp8GroupSize + 16 * t, int(hidden), a);
        s[0] = __ldg(w_scale + (e * row_groups + i0 / kFp8GroupSize) * h_groups + kb);
        s[1] = __ldg(w_scale + (e * row_groups + (inter + i0) / kFp8GroupSize) * h_groups + kb);
    };
    uint4 a[kFp8InFlight][4];
    float s[kFp8InFlight][2];
    prefetch_kblocks(count, a, s, load);

    extern __shared__ uint4 fp8_shared[];
    auto* x_s = reinterpret_cast<uint8_t*>(fp8_shared);
    auto* scales_s = reinterpret_cast<float*>(x_s + int64_t(h_groups) * kFp8GroupSize);
    __shared__ float sums[kGateUpChoices][kGateUpWarps][16];
    for (int v = int(threadIdx.x); v < kGateUpChoices * kGateUpWarps * 16; v += 32 * kGateUpWarps)
        (&sums[0][0][0])[v] = 0.f;  // (pair, warp) without units
    quant.run(x_vecs, x_s, scales_s);
    __syncthreads();

    float acc_g = 0.f, acc_u = 0.f;
    int cur = warp / h_groups;  // the pair of the warp's first unit
    auto store = [&] {
        if (t == 0) {
            sums[cur][warp][g] = acc_g;
            sums[cur][warp][8 + g] = acc_u;
        }
    };
    stream_kblocks(count, a, s, load, [&](int i, const uint4(&av)[4], const float(&sv)[2]) {
        const int u = warp + kGateUpWarps * i, jl = u / h_groups, kb = u % h_groups;
        if (jl != cur) {  // warp-uniform
            store();
            acc_g = acc_u = 0.f;
            cur = jl;
        }
        float part[4];
        mma_kblock(av, x_s, kb * kFp8GroupSize + 16 * t, part);
        const float xs = scales_s[kb];
        acc_g = promote(acc_g, part[0], xs, sv[0]);
        acc_u = promote(acc_u, part[2], xs, sv[1]);
    });
    if (count > 0) store();
    __syncthreads();
    if (int(threadIdx.x) < 8 * choices) {
        const int jl = int(threadIdx.x) / 8, r = int(threadIdx.x) % 8;
        float gate = 0.f, up = 0.f;
#pragma unroll
        for (int q = 0; q < kGateUpWarps; ++q) {
            gate += sums[jl][q][r];
            up += sums[jl][q][8 + r];
        }
        act[(p0 + jl) * inter + i0 + r] =
            silu_mul_bf16(__float2bfloat16_rn(gate), __float2bfloat16_rn(up));
    }
}

// FP8 down + combine: block (column tile, token tok) computes out[tok, c0 .. c0 + 15] (c0 = 16 ·
// tile): A = rows c0 .. c0 + 15 of choice j's expert, B = the token's act row j quantized. The
// (choice, k-block) units, choice-major, are dealt to the warps in turn (warp w: units w,
// w + kDownWarps, ...: its choices in order), each warp keeping one running sum and storing it
// into sums[j][w] when its choice changes; then, per column, the choice's sum over warps in warp
// order, rounded to bf16, weighted into the total in choice order as down_combine_kernel does.
// The choices come from moe_route, two kernels back (see down_combine_kernel): the first
// kFp8InFlight units of weights are loaded before the PDL wait; act only after it. Dynamic
// shared: [top_k][ceil(inter / 128) · 128] e4m3 bytes, [top_k][ceil(inter / 128)] scales, then
// sums [top_k][kDownWarps][16].
__global__ void __launch_bounds__(32 * kDownWarps)
    down_combine_fp8_kernel(const __nv_bfloat16* __restrict__ act,
                            const int32_t* __restrict__ topk_ids,
                            const float* __restrict__ topk_weights, const uint8_t* __restrict__ w,
                            const float* __restrict__ w_scale, __nv_bfloat16* __restrict__ out,
                            int top_k, int64_t hidden, int64_t inter) {
    const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
    const int g = lane / 4, t = lane % 4;
    const int64_t tok = blockIdx.y, c0 = int64_t(blockIdx.x) * 16;
    const int i_groups = int(fp8_groups(inter));
    const int64_t h_groups = fp8_groups(hidden);
    const int units = top_k * i_groups;
    const int count = (units - warp + kDownWarps - 1) / kDownWarps;  // ≤ 0: none
    const int32_t* ids = topk_ids + tok * top_k;
    auto load = [&](int i, uint4(&a)[4], float(&s)[2]) {
        const int u = warp + kDownWarps * i, j = u / i_groups, kb = u % i_groups;
        const int64_t e = ids[j];
        load_weight_kblock(w + (e * hidden + c0 + g) * inter, 8 * inter,
                           kb * kFp8GroupSize + 16 * t, int(inter), a);
        s[0] = __ldg(w_scale + (e * h_groups + c0 / kFp8GroupSize) * i_groups + kb);
        s[1] = 0.f;
    };
    uint4 a[kFp8InFlight][4];
    float s[kFp8InFlight][2];
    prefetch_kblocks(count, a, s, load);
    pdl_wait();
    pdl_trigger();
    const RowQuantizer<kDownWarps> quant(act + tok * top_k * inter, inter, top_k, int(inter));
    uint4 x_vecs[kFp8QuantBatch];
    quant.load(0, x_vecs);

    const int64_t row_bytes = int64_t(i_groups) * kFp8GroupSize;
    extern __shared__ uint4 fp8_shared[];
    auto* x_s = reinterpret_cast<uint8_t*>(fp8_shared);
    auto* scales_s = reinterpret_cast<float*>(x_s + top_k * row_bytes);
    float* sums = scales_s + top_k * i_groups;  // [top_k][kDownWarps][16]
    for (int v = int(threadIdx.x); v < top_k * kDownWarps * 16; v += 32 * kDownWarps)
        sums[v] = 0.f;  // (choice, warp) pairs without units
    quant.run(x_vecs, x_s, scales_s);
    __syncthreads();

    float acc_lo = 0.f, acc_hi = 0.f;
    int cur = warp / i_groups;  // the choice of the warp's first unit
    auto store = [&] {
        if (t == 0) {
            sums[(cur * kDownWarps + warp) * 16 + g] = acc_lo;
            sums[(cur * kDownWarps + warp) * 16 + 8 + g] = acc_hi;
        }
    };
    stream_kblocks(count, a, s, load, [&](int i, const uint4(&av)[4], const float(&sv)[2]) {
        const int u = warp + kDownWarps * i, j = u / i_groups, kb = u % i_groups;
        if (j != cur) {  // warp-uniform
            store();
            acc_lo = acc_hi = 0.f;
            cur = j;
        }
        float part[4];
        mma_kblock(av, x_s + j * row_bytes, kb * kFp8GroupSize + 16 * t, part);
        const float xs = scales_s[j * i_groups + kb];
        acc_lo = promote(acc_lo, part[0], xs, sv[0]);
        acc_hi = promote(acc_hi, part[2], xs, sv[0]);
    });
    if (count > 0) store();
    __syncthreads();
    if (threadIdx.x < 16) {
        float sum = 0.f;
        for (int j = 0; j < top_k; ++j) {
            float d = 0.f;
#pragma unroll
            for (int q = 0; q < kDownWarps; ++q) d += sums[(j * kDownWarps + q) * 16 + threadIdx.x];
            sum = __fmaf_rn(topk_weights[tok * top_k + j], __bfloat162float(__float2bfloat16_rn(d)),
                            sum);
        }
        out[tok * hidden + c0 + threadIdx.x] = __float2bfloat16_rn(sum);
    }
}

// The FP8 kernels' dynamic shared memory for rows of len: e4m3 bytes padded to whole groups, then
// f32 scales.
int64_t fp8_rows_bytes(int64_t rows, int64_t len) {
    return rows * fp8_groups(len) * (kFp8GroupSize + 4);
}

template <auto Kernel, int kBlockThreads, typename... Args>
void launch_fp8(unsigned column_blocks, int64_t rows, int64_t shared, cudaStream_t stream,
                Args&&... args) {
    MI_LAUNCH_CHECK(rows <= 65535 && shared <= kFp8GemvMaxSharedBytes,
                    "moe_gemv fp8: too many pairs or tokens, or rows too long for shared memory");
    allow_shared_memory<Kernel>(size_t(kFp8GemvMaxSharedBytes));
    launch_kernel(Kernel, dim3(column_blocks, unsigned(rows)), kBlockThreads, size_t(shared),
                  stream, std::forward<Args>(args)...);
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
    MI_LAUNCH_CHECK(w.size(1) == 2 * inter && hidden % 16 == 0 && inter % 8 == 0 && inter > 0 &&
                        aligned16(x.raw()) && aligned16(w.raw()) && act.size(0) >= pairs,
                    "moe_gemv_gate_up_silu_fp8: w [E, 2 * inter, hidden] with hidden % 16 == 0 "
                    "and inter % 8 == 0, x and w 16-byte aligned, act with at least n * k rows");
    if (pairs == 0) return;
    launch_fp8<gate_up_silu_fp8_kernel, 32 * kGateUpWarps>(
        unsigned(inter / 8), n * ((top_k + kGateUpChoices - 1) / kGateUpChoices),
        fp8_rows_bytes(1, hidden), stream, x.data<__nv_bfloat16>(), topk_ids.data<int32_t>(),
        w.data<uint8_t>(), w_scale.data<float>(), act.data<__nv_bfloat16>(), int(top_k), inter,
        hidden);
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
    MI_LAUNCH_CHECK(inter % 16 == 0 && hidden % 16 == 0 && top_k >= 1 && aligned16(act.raw()) &&
                        aligned16(w.raw()) && act.size(0) >= n * top_k,
                    "moe_gemv_down_combine_fp8: w [E, hidden, inter] with hidden and inter "
                    "multiples of 16, act and w 16-byte aligned with at least n * k rows, k >= 1");
    if (n == 0 || hidden == 0) return;
    // The quantized act rows and scales, then the per-(choice, warp) sums.
    const int64_t shared = fp8_rows_bytes(top_k, inter) + top_k * kDownWarps * 16 * 4;
    launch_fp8<down_combine_fp8_kernel, 32 * kDownWarps>(
        unsigned(hidden / 16), n, shared, stream, act.data<__nv_bfloat16>(),
        topk_ids.data<int32_t>(), topk_weights.data<float>(), w.data<uint8_t>(),
        w_scale.data<float>(), out.data<__nv_bfloat16>(), int(top_k), hidden, inter);
}

}  // namespace miniinfer::cuda
