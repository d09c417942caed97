// Penalties: one block per penalised row (a fixed grid loops over the rows), touching only the
// listed ids, so a step costs what its token lists weigh, not rows x vocab (except a row with
// allowed ids: its mask writes the whole row).
//
// "Each distinct token once" is a bitmap of the vocabulary in shared memory (151,936 bits are
// 19 KB): the thread whose atomicOr sets a token's bit owns that token for the pass. Output
// counts go to a per-block int array in global memory; only the listed ids are zeroed and
// counted, so the array needs no clearing between rows or launches. The allowed ids are marked
// in the same bitmap before the penalties use it.
#include "kernels/cuda/sampling/penalties.h"

#include <climits>

#include "core/cuda/cuda_check.h"
#include "kernels/cuda/primitives/check_tensor.h"
#include "kernels/cuda/primitives/launch.cuh"

namespace miniinfer::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 32;  // rows are light; the grid bounds the count workspace
constexpr size_t kDefaultSharedBytes = 48 * 1024;

__device__ __forceinline__ bool claim(uint32_t* bits, int32_t id) {
    const uint32_t bit = 1u << (id & 31);
    return (atomicOr(&bits[id >> 5], bit) & bit) == 0;
}

__device__ __forceinline__ float neg_inf() {
    return __int_as_float(int(0xff800000u));
}

// The steps before the penalties: -inf outside the allowed ids, -inf for the banned ids, then
// the biases. Leaves the bitmap in any state; ends with a barrier.
__device__ void apply_masks_and_bias(float* x, int vocab, const int32_t* token_ids,
                                     const int32_t* seg, uint32_t* seen) {
    const int num_words = (vocab + 31) / 32;
    const int allowed_begin = seg[kAllowedIds], bias_begin = seg[kBiasPairs],
              bias_end = seg[kNumPenaltySegments];
    if (allowed_begin < bias_begin) {  // block-uniform
        for (int w = threadIdx.x; w < num_words; w += kThreads) seen[w] = 0;
        __syncthreads();
        for (int k = allowed_begin + threadIdx.x; k < bias_begin; k += kThreads)
            claim(seen, token_ids[k]);
        __syncthreads();
        for (int i = threadIdx.x; i < vocab; i += kThreads)
            if (!((seen[i >> 5] >> (i & 31)) & 1u)) x[i] = neg_inf();
        __syncthreads();
    }
    for (int k = seg[kBannedIds] + threadIdx.x; k < allowed_begin; k += kThreads)
        x[token_ids[k]] = neg_inf();
    __syncthreads();
    // The thread at the first entry of an id adds all of its biases, one by one in list order:
    // the CPU's float sums.
    for (int k = bias_begin + 2 * threadIdx.x; k < bias_end; k += 2 * kThreads) {
        const int32_t id = token_ids[k];
        if (k > bias_begin && token_ids[k - 2] == id) continue;
        float v = x[id];
        for (int m = k; m < bias_end && token_ids[m] == id; m += 2)
            v += __int_as_float(token_ids[m + 1]);
        x[id] = v;
    }
    __syncthreads();
}

__global__ void __launch_bounds__(kThreads)
    penalties_kernel(float* logits, int vocab, const RowPenalties* params, int num_rows,
                     const int32_t* segment_start, const int32_t* token_ids, int32_t* counts_ws) {
    pdl_wait();
    pdl_trigger();
    extern __shared__ uint32_t seen[];  // [ceil(vocab / 32)] bitmap
    const int num_words = (vocab + 31) / 32;
    int32_t* counts = counts_ws + int64_t(blockIdx.x) * vocab;  // [vocab], this block's
    for (int j = blockIdx.x; j < num_rows; j += gridDim.x) {
        const RowPenalties p = params[j];
        float* x = logits + int64_t(p.row) * vocab;
        const int32_t* seg = segment_start + kNumPenaltySegments * j;
        const int prompt_begin = seg[kPromptIds], output_begin = seg[kOutputIds],
                  mask_begin = seg[kMaskedIds], mask_end = seg[kBannedIds];
        const bool repetition = p.repetition_penalty != 1.f;
        const bool additive = p.frequency_penalty != 0.0 || p.presence_penalty != 0.0;

        apply_masks_and_bias(x, vocab, token_ids, seg, seen);
        for (int w = threadIdx.x; w < num_words; w += kThreads) seen[w] = 0;
        if (additive)
            for (int k = output_begin + threadIdx.x; k < mask_begin; k += kThreads)
                counts[token_ids[k]] = 0;
        __syncthreads();
        if (repetition)
            for (int k = prompt_begin + threadIdx.x; k < mask_begin; k += kThreads) {
                const int32_t id = token_ids[k];
                if (claim(seen, id)) {
                    const float v = x[id];
                    x[id] = v > 0.f ? v / p.repetition_penalty : v * p.repetition_penalty;
                }
            }
        if (additive) {
            for (int k = output_begin + threadIdx.x; k < mask_begin; k += kThreads)
                atomicAdd(&counts[token_ids[k]], 1);
            __syncthreads();  // the repetition pass is done with the bitmap; counts complete
            for (int w = threadIdx.x; w < num_words; w += kThreads) seen[w] = 0;
            __syncthreads();
            for (int k = output_begin + threadIdx.x; k < mask_begin; k += kThreads) {
                const int32_t id = token_ids[k];
                if (claim(seen, id))
                    x[id] -= float(p.frequency_penalty * double(counts[id]) + p.presence_penalty);
            }
        }
        __syncthreads();  // masking comes last: an id may also be penalised above
        for (int k = mask_begin + threadIdx.x; k < mask_end; k += kThreads)
            x[token_ids[k]] = neg_inf();
        __syncthreads();  // the next row clears the bitmap
    }
}

}  // namespace

size_t penalties_workspace_bytes(int64_t vocab) {
    return size_t(kMaxBlocks) * size_t(vocab) * sizeof(int32_t);
}

void apply_penalties(Tensor& logits, const Tensor& params, const Tensor& segment_start,
                     const Tensor& token_ids, void* workspace, size_t workspace_bytes,
                     cudaStream_t stream) {
    MI_LAUNCH_CHECK(is_cuda_tensor(logits, DType::kF32) && logits.ndim() == 2,
                    "apply_penalties: logits must be a contiguous [rows, vocab] f32 CUDA tensor");
    const int64_t vocab = logits.size(1);
    MI_LAUNCH_CHECK(vocab > 0 && vocab < INT_MAX, "apply_penalties: vocab must be in [1, 2^31)");
    MI_LAUNCH_CHECK(params.device() == Device::kCUDA && params.is_contiguous() &&
                        params.nbytes() % sizeof(RowPenalties) == 0,
                    "apply_penalties: params must hold n RowPenalties structs on the GPU");
    const int64_t n = int64_t(params.nbytes() / sizeof(RowPenalties));
    MI_LAUNCH_CHECK(n <= logits.size(0), "apply_penalties: more penalised rows than logits rows");
    MI_LAUNCH_CHECK(is_cuda_tensor(segment_start, DType::kI32) && segment_start.ndim() == 1 &&
                        segment_start.numel() == kNumPenaltySegments * n + 1,
                    "apply_penalties: segment_start must be [kNumPenaltySegments n + 1] i32 CUDA");
    MI_LAUNCH_CHECK(
        token_ids.numel() == 0 || (is_cuda_tensor(token_ids, DType::kI32) && token_ids.ndim() == 1),
        "apply_penalties: token_ids must be [num_ids] i32 CUDA");
    MI_LAUNCH_CHECK(workspace != nullptr && workspace_bytes >= penalties_workspace_bytes(vocab),
                    "apply_penalties: workspace smaller than penalties_workspace_bytes()");
    if (n == 0) return;
    const size_t shared_bytes = size_t((vocab + 31) / 32) * sizeof(uint32_t);
    if (shared_bytes > kDefaultSharedBytes)  // vocabularies over 393,216 tokens
        MI_CUDA_CHECK(cudaFuncSetAttribute(
            penalties_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared_bytes)));
    const int blocks = int(n < kMaxBlocks ? n : kMaxBlocks);
    launch_kernel(penalties_kernel, blocks, kThreads, shared_bytes, stream, logits.data<float>(),
                  int(vocab), static_cast<const RowPenalties*>(params.raw()), int(n),
                  segment_start.data<int32_t>(),
                  token_ids.numel() > 0 ? token_ids.data<int32_t>() : nullptr,
                  static_cast<int32_t*>(workspace));
    MI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace miniinfer::cuda
