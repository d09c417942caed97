// Sampling on the GPU with the CPU reference sampler's semantics (layers/sampler.h): penalties →
// min_tokens masking → greedy argmax, or / temperature → min_p → top_k → top_p → one Philox draw
// per (seed, step). Given the same inputs it picks the CPU sampler's token, except when a
// floating-point sum lands exactly on a top_p or draw boundary (the sums run in another order).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace miniinfer::cuda {

// Per-row sampling parameters, uploaded once per step (plain struct, 56 bytes).
// Float fields: the CPU sampler works with the double in SamplingParams; both agree exactly
// when that double is a float (otherwise only as closely as the float rounding allows).
struct RowSampling {
    float temperature;  // 0 = greedy
    int32_t top_k;      // 0 = all
    float top_p, min_p;
    float repetition_penalty, presence_penalty, frequency_penalty;
    uint64_t seed;
    int32_t step;          // tokens generated so far by this request (Philox counter)
    int32_t num_logprobs;  // top-n logprobs wanted (0..20); the sampled one's is always returned
    int32_t mask_eos;      // 1 while output < min_tokens: eos/stop ids get -inf (ids separate)
};

// Bytes of global workspace sample() needs. Currently 0: one block per row keeps its whole
// state in shared memory. Callers still size the workspace with it.
size_t sampling_workspace_bytes(int64_t rows, int64_t vocab);

// logits: [rows, vocab] f32 CUDA. Afterwards only the masked ids of rows with mask_eos are
// changed (to -inf); penalties and temperature are applied on the fly, never stored.
// rows_params: [rows] RowSampling, any dtype with rows * sizeof(RowSampling) bytes (CUDA).
// counts: [rows, vocab] i32 = occurrences in the output so far, and prompt_mask: [rows, vocab]
// u8 (1 if the token is in the prompt) — nullptr for both when no row uses penalties.
// mask_ids: [num_mask_ids] i32 (may be empty), the EOS and stop ids masked for rows with mask_eos.
// Writes tokens: [rows] i32, logprobs: [rows] f32 (of the sampled token, log_softmax of the RAW
// logits) and, if max_logprobs > 0 (at most 32), top_ids: [rows, max_logprobs] i32 /
// top_logprobs: [rows, max_logprobs] f32, the row's min(num_logprobs, max_logprobs) best raw
// logprobs first (ties by lower id), then -1 / -inf. No host sync, no allocation.
void sample(Tensor& logits, const Tensor& rows_params, const Tensor* counts,
            const Tensor* prompt_mask, const Tensor& mask_ids, int64_t max_logprobs, Tensor& tokens,
            Tensor& logprobs, Tensor* top_ids, Tensor* top_logprobs, void* workspace,
            size_t workspace_bytes, cudaStream_t stream);

// Greedy fast path for batches where every row is greedy with no penalties/logprobs:
// tokens[r] = argmax of logits[r], the first on ties.
// logits: [rows, vocab] f32 CUDA; tokens: [rows] i32 CUDA.
void argmax(const Tensor& logits, Tensor& tokens, cudaStream_t stream);

}  // namespace miniinfer::cuda
