// Fused residual-add + RMSNorm over bf16 rows, fp32 arithmetic.
//
//   residual_out = residual + x (stored in bf16, as a bf16 model's residual stream is; in place
//   or into the other of two buffers);
//   out = w * bf16(residual_out / sqrt(mean(residual_out²) + eps))
// The rounding points (rms_norm.cuh) follow Hugging Face's Qwen2RMSNorm on bf16 tensors. One block
// per row: a row (hidden_size ≤ a few thousand) fits in registers across the block's threads.
#include "kernels/cuda/rms_norm.h"

#include <cuda_bf16.h>

#include "core/cuda/cuda_check.h"
#include "kernels/cuda/check_tensor.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/rms_norm.cuh"

namespace miniinfer::cuda {
namespace {

constexpr int kThreads = 256;

// x, out: [rows, dim]; residual: [rows, dim] or null (then out = norm(x)); with it,
// residual_out = residual + x (residual_out may be residual: each element is read, then written,
// by one thread); w: [dim]
__global__ void add_rms_norm_kernel(const __nv_bfloat16* __restrict__ x,
                                    const __nv_bfloat16* residual, __nv_bfloat16* residual_out,
                                    const __nv_bfloat16* __restrict__ w, int dim, float eps,
                                    __nv_bfloat16* __restrict__ out) {
    pdl_wait();
    pdl_trigger();
    const int64_t base = int64_t(blockIdx.x) * dim;
    float sum_sq = 0.f;
    for (int i = threadIdx.x; i < dim; i += kThreads) {
        float v = __bfloat162float(x[base + i]);
        if (residual) {
            const __nv_bfloat16 r = add_residual(v, __bfloat162float(residual[base + i]));
            residual_out[base + i] = r;
            v = __bfloat162float(r);
        }
        sum_sq += v * v;
    }
    const float inv_rms = rsqrtf(block_sum<kThreads>(sum_sq) / float(dim) + eps);
    for (int i = threadIdx.x; i < dim; i += kThreads) {
        const float v = __bfloat162float(residual ? residual_out[base + i] : x[base + i]);
        out[base + i] = rms_normed(v, inv_rms, __bfloat162float(w[i]));
    }
}

void launch(const __nv_bfloat16* x, const __nv_bfloat16* residual, __nv_bfloat16* residual_out,
            const __nv_bfloat16* w, int64_t rows, int64_t dim, float eps, __nv_bfloat16* out,
            cudaStream_t stream) {
    if (rows == 0) return;
    launch_kernel(add_rms_norm_kernel, unsigned(rows), kThreads, 0, stream, x, residual,
                  residual_out, w, int(dim), eps, out);
    MI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void add_rms_norm(const Tensor& x, Tensor* residual, const Tensor& weight, float eps, Tensor& out,
                  cudaStream_t stream) {
    add_rms_norm(AddRmsNorm{.delta = residual ? &x : nullptr,
                            .residual = residual ? residual : &x,
                            .residual_out = residual,
                            .weight = &weight,
                            .eps = eps,
                            .normed = &out},
                 stream);
}

void add_rms_norm(const AddRmsNorm& a, cudaStream_t stream) {
    MI_LAUNCH_CHECK(
        a.residual && a.weight && a.normed && (!a.delta || a.residual_out),
        "rms_norm: residual, weight and normed are required, and residual_out with delta");
    check_cuda_tensor(*a.weight, DType::kBF16, "rms_norm: weight", {kAnySize});
    const int64_t dim = a.weight->size(0);
    const Tensor& in = *a.residual;
    check_cuda_tensor(in, DType::kBF16, "rms_norm: x");
    check_cuda_tensor(*a.normed, DType::kBF16, "rms_norm: out");
    MI_LAUNCH_CHECK(in.ndim() >= 1 && in.size(-1) == dim && a.normed->shape() == in.shape(),
                    "rms_norm: x, out must be [rows, dim] and weight [dim]");
    if (a.delta) {
        check_cuda_tensor(*a.delta, DType::kBF16, "rms_norm: delta");
        check_cuda_tensor(*a.residual_out, DType::kBF16, "rms_norm: residual_out");
        MI_LAUNCH_CHECK(a.delta->shape() == in.shape() && a.residual_out->shape() == in.shape(),
                        "rms_norm: residual, delta and residual_out must have one shape");
    }
    // The kernel's x is what is added to (or, alone, normalised): delta, or the residual itself.
    launch(a.delta ? a.delta->data<__nv_bfloat16>() : in.data<__nv_bfloat16>(),
           a.delta ? in.data<__nv_bfloat16>() : nullptr,
           a.delta ? a.residual_out->data<__nv_bfloat16>() : nullptr,
           a.weight->data<__nv_bfloat16>(), in.numel() / dim, dim, a.eps,
           a.normed->data<__nv_bfloat16>(), stream);
}

}  // namespace miniinfer::cuda
