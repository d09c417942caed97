// Fused residual-add + RMSNorm over bf16 rows, fp32 arithmetic.
//
//   residual += x (stored back in bf16, as a bf16 model's residual stream is);
//   out = w * bf16(residual / sqrt(mean(residual²) + eps))
// The rounding points follow Hugging Face's Qwen2RMSNorm on bf16 tensors. One block per row:
// a row (hidden_size ≤ a few thousand) fits in registers across the block's threads.
#include "kernels/cuda/rms_norm.h"

#include <cuda_bf16.h>

#include "core/cuda/cuda_check.h"
#include "kernels/cuda/check_tensor.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/reduce.cuh"

namespace miniinfer::cuda {
namespace {

constexpr int kThreads = 256;

// x, out: [rows, dim]; residual: [rows, dim] or null; w: [dim]
__global__ void add_rms_norm_kernel(const __nv_bfloat16* __restrict__ x,
                                    __nv_bfloat16* __restrict__ residual,
                                    const __nv_bfloat16* __restrict__ w, int dim, float eps,
                                    __nv_bfloat16* __restrict__ out) {
    pdl_wait();
    pdl_trigger();
    const int64_t base = int64_t(blockIdx.x) * dim;
    float sum_sq = 0.f;
    for (int i = threadIdx.x; i < dim; i += kThreads) {
        float v = __bfloat162float(x[base + i]);
        if (residual) {
            const __nv_bfloat16 r = __float2bfloat16(v + __bfloat162float(residual[base + i]));
            residual[base + i] = r;
            v = __bfloat162float(r);
        }
        sum_sq += v * v;
    }
    const float inv_rms = rsqrtf(block_sum<kThreads>(sum_sq) / float(dim) + eps);
    for (int i = threadIdx.x; i < dim; i += kThreads) {
        const float v = __bfloat162float(residual ? residual[base + i] : x[base + i]);
        const float normed = __bfloat162float(__float2bfloat16(v * inv_rms));
        out[base + i] = __float2bfloat16(normed * __bfloat162float(w[i]));
    }
}

}  // namespace

void add_rms_norm(const Tensor& x, Tensor* residual, const Tensor& weight, float eps, Tensor& out,
                  cudaStream_t stream) {
    check_cuda_tensor(weight, DType::kBF16, "rms_norm: weight", {kAnySize});
    const int64_t dim = weight.size(0);
    check_cuda_tensor(x, DType::kBF16, "rms_norm: x");
    check_cuda_tensor(out, DType::kBF16, "rms_norm: out");
    MI_LAUNCH_CHECK(x.ndim() >= 1 && x.size(-1) == dim && out.shape() == x.shape(),
                    "rms_norm: x, out must be [rows, dim] and weight [dim]");
    if (residual) {
        check_cuda_tensor(*residual, DType::kBF16, "rms_norm: residual");
        MI_LAUNCH_CHECK(residual->shape() == x.shape(), "rms_norm: residual must have x's shape");
    }
    const int64_t rows = x.numel() / dim;
    if (rows == 0) return;
    launch_kernel(add_rms_norm_kernel, unsigned(rows), kThreads, 0, stream, x.data<__nv_bfloat16>(),
                  residual ? residual->data<__nv_bfloat16>() : nullptr,
                  weight.data<__nv_bfloat16>(), int(dim), eps, out.data<__nv_bfloat16>());
    MI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace miniinfer::cuda
