// out[i] = x[rows[i]] for bf16 rows: a pure copy, so the only thing that matters is moving
// bytes in wide transactions. One block per output row; rows whose length and both base
// addresses allow it move as 16-byte (8 × bf16) vectors, others element by element.
#include "kernels/cuda/elementwise/gather_rows.h"

#include <cuda_bf16.h>

#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "kernels/cuda/primitives/check_tensor.h"
#include "kernels/cuda/primitives/launch.cuh"

namespace miniinfer::cuda {
namespace {

constexpr int kThreads = 128;

// x: [n, d / kVec] of Vec; rows: [m]; out: [m, d / kVec] of Vec. Grid: m blocks.
template <typename Vec>
__global__ void gather_rows_kernel(const Vec* __restrict__ x, const int32_t* __restrict__ rows,
                                   int64_t row_vecs, Vec* __restrict__ out) {
    pdl_wait();
    pdl_trigger();
    const Vec* src = x + int64_t(rows[blockIdx.x]) * row_vecs;
    Vec* dst = out + int64_t(blockIdx.x) * row_vecs;
    for (int64_t i = threadIdx.x; i < row_vecs; i += kThreads) dst[i] = src[i];
}

}  // namespace

void gather_rows(const Tensor& x, const Tensor& rows, Tensor& out, cudaStream_t stream) {
    check_cuda_tensor(x, DType::kBF16, "gather_rows: x", {kAnySize, kAnySize});  // [n, d]
    check_cuda_tensor(rows, DType::kI32, "gather_rows: rows", {kAnySize});       // [m]
    const int64_t m = rows.size(0), d = x.size(1);
    check_cuda_tensor(out, DType::kBF16, "gather_rows: out", {m, d});
    if (m == 0 || d == 0) return;
    MI_LAUNCH_CHECK(m <= INT32_MAX, "gather_rows: too many rows for one grid");

    if (d % 8 == 0 && aligned16(x.raw()) && aligned16(out.raw())) {
        launch_kernel(gather_rows_kernel<uint4>, unsigned(m), kThreads, 0, stream, x.data<uint4>(),
                      rows.data<int32_t>(), d / 8, out.data<uint4>());
    } else {
        launch_kernel(gather_rows_kernel<uint16_t>, unsigned(m), kThreads, 0, stream,
                      x.data<uint16_t>(), rows.data<int32_t>(), d, out.data<uint16_t>());
    }
    MI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace miniinfer::cuda
