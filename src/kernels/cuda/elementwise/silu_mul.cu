// out = bf16(silu(g) * u) with g, u read from one [n, 2 * inter] row (gate half, up half).
// Bandwidth-bound: each thread handles kVec consecutive outputs so that the loads of g and u
// and the store are 16-byte vectors when inter % 8 == 0 (every real model), scalar otherwise.
// The arithmetic itself (silu_mul_bf16) lives in silu_mul.cuh: the grouped GEMM's fused epilogue
// must give the same bits.
#include "kernels/cuda/elementwise/silu_mul.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "kernels/cuda/elementwise/silu_mul.cuh"
#include "kernels/cuda/primitives/check_tensor.h"
#include "kernels/cuda/primitives/launch.cuh"

namespace miniinfer::cuda {
namespace {

constexpr int kThreads = 256;

template <int kVec>
struct alignas(2 * kVec) BF16Vec {
    __nv_bfloat16 v[kVec];
};

// gate_up: [n, 2 * inter]; out: [n, inter]; rows_used: null, or how many rows (from the first)
// to process, read on the device. One thread per kVec outputs; grid-stride.
template <int kVec>
__global__ void silu_mul_kernel(const __nv_bfloat16* __restrict__ gate_up, int64_t n, int64_t inter,
                                const int32_t* __restrict__ rows_used,
                                __nv_bfloat16* __restrict__ out) {
    pdl_wait();
    pdl_trigger();
    using Vec = BF16Vec<kVec>;
    const int64_t vecs_per_row = inter / kVec;
    const int64_t rows = rows_used ? min(n, int64_t(*rows_used)) : n;
    const int64_t total = rows * vecs_per_row;
    for (int64_t idx = int64_t(blockIdx.x) * kThreads + threadIdx.x; idx < total;
         idx += int64_t(gridDim.x) * kThreads) {
        const int64_t t = idx / vecs_per_row, col = (idx % vecs_per_row) * kVec;
        const Vec g = *reinterpret_cast<const Vec*>(gate_up + t * 2 * inter + col);
        const Vec u = *reinterpret_cast<const Vec*>(gate_up + t * 2 * inter + inter + col);
        Vec o;
#pragma unroll
        for (int j = 0; j < kVec; ++j) o.v[j] = silu_mul_bf16(g.v[j], u.v[j]);
        *reinterpret_cast<Vec*>(out + t * inter + col) = o;
    }
}

template <int kVec>
void launch(const Tensor& gate_up, int64_t n, int64_t inter, const int32_t* rows_used, Tensor& out,
            cudaStream_t stream) {
    const int64_t threads_needed = n * (inter / kVec);
    // Enough blocks to fill the GPU several times over; the grid-stride loop covers the rest.
    const int64_t blocks = std::min<int64_t>((threads_needed + kThreads - 1) / kThreads, 132 * 32);
    launch_kernel(silu_mul_kernel<kVec>, unsigned(blocks), kThreads, 0, stream,
                  gate_up.data<__nv_bfloat16>(), n, inter, rows_used, out.data<__nv_bfloat16>());
}

}  // namespace

void silu_mul(const Tensor& gate_up, Tensor& out, cudaStream_t stream, const int32_t* rows_used) {
    check_cuda_tensor(gate_up, DType::kBF16, "silu_mul: gate_up", {kAnySize, kAnySize});
    MI_LAUNCH_CHECK(gate_up.size(1) % 2 == 0, "silu_mul: gate_up must be [n, 2 * inter]");
    const int64_t n = gate_up.size(0), inter = gate_up.size(1) / 2;
    check_cuda_tensor(out, DType::kBF16, "silu_mul: out", {n, inter});
    if (n == 0 || inter == 0) return;

    const bool aligned = reinterpret_cast<uintptr_t>(gate_up.raw()) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(out.raw()) % 16 == 0;
    if (inter % 8 == 0 && aligned)
        launch<8>(gate_up, n, inter, rows_used, out, stream);
    else
        launch<1>(gate_up, n, inter, rows_used, out, stream);
    MI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace miniinfer::cuda
