// Fused residual-add + RMSNorm over bf16 rows, fp32 arithmetic.
//
//   residual_out = residual + x (stored in bf16, as a bf16 model's residual stream is; in place
//   or into the other of two buffers);
//   out = w * bf16(residual_out / sqrt(mean(residual_out²) + eps))
// The rounding points (rms_norm.cuh) follow Hugging Face's Qwen2RMSNorm on bf16 tensors. One block
// per row: a row (hidden_size ≤ a few thousand) fits in registers across the block's threads.
//
// Rows of up to 8,192 elements, a multiple of 8, with 16-byte aligned tensors take
// add_rms_norm_vec_kernel: each thread holds kVecs 16-byte vectors of the row in registers (no
// second read of the row), and loads its weights before the PDL wait (only copies write them).
// At decode sizes the kernel is latency-bound: on the H200 the scalar kernel took 4.1 µs a call
// for 256 rows of 1,024 (0.6B balanced profile), for 2 MB of traffic. Others take the scalar
// add_rms_norm_kernel.
#include "kernels/cuda/norm/rms_norm.h"

#include <cuda_bf16.h>

#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "kernels/cuda/norm/rms_norm.cuh"
#include "kernels/cuda/primitives/check_tensor.h"
#include "kernels/cuda/primitives/launch.cuh"
#include "kernels/cuda/primitives/reduce.cuh"

namespace miniinfer::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kVecElems = 8;  // bf16 in a 16-byte vector

// As add_rms_norm_kernel with the row in registers: thread t holds vectors t + j * kBlock (j <
// kVecs) of its row; dim % 8 == 0, dim <= 8 * kVecs * kBlock, pointers 16-byte aligned.
template <int kBlock, int kVecs>
__global__ void __launch_bounds__(kBlock)
    add_rms_norm_vec_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* residual,
                            __nv_bfloat16* residual_out, const __nv_bfloat16* __restrict__ w,
                            int dim, float eps, __nv_bfloat16* __restrict__ out) {
    const int num_vecs = dim / kVecElems;
    const auto* w_vecs = reinterpret_cast<const uint4*>(w);
    uint4 w_reg[kVecs];
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
        const int v = int(threadIdx.x) + j * kBlock;
        w_reg[j] = v < num_vecs ? __ldg(w_vecs + v) : uint4{};
    }
    pdl_wait();
    pdl_trigger();
    const int64_t row = int64_t(blockIdx.x) * num_vecs;
    const auto* x_vecs = reinterpret_cast<const uint4*>(x) + row;
    uint4 vals[kVecs] = {};
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
        const int v = int(threadIdx.x) + j * kBlock;
        if (v >= num_vecs) continue;
        vals[j] = x_vecs[v];
        if (residual) {
            vals[j] = add_residual_x8(vals[j], reinterpret_cast<const uint4*>(residual)[row + v]);
            reinterpret_cast<uint4*>(residual_out)[row + v] = vals[j];
        }
    }
    float sum_sq = 0.f;
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
        if (int(threadIdx.x) + j * kBlock >= num_vecs) continue;
        float f[8];
        unpack_bf16x8(vals[j], f);
#pragma unroll
        for (int e = 0; e < 8; ++e) sum_sq += f[e] * f[e];
    }
    const float inv_rms = rsqrtf(block_sum<kBlock>(sum_sq) / float(dim) + eps);
    auto* out_vecs = reinterpret_cast<uint4*>(out) + row;
#pragma unroll
    for (int j = 0; j < kVecs; ++j) {
        const int v = int(threadIdx.x) + j * kBlock;
        if (v < num_vecs) out_vecs[v] = rms_normed_x8(vals[j], inv_rms, w_reg[j]);
    }
}

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
    // The vector kernel where rows allow it; the scalar one for misaligned or longer rows
    // (bench/RESULTS.md#norm-vec).
    const bool vec = dim % kVecElems == 0 && aligned16(x) && aligned16(w) && aligned16(out) &&
                     (!residual || (aligned16(residual) && aligned16(residual_out)));
    const int64_t vecs = dim / kVecElems;
    const auto run = [&](auto kernel, int block) {
        launch_kernel(kernel, unsigned(rows), block, 0, stream, x, residual, residual_out, w,
                      int(dim), eps, out);
    };
    if (vec && vecs <= 128)
        run(add_rms_norm_vec_kernel<128, 1>, 128);
    else if (vec && vecs <= 256)
        run(add_rms_norm_vec_kernel<256, 1>, 256);
    else if (vec && vecs <= 512)
        run(add_rms_norm_vec_kernel<256, 2>, 256);
    else if (vec && vecs <= 1024)
        run(add_rms_norm_vec_kernel<256, 4>, 256);
    else
        run(add_rms_norm_kernel, kThreads);
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
