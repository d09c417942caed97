// MoE routing on the GPU: route (softmax + top-k), permute (slots grouped by expert), gather (x
// into the permuted rows) and combine (the weighted sum back into token order).
//   moe_route    a warp per token: E logits spread over the lanes, k rounds of a warp max of
//                (logit, expert) keys
//   moe_permute  per-chunk counts, one block's padded prefix sum, then each slot's rank within
//                its expert from per-chunk and per-warp counts, so placement follows (token,
//                choice) order whatever order the threads run in
//   moe_gather   a block per permuted row (grid-stride), 16-byte vectors where aligned
//   moe_combine  a block per token, the k terms added in order in fp32
#include "kernels/cuda/moe/moe_routing.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/cuda/cuda_check.h"
#include "kernels/cuda/primitives/check_tensor.h"
#include "kernels/cuda/primitives/launch.cuh"
#include "kernels/cuda/primitives/reduce.cuh"

namespace miniinfer::cuda {
namespace {

template <int kVec>
struct alignas(2 * kVec) BF16Vec {
    __nv_bfloat16 v[kVec];
};

// ---------------------------------------------------------------------------------------------
// moe_route

constexpr int kRouteWarps = 4;  // tokens per block

// An expert's logit and id as one key whose unsigned order is the ranking: higher logit first,
// equal logits to the lower id. High 23 bits: the f32 bits made order-preserving (-0 taken as
// +0, as a float compare does), the mantissa's lowest 9 dropped (logits within 2^-14 of each
// other rank as equal; a bf16 logit loses nothing); low 9 bits: kKeyIds - e. Every key is above
// 0, the key of none.
constexpr unsigned kKeyIds = 0x1FFu;
__device__ __forceinline__ unsigned route_key(float logit, int e) {
    unsigned b = __float_as_uint(logit);
    if (b == 0x80000000u) b = 0;
    const unsigned ordered = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    return (ordered & ~kKeyIds) | (kKeyIds - unsigned(e));
}
__device__ __forceinline__ int route_key_expert(unsigned key) {
    return int(kKeyIds - (key & kKeyIds));
}
static_assert(kMoeMaxExperts <= kKeyIds + 1);

__device__ __forceinline__ float to_float(__nv_bfloat16 v) {
    return __bfloat162float(v);
}
__device__ __forceinline__ float to_float(float v) {
    return v;
}

// topk_ids[0..k), topk_weights[0..k) = the top_k experts of softmax(row) and their weights (see
// moe_routing.h's moe_route), computed by the calling warp; every lane calls it. Expert e lives
// in lane e % 32, register e / 32 (kPerLane >= E / 32), so a warp's loads of one register are
// 32 consecutive logits. Each of the k rounds is one warp max of the lanes' best keys
// (redux.sync, a single instruction, where a max of (logit, id) pairs took 10 shuffles): the
// routing's exposed time at batch 1 nearly halves. It stays a kernel of its own: routing in the
// router GEMV's last block instead grew the router's exposed time by more than this kernel's
// (bench/RESULTS.md#moe-route-redux).
template <int kPerLane, typename Logit>
__device__ __forceinline__ void route_token(const Logit* row, int num_experts, int top_k,
                                            bool renormalize, int32_t* topk_ids,
                                            float* topk_weights, int lane) {
    unsigned key[kPerLane];  // 0: past E, or already chosen
    float v[kPerLane];       // the logits, for the softmax's sum
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
        const int e = lane + 32 * i;
        v[i] = e < num_experts ? to_float(row[e]) : 0.f;
        key[i] = e < num_experts ? route_key(v[i], e) : 0u;
    }
    // Choice j goes to lane j, with its logit. Ranking by logit equals ranking by probability
    // (exp and the division by one sum are monotonic).
    unsigned my_key = 0;
    float my_logit = 0.f;
    for (int j = 0; j < top_k; ++j) {
        unsigned mine = 0;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) mine = max(mine, key[i]);
        const unsigned best = __reduce_max_sync(kFullWarpMask, mine);
        const int e = route_key_expert(best);
        float logit = 0.f;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i)
            if (i == e / 32) logit = v[i];
        logit = __shfl_sync(kFullWarpMask, logit, e % 32);
        if (e % 32 == lane) {
#pragma unroll
            for (int i = 0; i < kPerLane; ++i)
                if (i == e / 32) key[i] = 0;
        }
        if (lane == j) my_key = best, my_logit = logit;
    }
    // The first choice holds the row's largest logit: the softmax's shift.
    const float row_max = __shfl_sync(kFullWarpMask, my_logit, 0);
    const float my_exp = expf(my_logit - row_max);
    float denom;
    if (renormalize) {
        // The chosen exps' sum: the softmax denominator cancels, and so does its rounding.
        denom = warp_sum(lane < top_k ? my_exp : 0.f);
    } else {
        float sum = 0.f;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
            if (lane + 32 * i < num_experts) sum += expf(v[i] - row_max);
        }
        denom = warp_sum(sum);
    }
    if (lane < top_k) {
        topk_ids[lane] = route_key_expert(my_key);
        topk_weights[lane] = my_exp / denom;
    }
}

// logits: [n, E]; topk_ids, topk_weights: [n, k]. A warp per token (route_token).
template <int kPerLane, typename Logit>
__global__ void moe_route_kernel(const Logit* __restrict__ logits, int64_t n, int num_experts,
                                 int top_k, bool renormalize, int32_t* __restrict__ topk_ids,
                                 float* __restrict__ topk_weights) {
    pdl_wait();
    pdl_trigger();
    const int lane = threadIdx.x % 32;
    const int64_t t = int64_t(blockIdx.x) * kRouteWarps + threadIdx.x / 32;
    if (t >= n) return;  // the whole warp leaves together
    route_token<kPerLane>(logits + t * num_experts, num_experts, top_k, renormalize,
                          topk_ids + t * top_k, topk_weights + t * top_k, lane);
}

// The one dispatch place for moe_route: registers per lane from E.
void launch_route(const Tensor& logits, int64_t n, int num_experts, int top_k, bool renormalize,
                  Tensor& topk_ids, Tensor& topk_weights, cudaStream_t stream) {
    const unsigned blocks = unsigned((n + kRouteWarps - 1) / kRouteWarps);
    const auto launch = [&](auto* row) {
        using Logit = std::remove_const_t<std::remove_pointer_t<decltype(row)>>;
        const auto kernel = num_experts <= 32    ? moe_route_kernel<1, Logit>
                            : num_experts <= 64  ? moe_route_kernel<2, Logit>
                            : num_experts <= 128 ? moe_route_kernel<4, Logit>
                            : num_experts <= 256 ? moe_route_kernel<8, Logit>
                                                 : moe_route_kernel<16, Logit>;
        launch_kernel(kernel, blocks, kRouteWarps * 32, 0, stream, row, n, num_experts, top_k,
                      renormalize, topk_ids.data<int32_t>(), topk_weights.data<float>());
    };
    if (logits.dtype() == DType::kF32)
        launch(logits.data<float>());
    else
        launch(logits.data<__nv_bfloat16>());
}

// ---------------------------------------------------------------------------------------------
// moe_permute

constexpr int kPermuteThreads = 1024;
constexpr int kPermuteWarps = kPermuteThreads / 32;
constexpr int kMaxExperts = int(kMoeMaxExperts);

__device__ __forceinline__ unsigned lanes_below() {
    return (1u << (threadIdx.x % 32)) - 1u;
}

// Three kernels, so that a prefill's 65,536 slots spread over the GPU (one block took 240 µs):
//   count    a block per chunk of kPermuteThreads slots: its slots per expert -> chunk[b][e]
//   offsets  one block: each expert's total and its chunks' running sums (chunk[b][e] becomes
//            the rank of chunk b's first slot on e), the padded prefix sum -> expert_offsets, and
//            row_token = -1 on every padding row and every row past offsets[E]
//   scatter  a block per chunk again: each slot's rank within its chunk and expert, in slot order
//            (lanes of a warp that share an expert find each other with __match_any_sync; a scan
//            over the warps' counts gives each warp's first rank), plus the chunk's base
// Shared atomics only count, so no output depends on the order threads run in.

// topk_ids: [num_slots]; chunk: [blocks, E].
__global__ void __launch_bounds__(kPermuteThreads)
    moe_count_kernel(const int32_t* __restrict__ topk_ids, int num_slots, int num_experts,
                     int32_t* __restrict__ chunk) {
    pdl_wait();
    pdl_trigger();
    __shared__ int count[kMaxExperts];
    const int tid = threadIdx.x;
    for (int e = tid; e < num_experts; e += kPermuteThreads) count[e] = 0;
    __syncthreads();
    const int i = int(blockIdx.x) * kPermuteThreads + tid;
    const int e = i < num_slots ? topk_ids[i] : -1;
    // One atomic per expert per warp: all slots on one expert would otherwise serialise.
    const unsigned peers = __match_any_sync(kFullWarpMask, e);
    if (e >= 0 && (peers & lanes_below()) == 0) atomicAdd(&count[e], __popc(peers));
    __syncthreads();
    for (int x = tid; x < num_experts; x += kPermuteThreads)
        chunk[int64_t(blockIdx.x) * num_experts + x] = count[x];
}

// chunk: [blocks, E], counts in, each chunk's first rank within its expert out.
__global__ void __launch_bounds__(kPermuteThreads)
    moe_offsets_kernel(int32_t* __restrict__ chunk, int blocks, int num_experts, int tile_rows,
                       int max_rows, int32_t* __restrict__ expert_offsets,
                       int32_t* __restrict__ row_token) {
    pdl_wait();
    pdl_trigger();
    __shared__ int count[kMaxExperts];       // slots per expert
    __shared__ int offset[kMaxExperts + 1];  // first row of each expert; [E] = rows used
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int E = num_experts;
    for (int e = tid; e < E; e += kPermuteThreads) {
        int running = 0;
#pragma unroll 8
        for (int b = 0; b < blocks; ++b) {
            const int c = chunk[int64_t(b) * E + e];
            chunk[int64_t(b) * E + e] = running;
            running += c;
        }
        count[e] = running;
    }
    __syncthreads();

    // Exclusive prefix sum of the padded counts by warp 0: lane l holds kPerLane experts from
    // kPerLane l on.
    if (warp == 0) {
        constexpr int kPerLane = kMaxExperts / 32;
        int padded[kPerLane];
        int local = 0;
#pragma unroll
        for (int q = 0; q < kPerLane; ++q) {
            const int e = lane * kPerLane + q;
            padded[q] = e < E ? (count[e] + tile_rows - 1) / tile_rows * tile_rows : 0;
            local += padded[q];
        }
        int inclusive = local;
#pragma unroll
        for (int d = 1; d < 32; d *= 2) {
            const int below = __shfl_up_sync(kFullWarpMask, inclusive, d);
            if (lane >= d) inclusive += below;
        }
        int running = inclusive - local;
#pragma unroll
        for (int q = 0; q < kPerLane; ++q) {
            const int e = lane * kPerLane + q;
            if (e < E) offset[e] = running;
            running += padded[q];
        }
        if (lane == 31) offset[E] = inclusive;
    }
    __syncthreads();

    for (int e = tid; e <= E; e += kPermuteThreads) expert_offsets[e] = offset[e];
    for (int idx = tid; idx < E * tile_rows; idx += kPermuteThreads) {
        const int e = idx / tile_rows, r = offset[e] + count[e] + idx % tile_rows;
        if (r < offset[e + 1]) row_token[r] = -1;  // padding at the end of e's segment
    }
    for (int r = offset[E] + tid; r < max_rows; r += kPermuteThreads) row_token[r] = -1;
}

// topk_ids, slot_row: [num_slots] (= [n, k]); chunk: [blocks, E] from moe_offsets_kernel;
// expert_offsets: [E + 1]; row_token: [max_rows].
__global__ void __launch_bounds__(kPermuteThreads)
    moe_scatter_kernel(const int32_t* __restrict__ topk_ids, int num_slots, int top_k,
                       int num_experts, const int32_t* __restrict__ chunk,
                       const int32_t* __restrict__ expert_offsets, int32_t* __restrict__ row_token,
                       int32_t* __restrict__ slot_row) {
    pdl_wait();
    pdl_trigger();
    // [kPermuteWarps][E]: count, then first row (dynamic: 64 KB at 512 experts).
    extern __shared__ int warp_rows[];
    const int tid = threadIdx.x, warp = tid / 32;
    const int E = num_experts;
    for (int idx = tid; idx < kPermuteWarps * E; idx += kPermuteThreads) warp_rows[idx] = 0;
    __syncthreads();
    const int i = int(blockIdx.x) * kPermuteThreads + tid;
    const int e = i < num_slots ? topk_ids[i] : -1;
    const unsigned peers = __match_any_sync(kFullWarpMask, e);
    if (e >= 0 && (peers & lanes_below()) == 0) warp_rows[warp * E + e] = __popc(peers);
    __syncthreads();
    for (int x = tid; x < E; x += kPermuteThreads) {
        int running = expert_offsets[x] + chunk[int64_t(blockIdx.x) * E + x];
        for (int w = 0; w < kPermuteWarps; ++w) {
            const int c = warp_rows[w * E + x];
            warp_rows[w * E + x] = running;
            running += c;
        }
    }
    __syncthreads();
    if (e >= 0) {
        const int r = warp_rows[warp * E + e] + __popc(peers & lanes_below());
        slot_row[i] = r;
        row_token[r] = i / top_k;
    }
}

// ---------------------------------------------------------------------------------------------
// moe_gather

constexpr int kGatherThreads = 128;
constexpr int kGatherMaxBlocks = 4096;  // the grid-stride loop covers larger buffers

// x: [n, H / kVec] of Vec; row_token: [max_rows]; rows_used: &expert_offsets[E];
// x_perm: [max_rows, H / kVec] of Vec.
template <typename Vec>
__global__ void moe_gather_kernel(const Vec* __restrict__ x, const int32_t* __restrict__ row_token,
                                  const int32_t* __restrict__ rows_used, int max_rows,
                                  int64_t row_vecs, Vec* __restrict__ x_perm) {
    pdl_wait();
    pdl_trigger();
    const int num_rows = min(*rows_used, max_rows);
    for (int r = blockIdx.x; r < num_rows; r += gridDim.x) {
        const int token = row_token[r];
        Vec* dst = x_perm + int64_t(r) * row_vecs;
        if (token < 0) {
            for (int64_t i = threadIdx.x; i < row_vecs; i += kGatherThreads) dst[i] = Vec{};
        } else {
            const Vec* src = x + int64_t(token) * row_vecs;
            for (int64_t i = threadIdx.x; i < row_vecs; i += kGatherThreads) dst[i] = src[i];
        }
    }
}

// ---------------------------------------------------------------------------------------------
// moe_combine

constexpr int kCombineThreads = 256;
// Choices whose y_perm rows a thread has in flight at once: all of their loads are issued
// before the first is added, instead of one load and its add at a time (the loop's bound is
// the runtime top_k): more bytes in flight for the same bits (bench/RESULTS.md#moe-combine-batch).
constexpr int kCombineBatch = 8;

// y_perm: [max_rows, H]; slot_row, topk_weights: [n, k]; out: [n, H]. Grid: n blocks. The sums
// run over the choices in order, one fma each: the same bits whatever kCombineBatch.
template <int kVec>
__global__ void __launch_bounds__(kCombineThreads)
    moe_combine_kernel(const __nv_bfloat16* __restrict__ y_perm,
                       const int32_t* __restrict__ slot_row, const float* __restrict__ topk_weights,
                       int top_k, int64_t hidden, __nv_bfloat16* __restrict__ out) {
    pdl_wait();
    pdl_trigger();
    using Vec = BF16Vec<kVec>;
    const int64_t t = blockIdx.x;
    const int32_t* slots = slot_row + t * top_k;
    const float* weights = topk_weights + t * top_k;
    for (int64_t col = int64_t(threadIdx.x) * kVec; col < hidden; col += kCombineThreads * kVec) {
        float acc[kVec] = {};
        for (int j0 = 0; j0 < top_k; j0 += kCombineBatch) {
            Vec y[kCombineBatch];
            float w[kCombineBatch];
#pragma unroll
            for (int i = 0; i < kCombineBatch; ++i) {
                if (j0 + i < top_k) {
                    w[i] = weights[j0 + i];
                    y[i] = *reinterpret_cast<const Vec*>(y_perm + int64_t(slots[j0 + i]) * hidden +
                                                         col);
                }
            }
#pragma unroll
            for (int i = 0; i < kCombineBatch; ++i) {
                if (j0 + i < top_k) {
#pragma unroll
                    for (int q = 0; q < kVec; ++q)
                        acc[q] = __fmaf_rn(w[i], __bfloat162float(y[i].v[q]), acc[q]);
                }
            }
        }
        Vec o;
#pragma unroll
        for (int q = 0; q < kVec; ++q) o.v[q] = __float2bfloat16_rn(acc[q]);
        *reinterpret_cast<Vec*>(out + t * hidden + col) = o;
    }
}

}  // namespace

int64_t moe_max_rows(int64_t n, int64_t top_k, int64_t num_experts, int64_t tile_rows) {
    const int64_t slots = n * top_k;
    const int64_t rows = slots + std::min(num_experts, slots) * (tile_rows - 1);
    return (rows + tile_rows - 1) / tile_rows * tile_rows;
}

void moe_route(const Tensor& logits, int64_t top_k, bool renormalize, Tensor& topk_ids,
               Tensor& topk_weights, cudaStream_t stream) {
    // [n, E], f32 (the router's sums as they are) or bf16
    check_cuda_tensor(logits, logits.dtype() == DType::kF32 ? DType::kF32 : DType::kBF16,
                      "moe_route: logits", {kAnySize, kAnySize});
    const int64_t n = logits.size(0), num_experts = logits.size(1);
    MI_LAUNCH_CHECK(num_experts >= 1 && num_experts <= kMoeMaxExperts,
                    "moe_route: 1 to kMoeMaxExperts experts");
    MI_LAUNCH_CHECK(top_k >= 1 && top_k <= std::min(num_experts, kMoeMaxTopK),
                    "moe_route: top_k must be in [1, min(E, kMoeMaxTopK)]");
    check_cuda_tensor(topk_ids, DType::kI32, "moe_route: topk_ids", {n, top_k});
    check_cuda_tensor(topk_weights, DType::kF32, "moe_route: topk_weights", {n, top_k});
    if (n == 0) return;
    MI_LAUNCH_CHECK(n <= int64_t(INT32_MAX) * kRouteWarps, "moe_route: too many tokens");
    launch_route(logits, n, int(num_experts), int(top_k), renormalize, topk_ids, topk_weights,
                 stream);
    MI_CUDA_CHECK(cudaGetLastError());
}

int64_t moe_permute_workspace_elems(int64_t n, int64_t top_k, int64_t num_experts) {
    return std::max<int64_t>(1, (n * top_k + kPermuteThreads - 1) / kPermuteThreads) * num_experts;
}

void moe_permute(const Tensor& topk_ids, int64_t num_experts, int64_t tile_rows, Tensor& workspace,
                 Tensor& expert_offsets, Tensor& row_token, Tensor& slot_row, cudaStream_t stream) {
    check_cuda_tensor(topk_ids, DType::kI32, "moe_permute: topk_ids", {kAnySize, kAnySize});
    const int64_t n = topk_ids.size(0), top_k = topk_ids.size(1);
    MI_LAUNCH_CHECK(num_experts >= 1 && num_experts <= kMoeMaxExperts,
                    "moe_permute: 1 to kMoeMaxExperts experts");
    MI_LAUNCH_CHECK(tile_rows >= 1 && num_experts * tile_rows <= INT32_MAX,
                    "moe_permute: tile_rows must be >= 1");
    check_cuda_tensor(expert_offsets, DType::kI32, "moe_permute: expert_offsets",
                      {num_experts + 1});
    check_cuda_tensor(row_token, DType::kI32, "moe_permute: row_token", {kAnySize});
    check_cuda_tensor(slot_row, DType::kI32, "moe_permute: slot_row", {n, top_k});
    const int64_t max_rows = row_token.size(0);
    MI_LAUNCH_CHECK(max_rows >= moe_max_rows(n, top_k, num_experts, tile_rows),
                    "moe_permute: row_token shorter than moe_max_rows(n, k, E, tile_rows)");
    MI_LAUNCH_CHECK(max_rows <= INT32_MAX, "moe_permute: too many rows for i32 row indices");
    const int64_t slots = n * top_k;
    MI_LAUNCH_CHECK(slots <= INT32_MAX, "moe_permute: too many slots");
    const int blocks = int((slots + kPermuteThreads - 1) / kPermuteThreads);
    check_cuda_tensor(workspace, DType::kI32, "moe_permute: workspace", {kAnySize});
    MI_LAUNCH_CHECK(workspace.numel() >= moe_permute_workspace_elems(n, top_k, num_experts),
                    "moe_permute: workspace smaller than moe_permute_workspace_elems");
    int32_t* chunk = workspace.data<int32_t>();
    const int32_t* ids = topk_ids.data<int32_t>();
    if (blocks > 0)
        launch_kernel(moe_count_kernel, blocks, kPermuteThreads, 0, stream, ids, int(slots),
                      int(num_experts), chunk);
    // Even with no tokens the offsets (all 0) and row_token (all -1) are written.
    launch_kernel(moe_offsets_kernel, 1, kPermuteThreads, 0, stream, chunk, blocks,
                  int(num_experts), int(tile_rows), int(max_rows), expert_offsets.data<int32_t>(),
                  row_token.data<int32_t>());
    const size_t scatter_bytes = size_t(kPermuteWarps) * size_t(num_experts) * sizeof(int);
    allow_shared_memory<moe_scatter_kernel>(size_t(kPermuteWarps) * kMaxExperts * sizeof(int));
    if (blocks > 0)
        launch_kernel(moe_scatter_kernel, blocks, kPermuteThreads, scatter_bytes, stream, ids,
                      int(slots), int(top_k), int(num_experts), chunk,
                      expert_offsets.data<int32_t>(), row_token.data<int32_t>(),
                      slot_row.data<int32_t>());
    MI_CUDA_CHECK(cudaGetLastError());
}

void moe_gather(const Tensor& x, const Tensor& row_token, const Tensor& expert_offsets,
                Tensor& x_perm, cudaStream_t stream) {
    check_cuda_tensor(x, DType::kBF16, "moe_gather: x", {kAnySize, kAnySize});  // [n, H]
    check_cuda_tensor(row_token, DType::kI32, "moe_gather: row_token", {kAnySize});
    check_cuda_tensor(expert_offsets, DType::kI32, "moe_gather: expert_offsets", {kAnySize});
    const int64_t hidden = x.size(1), max_rows = row_token.size(0);
    const int64_t num_experts = expert_offsets.size(0) - 1;
    MI_LAUNCH_CHECK(num_experts >= 1, "moe_gather: expert_offsets must be [E + 1]");
    check_cuda_tensor(x_perm, DType::kBF16, "moe_gather: x_perm", {max_rows, hidden});
    if (max_rows == 0 || hidden == 0) return;
    MI_LAUNCH_CHECK(max_rows <= INT32_MAX, "moe_gather: too many rows for i32 row indices");

    const unsigned blocks = unsigned(std::min<int64_t>(max_rows, kGatherMaxBlocks));
    const int32_t* rows_used = expert_offsets.data<int32_t>() + num_experts;
    if (hidden % 8 == 0 && aligned16(x.raw()) && aligned16(x_perm.raw())) {
        launch_kernel(moe_gather_kernel<uint4>, blocks, kGatherThreads, 0, stream, x.data<uint4>(),
                      row_token.data<int32_t>(), rows_used, int(max_rows), hidden / 8,
                      x_perm.data<uint4>());
    } else {
        launch_kernel(moe_gather_kernel<uint16_t>, blocks, kGatherThreads, 0, stream,
                      x.data<uint16_t>(), row_token.data<int32_t>(), rows_used, int(max_rows),
                      hidden, x_perm.data<uint16_t>());
    }
    MI_CUDA_CHECK(cudaGetLastError());
}

void moe_combine(const Tensor& y_perm, const Tensor& slot_row, const Tensor& topk_weights,
                 Tensor& out, cudaStream_t stream) {
    check_cuda_tensor(y_perm, DType::kBF16, "moe_combine: y_perm", {kAnySize, kAnySize});
    check_cuda_tensor(slot_row, DType::kI32, "moe_combine: slot_row", {kAnySize, kAnySize});
    const int64_t n = slot_row.size(0), top_k = slot_row.size(1), hidden = y_perm.size(1);
    check_cuda_tensor(topk_weights, DType::kF32, "moe_combine: topk_weights", {n, top_k});
    check_cuda_tensor(out, DType::kBF16, "moe_combine: out", {n, hidden});
    if (n == 0 || hidden == 0) return;
    MI_LAUNCH_CHECK(n <= INT32_MAX && top_k <= INT32_MAX, "moe_combine: too many tokens");

    const auto* y = y_perm.data<__nv_bfloat16>();
    const auto* rows = slot_row.data<int32_t>();
    const auto* weights = topk_weights.data<float>();
    auto* o = out.data<__nv_bfloat16>();
    if (hidden % 8 == 0 && aligned16(y_perm.raw()) && aligned16(out.raw()))
        launch_kernel(moe_combine_kernel<8>, unsigned(n), kCombineThreads, 0, stream, y, rows,
                      weights, int(top_k), hidden, o);
    else
        launch_kernel(moe_combine_kernel<1>, unsigned(n), kCombineThreads, 0, stream, y, rows,
                      weights, int(top_k), hidden, o);
    MI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace miniinfer::cuda
