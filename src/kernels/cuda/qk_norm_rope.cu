// Fused per-head RMSNorm (Qwen3) + NeoX rotary + paged K/V store, straight from the QKV GEMM's
// output row, so that q, k and v make one trip through memory between the GEMM and attention.
//
// A warp takes heads_per_warp consecutive heads of one token: a head of head_dim ≤ 256 bf16 fits
// in registers as kPerLane values per lane, element i = lane + 32 * j (qk_norm_rope.cuh, whose
// pieces the fa2 decode kernels share when they do this step themselves). Loads and stores are
// coalesced 64-byte rows per j. The rotary angles (sincosf, the costliest part) depend on the
// token only, so a warp computes them once for all of its heads: from 128 tokens a step a warp
// takes a quarter of the token's heads, below that one head (more warps in flight matter more
// when there are few tokens).
#include "kernels/cuda/qk_norm_rope.h"

#include <cuda_bf16.h>

#include <type_traits>

#include "core/cuda/cuda_check.h"
#include "kernels/cuda/check_tensor.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/qk_norm_rope.cuh"

namespace miniinfer::cuda {
namespace {

constexpr int kWarps = 4;  // warps per block

// Head `head` of token t: q (normed, rotated) to q_out, k (normed, rotated) or v into the cache.
template <int kHeadDim, typename Cache>
__device__ __forceinline__ void norm_rope_store_head(
    const __nv_bfloat16* __restrict__ qkv, const __nv_bfloat16* __restrict__ q_norm,
    const __nv_bfloat16* __restrict__ k_norm, float eps, const RopeAngles<kHeadDim>& angles,
    const int32_t* __restrict__ slot_mapping, int t, int head, int num_heads, int num_kv_heads,
    __nv_bfloat16* __restrict__ q_out, Cache* __restrict__ k_cache, Cache* __restrict__ v_cache,
    float k_inv_scale, float v_inv_scale) {
    constexpr int kPerLane = kHeadDim / 32;
    const int lane = int(threadIdx.x) % 32;
    const int total_heads = num_heads + 2 * num_kv_heads;
    const __nv_bfloat16* src = qkv + (int64_t(t) * total_heads + head) * kHeadDim;

    if (head >= num_heads + num_kv_heads) {  // V: a plain copy into its slot (or to e4m3)
        const int kv_head = head - num_heads - num_kv_heads;
        Cache* dst = v_cache + (int64_t(slot_mapping[t]) * num_kv_heads + kv_head) * kHeadDim;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
            if constexpr (std::is_same_v<Cache, __nv_bfloat16>)
                dst[lane + 32 * j] = src[lane + 32 * j];
            else
                store_cache(dst + lane + 32 * j, __bfloat162float(src[lane + 32 * j]), v_inv_scale);
        }
        return;
    }

    const bool is_q = head < num_heads;
    float x[kPerLane];
    load_head<kHeadDim>(src, x);
    if (const __nv_bfloat16* w = is_q ? q_norm : k_norm) norm_head<kHeadDim>(w, eps, x);
    rotate_head<kHeadDim>(angles, x);

    if (is_q) {
        __nv_bfloat16* dst = q_out + (int64_t(t) * num_heads + head) * kHeadDim;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) dst[lane + 32 * j] = __float2bfloat16(x[j]);
    } else {
        Cache* dst =
            k_cache + (int64_t(slot_mapping[t]) * num_kv_heads + head - num_heads) * kHeadDim;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) store_cache(dst + lane + 32 * j, x[j], k_inv_scale);
    }
}

// qkv: [n, num_heads + 2 * num_kv_heads, kHeadDim]; q_norm, k_norm: [kHeadDim] or null;
// positions, slot_mapping: [n]; inv_freq: [kHeadDim / 2];
// q_out: [n, num_heads, kHeadDim]; k_cache, v_cache: [num_slots, num_kv_heads, kHeadDim].
// Grid: (n, ceil(total_heads / (kWarps * heads_per_warp))); block: kWarps warps.
template <int kHeadDim, typename Cache>
__global__ void __launch_bounds__(kWarps * 32) qk_norm_rope_store_kernel(
    const __nv_bfloat16* __restrict__ qkv, const __nv_bfloat16* __restrict__ q_norm,
    const __nv_bfloat16* __restrict__ k_norm, float eps, const int32_t* __restrict__ positions,
    const float* __restrict__ inv_freq, const int32_t* __restrict__ slot_mapping, int num_heads,
    int num_kv_heads, __nv_bfloat16* __restrict__ q_out, Cache* __restrict__ k_cache,
    Cache* __restrict__ v_cache, float k_inv_scale, float v_inv_scale, int heads_per_warp) {
    pdl_wait();
    pdl_trigger();
    const int total_heads = num_heads + 2 * num_kv_heads;
    const int t = blockIdx.x;
    const int first = (int(blockIdx.y) * kWarps + int(threadIdx.x) / 32) * heads_per_warp;
    const int end = min(first + heads_per_warp, total_heads);
    RopeAngles<kHeadDim> angles;  // token t's, for every q and k head of this warp
    if (first < num_heads + num_kv_heads)
        angles = rope_angles<kHeadDim>(float(positions[t]), inv_freq);
    for (int head = first; head < end; ++head)
        norm_rope_store_head<kHeadDim>(qkv, q_norm, k_norm, eps, angles, slot_mapping, t, head,
                                       num_heads, num_kv_heads, q_out, k_cache, v_cache,
                                       k_inv_scale, v_inv_scale);
}

}  // namespace

void qk_norm_rope_store(const Tensor& qkv, const Tensor* q_norm, const Tensor* k_norm, float eps,
                        const Tensor& positions, const Tensor& inv_freq, const Tensor& slot_mapping,
                        int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, Tensor& q_out,
                        Tensor& k_cache, Tensor& v_cache, cudaStream_t stream, float k_scale,
                        float v_scale) {
    MI_LAUNCH_CHECK(num_heads > 0 && num_kv_heads > 0,
                    "qk_norm_rope_store: head counts must be positive");
    const int64_t total_heads = num_heads + 2 * num_kv_heads;
    // qkv: [n, (heads + 2 * kv_heads) * head_dim]
    check_cuda_tensor(qkv, DType::kBF16, "qk_norm_rope_store: qkv",
                      {kAnySize, total_heads * head_dim});
    const int64_t n = qkv.size(0);
    if (q_norm) check_cuda_tensor(*q_norm, DType::kBF16, "qk_norm_rope_store: q_norm", {head_dim});
    if (k_norm) check_cuda_tensor(*k_norm, DType::kBF16, "qk_norm_rope_store: k_norm", {head_dim});
    check_cuda_tensor(positions, DType::kI32, "qk_norm_rope_store: positions", {n});
    check_cuda_tensor(slot_mapping, DType::kI32, "qk_norm_rope_store: slot_mapping", {n});
    check_cuda_tensor(inv_freq, DType::kF32, "qk_norm_rope_store: inv_freq", {head_dim / 2});
    check_cuda_tensor(q_out, DType::kBF16, "qk_norm_rope_store: q_out");
    MI_LAUNCH_CHECK(q_out.size(0) == n && q_out.numel() == n * num_heads * head_dim,
                    "qk_norm_rope_store: q_out must be [n, num_heads, head_dim]");
    // k_cache, v_cache: [num_pages, page_size, num_kv_heads, head_dim]
    const bool fp8 = k_cache.dtype() == DType::kU8;  // an FP8 cache: e4m3 bytes
    const DType cache = fp8 ? DType::kU8 : DType::kBF16;
    check_cuda_tensor(k_cache, cache, "qk_norm_rope_store: k_cache",
                      {kAnySize, kAnySize, num_kv_heads, head_dim});
    check_cuda_tensor(v_cache, cache, "qk_norm_rope_store: v_cache",
                      {kAnySize, kAnySize, num_kv_heads, head_dim});
    MI_LAUNCH_CHECK(!fp8 || (k_scale > 0.f && v_scale > 0.f),
                    "qk_norm_rope_store: an FP8 cache needs positive scales");
    MI_LAUNCH_CHECK(k_cache.shape() == v_cache.shape(),
                    "qk_norm_rope_store: k_cache and v_cache differ in shape");
    if (n == 0) return;
    MI_LAUNCH_CHECK(n <= INT32_MAX && total_heads <= 65535 * kWarps,
                    "qk_norm_rope_store: batch too large for one grid");

    // From 128 tokens a warp takes a quarter of a token's heads (their rotary angles computed
    // once), below that one head: more warps in flight for a few tokens.
    const int heads_per_warp = n >= 128 ? int((total_heads + kWarps - 1) / kWarps) : 1;
    const int64_t heads_per_block = int64_t(kWarps) * heads_per_warp;
    const dim3 grid(unsigned(n), unsigned((total_heads + heads_per_block - 1) / heads_per_block));
    const auto launch = [&](auto head_dim_tag, auto* k_ptr, auto* v_ptr) {
        constexpr int kHeadDim = decltype(head_dim_tag)::value;
        using Cache = std::remove_pointer_t<decltype(k_ptr)>;
        launch_kernel(qk_norm_rope_store_kernel<kHeadDim, Cache>, grid, kWarps * 32, 0, stream,
                      qkv.data<__nv_bfloat16>(), q_norm ? q_norm->data<__nv_bfloat16>() : nullptr,
                      k_norm ? k_norm->data<__nv_bfloat16>() : nullptr, eps,
                      positions.data<int32_t>(), inv_freq.data<float>(),
                      slot_mapping.data<int32_t>(), int(num_heads), int(num_kv_heads),
                      q_out.data<__nv_bfloat16>(), k_ptr, v_ptr, 1.f / k_scale, 1.f / v_scale,
                      heads_per_warp);
    };
    // The head sizes compiled in, each for a bf16 and an FP8 cache.
    const auto dispatch = [&](auto head_dim_tag) {
        if (fp8)
            launch(head_dim_tag, k_cache.data<uint8_t>(), v_cache.data<uint8_t>());
        else
            launch(head_dim_tag, k_cache.data<__nv_bfloat16>(), v_cache.data<__nv_bfloat16>());
    };
    switch (head_dim) {
        case 64:
            dispatch(std::integral_constant<int, 64>{});
            break;
        case 128:
            dispatch(std::integral_constant<int, 128>{});
            break;
        case 256:
            dispatch(std::integral_constant<int, 256>{});
            break;
        default:
            MI_LAUNCH_CHECK(false, "qk_norm_rope_store: head_dim must be 64, 128 or 256");
    }
    MI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace miniinfer::cuda
