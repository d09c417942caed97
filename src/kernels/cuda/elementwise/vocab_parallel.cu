// Plain copies, one block per output row, 16-byte vectors where rows allow (hidden sizes and
// vocabulary shards are multiples of 8 in every Qwen model), else element by element.
#include "kernels/cuda/elementwise/vocab_parallel.h"

#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "kernels/cuda/primitives/check_tensor.h"
#include "kernels/cuda/primitives/launch.cuh"

namespace miniinfer::cuda {
namespace {

constexpr int kThreads = 128;

template <typename Vec>
__global__ void embedding_shard_kernel(const int32_t* __restrict__ ids,
                                       const Vec* __restrict__ table, int64_t vocab_begin,
                                       int64_t shard_rows, int64_t row_vecs,
                                       Vec* __restrict__ out) {
    pdl_wait();
    pdl_trigger();
    const int64_t id = int64_t(ids[blockIdx.x]) - vocab_begin;
    Vec* dst = out + int64_t(blockIdx.x) * row_vecs;
    if (id < 0 || id >= shard_rows) {
        for (int64_t i = threadIdx.x; i < row_vecs; i += kThreads) dst[i] = Vec{};
        return;
    }
    const Vec* src = table + id * row_vecs;
    for (int64_t i = threadIdx.x; i < row_vecs; i += kThreads) dst[i] = src[i];
}

// Grid: (rows, world). Block (i, r) copies rank r's row i into its place.
template <typename Vec>
__global__ void interleave_kernel(const Vec* __restrict__ gathered, int64_t rows, int64_t col_vecs,
                                  Vec* __restrict__ out) {
    pdl_wait();
    pdl_trigger();
    const int64_t i = blockIdx.x, r = blockIdx.y;
    const Vec* src = gathered + (r * rows + i) * col_vecs;
    Vec* dst = out + (i * gridDim.y + r) * col_vecs;
    for (int64_t j = threadIdx.x; j < col_vecs; j += kThreads) dst[j] = src[j];
}

}  // namespace

void embedding_shard(const Tensor& ids, const Tensor& table, int64_t vocab_begin, Tensor& out,
                     cudaStream_t stream) {
    check_cuda_tensor(table, DType::kBF16, "embedding_shard: table", {kAnySize, kAnySize});
    check_cuda_tensor(ids, DType::kI32, "embedding_shard: ids", {kAnySize});
    const int64_t n = ids.size(0), rows = table.size(0), d = table.size(1);
    check_cuda_tensor(out, DType::kBF16, "embedding_shard: out", {n, d});
    if (n == 0 || d == 0) return;
    MI_LAUNCH_CHECK(n <= INT32_MAX && vocab_begin >= 0, "embedding_shard: bad shape");
    if (d % 8 == 0 && aligned16(table.raw()) && aligned16(out.raw()))
        launch_kernel(embedding_shard_kernel<uint4>, unsigned(n), kThreads, 0, stream,
                      ids.data<int32_t>(), table.data<uint4>(), vocab_begin, rows, d / 8,
                      out.data<uint4>());
    else
        launch_kernel(embedding_shard_kernel<uint16_t>, unsigned(n), kThreads, 0, stream,
                      ids.data<int32_t>(), table.data<uint16_t>(), vocab_begin, rows, d,
                      out.data<uint16_t>());
    MI_CUDA_CHECK(cudaGetLastError());
}

void interleave_rank_blocks(const Tensor& gathered, int64_t world, Tensor& out,
                            cudaStream_t stream) {
    const DType dt = out.dtype() == DType::kF32 ? DType::kF32 : DType::kBF16;
    check_cuda_tensor(out, dt, "interleave_rank_blocks: out", {kAnySize, kAnySize});
    const int64_t rows = out.size(0), width = out.size(1);
    MI_LAUNCH_CHECK(world >= 1 && width % world == 0 && world <= 65535,
                    "interleave_rank_blocks: the columns must split evenly over the ranks");
    check_cuda_tensor(gathered, dt, "interleave_rank_blocks: gathered", {rows * width});
    if (rows == 0 || width == 0) return;
    const int64_t cols = width / world, row_bytes = cols * int64_t(dtype_size(dt));
    const dim3 grid{unsigned(rows), unsigned(world)};
    if (row_bytes % 16 == 0 && aligned16(gathered.raw()) && aligned16(out.raw()))
        launch_kernel(interleave_kernel<uint4>, grid, kThreads, 0, stream, gathered.data<uint4>(),
                      rows, row_bytes / 16, out.data<uint4>());
    else if (dt == DType::kF32)
        launch_kernel(interleave_kernel<uint32_t>, grid, kThreads, 0, stream,
                      gathered.data<uint32_t>(), rows, cols, out.data<uint32_t>());
    else
        launch_kernel(interleave_kernel<uint16_t>, grid, kThreads, 0, stream,
                      gathered.data<uint16_t>(), rows, cols, out.data<uint16_t>());
    MI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace miniinfer::cuda
