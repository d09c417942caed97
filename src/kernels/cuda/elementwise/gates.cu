// The sigmoid gates (see gates.h): memory-bound elementwise kernels, one bf16 per thread and
// iteration; the shared expert's gate is a block's dot product over its token's row first.
#include "kernels/cuda/elementwise/gates.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "kernels/cuda/primitives/check_tensor.h"
#include "kernels/cuda/primitives/launch.cuh"
#include "kernels/cuda/primitives/reduce.cuh"

namespace miniinfer::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid_bf16(float x) {
    return __bfloat162float(__float2bfloat16(1.f / (1.f + __expf(-x))));
}

// Grid-stride over n · d elements.
__global__ void mul_sigmoid_kernel(__nv_bfloat16* __restrict__ out, int64_t n, int64_t d,
                                   const __nv_bfloat16* __restrict__ gate, int64_t gate_stride) {
    pdl_wait();
    pdl_trigger();
    for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n * d;
         i += int64_t(gridDim.x) * kThreads) {
        const int64_t t = i / d, c = i % d;
        const float g = sigmoid_bf16(__bfloat162float(gate[t * gate_stride + c]));
        out[i] = __float2bfloat16(__bfloat162float(out[i]) * g);
    }
}

// A block per token.
__global__ void __launch_bounds__(kThreads)
    shared_expert_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                         const __nv_bfloat16* __restrict__ shared, __nv_bfloat16* __restrict__ y,
                         int64_t hidden) {
    __shared__ float warp_sums[kThreads / 32];
    pdl_wait();
    pdl_trigger();
    const int64_t row = int64_t(blockIdx.x) * hidden;
    float dot = 0.f;
    for (int64_t i = threadIdx.x; i < hidden; i += kThreads)
        dot = fmaf(__bfloat162float(x[row + i]), __bfloat162float(w[i]), dot);
    dot = warp_sum(dot);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = dot;
    __syncthreads();
    float total = 0.f;
#pragma unroll
    for (int i = 0; i < kThreads / 32; ++i) total += warp_sums[i];
    const float g = sigmoid_bf16(__bfloat162float(__float2bfloat16(total)));
    for (int64_t i = threadIdx.x; i < hidden; i += kThreads) {
        const float s = __bfloat162float(__float2bfloat16(g * __bfloat162float(shared[row + i])));
        y[row + i] = __float2bfloat16(__bfloat162float(y[row + i]) + s);
    }
}

}  // namespace

void mul_sigmoid(Tensor& out, const Tensor& gate, int64_t gate_col, cudaStream_t stream) {
    check_cuda_tensor(out, DType::kBF16, "mul_sigmoid: out", {kAnySize, kAnySize});
    const int64_t n = out.size(0), d = out.size(1);
    check_cuda_tensor(gate, DType::kBF16, "mul_sigmoid: gate", {n, kAnySize});
    MI_LAUNCH_CHECK(gate_col >= 0 && gate_col + d <= gate.size(1),
                    "mul_sigmoid: the gates lie past gate's columns");
    if (n == 0 || d == 0) return;
    const int64_t blocks = std::min<int64_t>((n * d + kThreads - 1) / kThreads, 132 * 16);
    launch_kernel(mul_sigmoid_kernel, unsigned(blocks), kThreads, 0, stream,
                  out.data<__nv_bfloat16>(), n, d, gate.data<__nv_bfloat16>() + gate_col,
                  gate.size(1));
    MI_CUDA_CHECK(cudaGetLastError());
}

void add_gated_shared_expert(const Tensor& x, const Tensor& gate_weight, const Tensor& shared,
                             Tensor& y, cudaStream_t stream) {
    check_cuda_tensor(x, DType::kBF16, "add_gated_shared_expert: x", {kAnySize, kAnySize});
    const int64_t n = x.size(0), hidden = x.size(1);
    check_cuda_tensor(gate_weight, DType::kBF16, "add_gated_shared_expert: gate_weight", {hidden});
    check_cuda_tensor(shared, DType::kBF16, "add_gated_shared_expert: shared", {n, hidden});
    check_cuda_tensor(y, DType::kBF16, "add_gated_shared_expert: y", {n, hidden});
    if (n == 0) return;
    launch_kernel(shared_expert_kernel, unsigned(n), kThreads, 0, stream, x.data<__nv_bfloat16>(),
                  gate_weight.data<__nv_bfloat16>(), shared.data<__nv_bfloat16>(),
                  y.data<__nv_bfloat16>(), hidden);
    MI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace miniinfer::cuda
