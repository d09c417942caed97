// One warp a (row, group of 128): each lane holds 4 values, the group's amax is a warp max, each
// lane stores its 4 e4m3 bytes as one word. A short last group (k not a multiple of 128) takes
// the amax of the values it has, as the CPU does.
#include "kernels/cuda/elementwise/fp8_quantize.h"

#include <cuda_bf16.h>

#include "core/cuda/cuda_check.h"
#include "kernels/cuda/elementwise/silu_mul.cuh"
#include "kernels/cuda/primitives/check_tensor.h"
#include "kernels/cuda/primitives/fp8.cuh"
#include "kernels/cuda/primitives/launch.cuh"

namespace miniinfer::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kPerLane = kFp8GroupSize / 32;  // 4

// src: x [rows, k], or gate_up [rows, 2k] with kSiluMul.
template <bool kSiluMul>
__global__ void __launch_bounds__(32 * kWarps)
    fp8_quantize_kernel(const __nv_bfloat16* __restrict__ src, uint8_t* __restrict__ q,
                        float* __restrict__ scales, int rows, int k, const int32_t* rows_used) {
    pdl_wait();
    pdl_trigger();
    const int groups = (k + kFp8GroupSize - 1) / kFp8GroupSize;
    const int item = int(blockIdx.x) * kWarps + int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
    const int row = item / groups, group = item % groups;
    if (row >= rows || (rows_used && row >= *rows_used)) return;
    const int col = group * kFp8GroupSize + lane * kPerLane;  // k % 4 == 0: all 4 in or all out
    float v[kPerLane] = {0.f, 0.f, 0.f, 0.f};
    if (col < k) {
        if constexpr (kSiluMul) {
            const __nv_bfloat16* g = src + int64_t(row) * 2 * k + col;
            const uint2 gw = *reinterpret_cast<const uint2*>(g);
            const uint2 uw = *reinterpret_cast<const uint2*>(g + k);
            const __nv_bfloat16* gs = reinterpret_cast<const __nv_bfloat16*>(&gw);
            const __nv_bfloat16* us = reinterpret_cast<const __nv_bfloat16*>(&uw);
#pragma unroll
            for (int i = 0; i < kPerLane; ++i) v[i] = __bfloat162float(silu_mul_bf16(gs[i], us[i]));
        } else {
            const uint2 w = *reinterpret_cast<const uint2*>(src + int64_t(row) * k + col);
            const __nv_bfloat16* xs = reinterpret_cast<const __nv_bfloat16*>(&w);
#pragma unroll
            for (int i = 0; i < kPerLane; ++i) v[i] = __bfloat162float(xs[i]);
        }
    }
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    const float s = fp8_group_scale(amax);
    if (col < k) {
        uint32_t word = 0;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) word |= uint32_t(fp8_quantize(v[i], s)) << (8 * i);
        *reinterpret_cast<uint32_t*>(q + int64_t(row) * k + col) = word;
    }
    if (lane == 0) scales[int64_t(row) * groups + group] = s;
}

template <bool kSiluMul>
void launch(const Tensor& src, int64_t k, Tensor& q, Tensor& scales, cudaStream_t stream,
            const int32_t* rows_used) {
    const char* name = kSiluMul ? "silu_mul_fp8_quantize" : "fp8_quantize";
    const int64_t src_cols = kSiluMul ? 2 * k : k;
    check_cuda_tensor(src, DType::kBF16, name);
    check_cuda_tensor(q, DType::kF8E4M3, name);
    check_cuda_tensor(scales, DType::kF32, name);
    MI_LAUNCH_CHECK(k > 0 && k % 16 == 0 && src.numel() % src_cols == 0,
                    "fp8_quantize: k must be a positive multiple of 16 dividing the source");
    const int64_t rows = src.numel() / src_cols, groups = (k + kFp8GroupSize - 1) / kFp8GroupSize;
    MI_LAUNCH_CHECK(q.numel() >= rows * k && scales.numel() >= rows * groups,
                    "fp8_quantize: q or scales too small for the rows");
    if (rows == 0) return;
    const int64_t items = rows * groups;
    launch_kernel(fp8_quantize_kernel<kSiluMul>, unsigned((items + kWarps - 1) / kWarps),
                  32 * kWarps, 0, stream, src.data<__nv_bfloat16>(), static_cast<uint8_t*>(q.raw()),
                  scales.data<float>(), int(rows), int(k), rows_used);
    MI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void fp8_quantize(const Tensor& x, Tensor& q, Tensor& scales, cudaStream_t stream) {
    MI_LAUNCH_CHECK(x.ndim() >= 1, "fp8_quantize: x has no dimensions");
    launch<false>(x, x.size(-1), q, scales, stream, nullptr);
}

void silu_mul_fp8_quantize(const Tensor& gate_up, Tensor& q, Tensor& scales, cudaStream_t stream,
                           const int32_t* rows_used) {
    MI_LAUNCH_CHECK(gate_up.ndim() >= 1 && gate_up.size(-1) % 2 == 0,
                    "silu_mul_fp8_quantize: gate_up is not [rows, 2k]");
    launch<true>(gate_up, gate_up.size(-1) / 2, q, scales, stream, rows_used);
}

}  // namespace miniinfer::cuda
