// One thread a mask word: a word of all ones (most words inside a JSON string) writes nothing,
// so the kernel costs little more than reading n * vocab / 8 bytes of masks.
#include "kernels/cuda/sampling/token_bitmask.h"

#include "core/cuda/cuda_check.h"
#include "kernels/cuda/primitives/check_tensor.h"
#include "kernels/cuda/primitives/launch.cuh"

namespace miniinfer::cuda {
namespace {

__global__ void apply_token_bitmask_kernel(float* __restrict__ logits,             // [rows, vocab]
                                           const uint32_t* __restrict__ bitmask,   // [n, words]
                                           const int32_t* __restrict__ mask_rows,  // [n]
                                           int64_t vocab, int64_t num_words) {
    pdl_wait();
    pdl_trigger();
    const int64_t word_idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (word_idx >= num_words) return;
    const uint32_t allowed = bitmask[int64_t(blockIdx.y) * num_words + word_idx];
    if (allowed == ~0u) return;
    float* row = logits + int64_t(mask_rows[blockIdx.y]) * vocab;
    const int64_t first = word_idx * 32;
    const int num_bits = vocab - first < 32 ? int(vocab - first) : 32;
    for (int b = 0; b < num_bits; ++b)
        if (!((allowed >> b) & 1u)) row[first + b] = -INFINITY;
}

}  // namespace

void apply_token_bitmask(Tensor& logits, const Tensor& bitmask, const Tensor& mask_rows,
                         cudaStream_t stream) {
    check_cuda_tensor(logits, DType::kF32, "apply_token_bitmask: logits", {kAnySize, kAnySize});
    const int64_t vocab = logits.size(1);
    const int64_t num_words = (vocab + 31) / 32;
    check_cuda_tensor(bitmask, DType::kI32, "apply_token_bitmask: bitmask", {kAnySize, num_words});
    const int64_t n = bitmask.size(0);
    check_cuda_tensor(mask_rows, DType::kI32, "apply_token_bitmask: mask_rows", {n});
    if (n == 0) return;
    const int threads = 256;
    const dim3 grid(unsigned((num_words + threads - 1) / threads), unsigned(n));
    launch_kernel(apply_token_bitmask_kernel, grid, threads, 0, stream,
                  static_cast<float*>(logits.raw()), static_cast<const uint32_t*>(bitmask.raw()),
                  static_cast<const int32_t*>(mask_rows.raw()), vocab, num_words);
    MI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace miniinfer::cuda
