// Counter-based normal numbers: element i of tensor `key` is a pure function of (key, i), so
// threads need no state and any block of any shard can be filled on its own.
#include "kernels/cuda/elementwise/fill_random.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "core/cuda/cuda_check.h"
#include "kernels/cuda/primitives/check_tensor.h"
#include "kernels/cuda/primitives/launch.cuh"

namespace miniinfer::cuda {
namespace {

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

__device__ __forceinline__ void store(__nv_bfloat16* out, float v) {
    *out = __float2bfloat16(v);
}
__device__ __forceinline__ void store(float* out, float v) {
    *out = v;
}
__device__ __forceinline__ void store(uint8_t* out, float v) {  // e4m3
    *out = uint8_t(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

template <typename Out>
__global__ void fill_normal_kernel(Out* __restrict__ out, FillBlock b, uint64_t key, float scale,
                                   float constant, int64_t n) {
    pdl_wait();
    pdl_trigger();
    const int64_t width = b.col_end - b.col_begin;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        float value = constant;
        if (scale != 0.f) {
            const int64_t row = b.row_begin + i / width, col = b.col_begin + i % width;
            const uint64_t h = splitmix64(key ^ splitmix64(uint64_t(row * b.cols + col)));
            // Two 24-bit uniforms in (0, 1] and [0, 1).
            const float u1 = (float((h >> 40) & 0xFFFFFF) + 1.f) * (1.f / 16777216.f);
            const float u2 = float((h >> 8) & 0xFFFFFF) * (1.f / 16777216.f);
            value = constant + scale * sqrtf(-2.f * logf(u1)) * cospif(2.f * u2);
        }
        store(out + i, value);
    }
}

}  // namespace

void fill_normal(Tensor& out, const FillBlock& block, uint64_t key, float scale, float constant,
                 cudaStream_t stream) {
    MI_LAUNCH_CHECK(out.device() == Device::kCUDA &&
                        (out.dtype() == DType::kBF16 || out.dtype() == DType::kF32 ||
                         out.dtype() == DType::kF8E4M3),
                    "fill_normal: out must be a bf16, f32 or e4m3 CUDA tensor");
    const int64_t n = (block.row_end - block.row_begin) * (block.col_end - block.col_begin);
    MI_LAUNCH_CHECK(n == out.numel() && block.col_end > block.col_begin && block.cols > 0,
                    "fill_normal: the block does not match out");
    if (n == 0) return;
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 65536);
    if (out.dtype() == DType::kBF16)
        launch_kernel(fill_normal_kernel<__nv_bfloat16>, unsigned(blocks), threads, 0, stream,
                      static_cast<__nv_bfloat16*>(out.raw()), block, key, scale, constant, n);
    else if (out.dtype() == DType::kF32)
        launch_kernel(fill_normal_kernel<float>, unsigned(blocks), threads, 0, stream,
                      static_cast<float*>(out.raw()), block, key, scale, constant, n);
    else
        launch_kernel(fill_normal_kernel<uint8_t>, unsigned(blocks), threads, 0, stream,
                      static_cast<uint8_t*>(out.raw()), block, key, scale, constant, n);
    MI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace miniinfer::cuda
