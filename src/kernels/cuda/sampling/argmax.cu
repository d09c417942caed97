// Greedy sampling (argmax of each row, the first on ties) and the overlap loop's placeholder
// resolution (sampling.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "kernels/cuda/primitives/check_tensor.h"
#include "kernels/cuda/primitives/launch.cuh"
#include "kernels/cuda/sampling/sampling.cuh"
#include "kernels/cuda/sampling/sampling.h"

namespace miniinfer::cuda {
namespace {

using namespace sampling_detail;

__global__ void __launch_bounds__(kThreads)
    argmax_kernel(const float* logits, int vocab, int32_t* tokens) {
    pdl_wait();
    pdl_trigger();
    __shared__ ArgMax slots[kWarps];
    const float* row = logits + int64_t(blockIdx.x) * vocab;
    ArgMax best = {neg_inf(), INT_MAX};
    for_each(
        vocab, [row](int i) { return __ldg(row + i); },
        [&](int i, bool valid, float x) {
            if (valid) best.update(x, i);
        });
    best = block_combine(best, slots);
    if (threadIdx.x == 0) tokens[blockIdx.x] = best.idx;
}

// argmax_kernel for rows of 16-byte aligned float4 (vocab % 4 == 0, an aligned base): 16-byte
// loads, kVecUnroll of them in flight a thread, four times the bytes of the scalar loop's pass.
// At 256 rows of 151,936 (a decode step's logits) one block a row streams 607 KB with two blocks
// on most SMs, so the bytes in flight an SM set its time: 57.9 -> 48.8 us on the H200.
constexpr int kVecUnroll = 8;
__global__ void __launch_bounds__(kThreads)
    argmax_vec_kernel(const float* logits, int vocab, int32_t* tokens) {
    pdl_wait();
    pdl_trigger();
    __shared__ ArgMax slots[kWarps];
    const auto* row = reinterpret_cast<const float4*>(logits + int64_t(blockIdx.x) * vocab);
    const int vecs = vocab / 4;
    ArgMax best = {neg_inf(), INT_MAX};
    for (int base = int(threadIdx.x); base < vecs; base += kThreads * kVecUnroll) {
        float4 x[kVecUnroll];
#pragma unroll
        for (int k = 0; k < kVecUnroll; ++k) {
            const int v = base + k * kThreads;
            if (v < vecs) x[k] = __ldg(row + v);
        }
#pragma unroll
        for (int k = 0; k < kVecUnroll; ++k) {
            const int v = base + k * kThreads;
            if (v >= vecs) break;
            best.update(x[k].x, 4 * v);
            best.update(x[k].y, 4 * v + 1);
            best.update(x[k].z, 4 * v + 2);
            best.update(x[k].w, 4 * v + 3);
        }
    }
    best = block_combine(best, slots);
    if (threadIdx.x == 0) tokens[blockIdx.x] = best.idx;
}

// Few rows: grid (chunks, rows), block c of row r takes ids [c * chunk_len, ...). Each block
// parks its (max, first id) in partials[r][c] and counts itself done in counts[r]; the row's
// last block (the one that counts chunks) reads every partial, writes the token and resets the
// count for the next call. The result is the single-block kernel's: "greater, or equal with a
// lower id" picks the same winner in any order.
constexpr int kArgmaxMaxChunks = 32;

__global__ void __launch_bounds__(kThreads)
    argmax_split_kernel(const float* logits, int vocab, int chunk_len, ArgMax* partials,
                        unsigned* counts, int32_t* tokens) {
    pdl_wait();
    pdl_trigger();
    __shared__ ArgMax slots[kWarps];
    __shared__ bool last;
    const int row = int(blockIdx.y), chunk = int(blockIdx.x), chunks = int(gridDim.x);
    const int begin = chunk * chunk_len, len = max(0, min(chunk_len, vocab - begin));
    const float* slice = logits + int64_t(row) * vocab + begin;
    ArgMax best = {neg_inf(), INT_MAX};
    for_each(
        len, [slice](int i) { return __ldg(slice + i); },
        [&](int i, bool valid, float x) {
            if (valid) best.update(x, begin + i);
        });
    best = block_combine(best, slots);
    ArgMax* row_partials = partials + int64_t(row) * kArgmaxMaxChunks;
    if (threadIdx.x == 0) {
        row_partials[chunk] = best;
        __threadfence();  // the partial before the count that announces it
        last = atomicAdd(&counts[row], 1u) == unsigned(chunks - 1);
    }
    __syncthreads();
    if (!last || threadIdx.x != 0) return;
    __threadfence();
    ArgMax r = {neg_inf(), INT_MAX};
    for (int c = 0; c < chunks; ++c)  // L2 reads: other blocks wrote them
        r.update(__ldcg(&row_partials[c].value), __ldcg(&row_partials[c].idx));
    tokens[row] = r.idx;
    counts[row] = 0;
}

}  // namespace

size_t argmax_workspace_bytes(int64_t rows) {
    const int64_t split_rows = std::min<int64_t>(rows, kArgmaxSplitRows);
    return size_t(split_rows) * (kArgmaxMaxChunks * sizeof(ArgMax) + sizeof(unsigned));
}

void argmax(const Tensor& logits, Tensor& tokens, cudaStream_t stream, void* workspace,
            size_t workspace_bytes) {
    MI_LAUNCH_CHECK(is_cuda_tensor(logits, DType::kF32) && logits.ndim() == 2,
                    "argmax: logits must be a contiguous [rows, vocab] f32 CUDA tensor");
    const int64_t rows = logits.size(0), vocab = logits.size(1);
    MI_LAUNCH_CHECK(vocab > 0 && vocab < INT_MAX, "argmax: vocab must be in [1, 2^31)");
    MI_LAUNCH_CHECK(is_cuda_tensor(tokens, DType::kI32) && tokens.numel() == rows,
                    "argmax: tokens must be [rows] i32 CUDA");
    if (rows == 0) return;
    if (workspace && rows < kArgmaxSplitRows && workspace_bytes >= argmax_workspace_bytes(rows)) {
        // About two blocks an SM across the rows, each at least one pass of the block's loads.
        constexpr int64_t kMinChunk = int64_t(kThreads) * kUnroll;
        static const int64_t blocks_wanted = 2 * int64_t(sm_count());
        const int64_t chunks =
            std::clamp<int64_t>(std::min<int64_t>((blocks_wanted + rows - 1) / rows,
                                                  (vocab + kMinChunk - 1) / kMinChunk),
                                1, kArgmaxMaxChunks);
        const int64_t chunk_len = (vocab + chunks - 1) / chunks;
        auto* partials = static_cast<ArgMax*>(workspace);
        auto* counts = reinterpret_cast<unsigned*>(partials + rows * kArgmaxMaxChunks);
        launch_kernel(argmax_split_kernel, dim3(unsigned(chunks), unsigned(rows)), kThreads, 0,
                      stream, logits.data<float>(), int(vocab), int(chunk_len), partials, counts,
                      tokens.data<int32_t>());
        MI_CUDA_CHECK(cudaGetLastError());
        return;
    }
    const bool vec = vocab % 4 == 0 && reinterpret_cast<uintptr_t>(logits.raw()) % 16 == 0;
    launch_kernel(vec ? argmax_vec_kernel : argmax_kernel, unsigned(rows), kThreads, 0, stream,
                  logits.data<float>(), int(vocab), tokens.data<int32_t>());
    MI_CUDA_CHECK(cudaGetLastError());
}

namespace {
__global__ void resolve_placeholders_kernel(int32_t* ids, int n, const int32_t* sampled) {
    pdl_wait();
    pdl_trigger();
    const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n && ids[i] < 0) ids[i] = sampled[-(ids[i] + 1)];
}
}  // namespace

void resolve_placeholders(Tensor& ids, const Tensor& sampled, cudaStream_t stream) {
    MI_LAUNCH_CHECK(is_cuda_tensor(ids, DType::kI32) && ids.ndim() == 1,
                    "resolve_placeholders: ids must be [n] i32 CUDA");
    MI_LAUNCH_CHECK(is_cuda_tensor(sampled, DType::kI32) && sampled.ndim() == 1,
                    "resolve_placeholders: sampled must be [rows] i32 CUDA");
    const int64_t n = ids.numel();
    if (n == 0) return;
    constexpr int kBlock = 256;
    launch_kernel(resolve_placeholders_kernel, unsigned((n + kBlock - 1) / kBlock), kBlock, 0,
                  stream, ids.data<int32_t>(), int(n), sampled.data<int32_t>());
    MI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace miniinfer::cuda
