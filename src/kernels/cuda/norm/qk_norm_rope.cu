// Fused per-head RMSNorm (Qwen3) + NeoX rotary + paged K/V store, straight from the QKV GEMM's
// output row, so that q, k and v make one trip through memory between the GEMM and attention.
//
// Lanes: a head is kHeadDim / 16 consecutive lanes of a warp (8 at head_dim 128, so a warp holds
// 4 heads), each lane holding 8 elements of the head's first half and their rotary partners in
// the second: [8 s, 8 s + 8) and [kHeadDim / 2 + 8 s, ...) for lane s of the head. So every load
// and store is 16 bytes (8 for an FP8 cache), rotation needs no shuffles, and the norm's sum of
// squares is a sum over the head's lanes. The rotary angles depend on the token only: a block
// (one token, 4 warps, 16 heads at head_dim 128) computes them once into shared memory.
// (The layout before, element lane + 32 j with 2-byte accesses, moved 2.2 TB/s at an 8,192-token
// prefill step of Qwen3-0.6B on the H200.) The fa2 decode kernels that do this step themselves
// keep that layout (qk_norm_rope.cuh); the pieces they share with this kernel make the same bits.
#include "kernels/cuda/norm/qk_norm_rope.h"

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "core/cuda/cuda_check.h"
#include "kernels/cuda/gemm/gemv.cuh"
#include "kernels/cuda/norm/qk_norm_rope.cuh"
#include "kernels/cuda/primitives/check_tensor.h"
#include "kernels/cuda/primitives/launch.cuh"
#include "kernels/cuda/primitives/mma_bf16.cuh"

namespace miniinfer::cuda {
namespace {

constexpr int kWarps = 4;  // warps per block

// The heads one warp holds: a head is head_dim / 16 lanes.
constexpr int heads_per_warp(int64_t head_dim) {
    return int(32 / (head_dim / 16));
}

// Eight floats as eight bf16 (a 16-byte vector).
__device__ __forceinline__ uint4 pack_bf16x8(const float (&f)[8]) {
    return make_uint4(pack_bf16(f[0], f[1]), pack_bf16(f[2], f[3]), pack_bf16(f[4], f[5]),
                      pack_bf16(f[6], f[7]));
}

// Eight values into the cache at dst: bf16 (16 bytes) or e4m3 of x / scale (8 bytes), each
// element as store_cache (qk_norm_rope.cuh) writes it.
__device__ __forceinline__ void store_cache8(__nv_bfloat16* dst, const float (&x)[8], float) {
    *reinterpret_cast<uint4*>(dst) = pack_bf16x8(x);
}
__device__ __forceinline__ void store_cache8(uint8_t* dst, const float (&x)[8], float inv_scale) {
    uint32_t word[2] = {0, 0};
#pragma unroll
    for (int e = 0; e < 8; ++e) word[e / 4] |= uint32_t(to_e4m3(x[e], inv_scale)) << (8 * (e % 4));
    *reinterpret_cast<uint2*>(dst) = make_uint2(word[0], word[1]);
}

// qkv: [n, row_stride], heads num_heads + 2 * num_kv_heads of kHeadDim from column 0; q_norm,
// k_norm: [kHeadDim] or null (both or neither); positions, slot_mapping: [n]; inv_freq:
// [rotary_dim / 2], rope_scale its cos/sin multiplier; rotary_dim < kHeadDim: partial rotary
// (the first rotary_dim elements of a head rotate, NeoX style among themselves);
// q_out: [n, num_heads, kHeadDim]; k_cache, v_cache: [num_slots, num_kv_heads, kHeadDim]; every
// row 16-byte aligned (the launcher checks).
// Grid: (n, ceil(total_heads / (kWarps * heads_per_warp))); block: kWarps warps. Heads q first,
// then k, v.
template <int kHeadDim, typename Cache>
__global__ void __launch_bounds__(kWarps * 32)
    qk_norm_rope_store_kernel(const __nv_bfloat16* __restrict__ qkv, int64_t row_stride,
                              int rotary_dim, const __nv_bfloat16* __restrict__ q_norm,
                              const __nv_bfloat16* __restrict__ k_norm, float eps,
                              const int32_t* __restrict__ positions,
                              const float* __restrict__ inv_freq, float rope_scale,
                              const int32_t* __restrict__ slot_mapping, int num_heads,
                              int num_kv_heads, __nv_bfloat16* __restrict__ q_out,
                              Cache* __restrict__ k_cache, Cache* __restrict__ v_cache,
                              float k_inv_scale, float v_inv_scale) {
    constexpr int kLanes = kHeadDim / 16;  // lanes a head
    constexpr int kHalf = kHeadDim / 2;
    __shared__ float sin_of[kHalf], cos_of[kHalf];  // token t's rotary angles
    // Partial rotary: each warp's heads, for the lanes to read their elements' partners.
    __shared__ float partners[kWarps][32 * 16];
    pdl_wait();
    pdl_trigger();
    const int total_heads = num_heads + 2 * num_kv_heads;
    const int t = int(blockIdx.x), lane = int(threadIdx.x) % 32, s = lane % kLanes;
    const int head = (int(blockIdx.y) * kWarps + int(threadIdx.x) / 32) * heads_per_warp(kHeadDim) +
                     lane / kLanes;
    const bool valid = head < total_heads;
    const bool is_q = head < num_heads, is_v = head >= num_heads + num_kv_heads;
    const int64_t e0 = 8 * s;  // the lane's first element; its partners at e0 + kHalf
    uint4 raw[2] = {};
    if (valid) {
        const __nv_bfloat16* src = qkv + int64_t(t) * row_stride + int64_t(head) * kHeadDim + e0;
        raw[0] = *reinterpret_cast<const uint4*>(src);
        raw[1] = *reinterpret_cast<const uint4*>(src + kHalf);
    }
    const float pos = float(positions[t]);
    for (int i = int(threadIdx.x); i < rotary_dim / 2; i += kWarps * 32)
        rope_angle(pos, inv_freq[i], rope_scale, sin_of[i], cos_of[i]);
    __syncthreads();

    if (valid && is_v) {  // V: a plain copy into its slot (or to e4m3)
        Cache* dst =
            v_cache +
            (int64_t(slot_mapping[t]) * num_kv_heads + head - num_heads - num_kv_heads) * kHeadDim +
            e0;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            if constexpr (std::is_same_v<Cache, __nv_bfloat16>) {
                *reinterpret_cast<uint4*>(dst + h * kHalf) = raw[h];
            } else {
                float v[8];
                unpack_bf16x8(raw[h], v);
                store_cache8(dst + h * kHalf, v, v_inv_scale);
            }
        }
    }
    float x[2][8];  // elements e0 .. e0 + 7 of each half: x[1][e] is x[0][e]'s rotary partner
    unpack_bf16x8(raw[0], x[0]);
    unpack_bf16x8(raw[1], x[1]);
    if (q_norm != nullptr) {  // every lane of the warp sums: the shuffles need them all
        double sum_sq = 0.0;
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int e = 0; e < 8; ++e) sum_sq += double(x[h][e]) * double(x[h][e]);
        const float inv_rms = head_inv_rms(warp_sum<kLanes>(sum_sq), kHeadDim, eps);
        if (valid && !is_v) {
            const __nv_bfloat16* w = (is_q ? q_norm : k_norm) + e0;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float wf[8];
                unpack_bf16x8(*reinterpret_cast<const uint4*>(w + h * kHalf), wf);
#pragma unroll
                for (int e = 0; e < 8; ++e) x[h][e] = norm_element(x[h][e], inv_rms, wf[e]);
            }
        }
    }
    if (rotary_dim < kHeadDim) {  // every lane: the warp meets in __syncwarp
        // Element i < rotary_dim / 2 pairs with i + rotary_dim / 2, which another lane may hold.
        float* head_x = partners[threadIdx.x / 32] + (lane / kLanes) * kHeadDim;
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int e = 0; e < 8; ++e) head_x[h * kHalf + e0 + e] = x[h][e];
        __syncwarp();
        const int r2 = rotary_dim / 2;
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const int i = h * kHalf + int(e0) + e;
                if (i < r2) {
                    float lo = x[h][e], hi = head_x[i + r2];
                    rotate_pair(lo, hi, sin_of[i], cos_of[i]);
                    x[h][e] = lo;
                } else if (i < rotary_dim) {
                    float lo = head_x[i - r2], hi = x[h][e];
                    rotate_pair(lo, hi, sin_of[i - r2], cos_of[i - r2]);
                    x[h][e] = hi;
                }
            }
    }
    if (!valid || is_v) return;
    if (rotary_dim == kHeadDim)
#pragma unroll
        for (int e = 0; e < 8; ++e) rotate_pair(x[0][e], x[1][e], sin_of[e0 + e], cos_of[e0 + e]);
    if (is_q) {
        __nv_bfloat16* dst = q_out + (int64_t(t) * num_heads + head) * kHeadDim + e0;
        *reinterpret_cast<uint4*>(dst) = pack_bf16x8(x[0]);
        *reinterpret_cast<uint4*>(dst + kHalf) = pack_bf16x8(x[1]);
    } else {
        Cache* dst =
            k_cache + (int64_t(slot_mapping[t]) * num_kv_heads + head - num_heads) * kHeadDim + e0;
        store_cache8(dst, x[0], k_inv_scale);
        store_cache8(dst + kHalf, x[1], k_inv_scale);
    }
}

}  // namespace

void qk_norm_rope_store(const Tensor& qkv, const Tensor* q_norm, const Tensor* k_norm, float eps,
                        const Tensor& positions, const Tensor& inv_freq, const Tensor& slot_mapping,
                        int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, Tensor& q_out,
                        Tensor& k_cache, Tensor& v_cache, cudaStream_t stream, float k_scale,
                        float v_scale, float rope_scale, int64_t rotary_dim) {
    MI_LAUNCH_CHECK(num_heads > 0 && num_kv_heads > 0,
                    "qk_norm_rope_store: head counts must be positive");
    const int64_t total_heads = num_heads + 2 * num_kv_heads;
    // qkv: [n, (heads + 2 * kv_heads) * head_dim + any columns after]
    check_cuda_tensor(qkv, DType::kBF16, "qk_norm_rope_store: qkv", {kAnySize, kAnySize});
    MI_LAUNCH_CHECK(qkv.size(1) >= total_heads * head_dim && qkv.size(1) % 8 == 0,
                    "qk_norm_rope_store: qkv rows must hold the heads (and be 16-byte multiples)");
    const int64_t n = qkv.size(0);
    if (rotary_dim == 0) rotary_dim = head_dim;
    MI_LAUNCH_CHECK(rotary_dim % 2 == 0 && rotary_dim > 0 && rotary_dim <= head_dim,
                    "qk_norm_rope_store: rotary_dim must be even and in (0, head_dim]");
    if (q_norm) check_cuda_tensor(*q_norm, DType::kBF16, "qk_norm_rope_store: q_norm", {head_dim});
    if (k_norm) check_cuda_tensor(*k_norm, DType::kBF16, "qk_norm_rope_store: k_norm", {head_dim});
    check_cuda_tensor(positions, DType::kI32, "qk_norm_rope_store: positions", {n});
    check_cuda_tensor(slot_mapping, DType::kI32, "qk_norm_rope_store: slot_mapping", {n});
    check_cuda_tensor(inv_freq, DType::kF32, "qk_norm_rope_store: inv_freq", {rotary_dim / 2});
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
    MI_LAUNCH_CHECK(rope_scale > 0.f, "qk_norm_rope_store: rope_scale must be positive");
    MI_LAUNCH_CHECK(k_cache.shape() == v_cache.shape(),
                    "qk_norm_rope_store: k_cache and v_cache differ in shape");
    MI_LAUNCH_CHECK((q_norm == nullptr) == (k_norm == nullptr),
                    "qk_norm_rope_store: q_norm and k_norm come together");
    const Tensor* vectors[] = {&qkv,     &q_out, &k_cache,
                               &v_cache, q_norm, k_norm};  // 16-byte accesses
    for (const Tensor* t : vectors)
        MI_LAUNCH_CHECK(t == nullptr || reinterpret_cast<uintptr_t>(t->raw()) % 16 == 0,
                        "qk_norm_rope_store: tensors must be 16-byte aligned");
    if (n == 0) return;
    MI_LAUNCH_CHECK(n <= INT32_MAX, "qk_norm_rope_store: batch too large for one grid");

    const int64_t heads_per_block = kWarps * heads_per_warp(head_dim);
    const dim3 grid(unsigned(n), unsigned((total_heads + heads_per_block - 1) / heads_per_block));
    const auto launch = [&](auto head_dim_tag, auto* k_ptr, auto* v_ptr) {
        constexpr int kHeadDim = decltype(head_dim_tag)::value;
        using Cache = std::remove_pointer_t<decltype(k_ptr)>;
        launch_kernel(qk_norm_rope_store_kernel<kHeadDim, Cache>, grid, kWarps * 32, 0, stream,
                      qkv.data<__nv_bfloat16>(), qkv.size(1), int(rotary_dim),
                      q_norm ? q_norm->data<__nv_bfloat16>() : nullptr,
                      k_norm ? k_norm->data<__nv_bfloat16>() : nullptr, eps,
                      positions.data<int32_t>(), inv_freq.data<float>(), rope_scale,
                      slot_mapping.data<int32_t>(), int(num_heads), int(num_kv_heads),
                      q_out.data<__nv_bfloat16>(), k_ptr, v_ptr, 1.f / k_scale, 1.f / v_scale);
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
