// bf16 -> f32, for the logits the sampler reads (Hugging Face computes the lm_head in bf16 and
// samples from .float() of it; so do we). Eight elements per thread: 16-byte loads.
#include "kernels/cuda/elementwise/cast.h"

#include <cuda_bf16.h>

#include "core/cuda/cuda_check.h"
#include "kernels/cuda/primitives/check_tensor.h"
#include "kernels/cuda/primitives/launch.cuh"

namespace miniinfer::cuda {
namespace {

__global__ void bf16_to_f32_kernel(const __nv_bfloat16* __restrict__ in, float* __restrict__ out,
                                   int64_t n) {
    pdl_wait();
    pdl_trigger();
    const int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
    if (i + 8 <= n) {
        const uint4 packed = *reinterpret_cast<const uint4*>(in + i);
        const auto* h = reinterpret_cast<const __nv_bfloat162*>(&packed);
        float4 a, b;
        float2 f0 = __bfloat1622float2(h[0]), f1 = __bfloat1622float2(h[1]);
        float2 f2 = __bfloat1622float2(h[2]), f3 = __bfloat1622float2(h[3]);
        a = make_float4(f0.x, f0.y, f1.x, f1.y);
        b = make_float4(f2.x, f2.y, f3.x, f3.y);
        *reinterpret_cast<float4*>(out + i) = a;
        *reinterpret_cast<float4*>(out + i + 4) = b;
    } else {
        for (int64_t j = i; j < n; ++j) out[j] = __bfloat162float(in[j]);
    }
}

}  // namespace

void bf16_to_f32(const Tensor& in, Tensor& out, cudaStream_t stream) {
    check_cuda_tensor(in, DType::kBF16, "bf16_to_f32: in");
    check_cuda_tensor(out, DType::kF32, "bf16_to_f32: out");
    MI_LAUNCH_CHECK(in.numel() == out.numel(), "bf16_to_f32: in and out differ in size");
    MI_LAUNCH_CHECK(reinterpret_cast<uintptr_t>(in.raw()) % 16 == 0 &&
                        reinterpret_cast<uintptr_t>(out.raw()) % 16 == 0,
                    "bf16_to_f32: 16-byte aligned buffers");
    const int64_t n = in.numel();
    if (n == 0) return;
    const int64_t threads = (n + 7) / 8;
    launch_kernel(bf16_to_f32_kernel, unsigned((threads + 255) / 256), 256, 0, stream,
                  in.data<__nv_bfloat16>(), out.data<float>(), n);
    MI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace miniinfer::cuda
