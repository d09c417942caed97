// Penalties and token masks on the GPU, in place on the f32 logits of the rows that need them,
// with the CPU reference's semantics (layers/sampler.h, apply_penalties), in vLLM's order:
//   repetition penalty over prompt ∪ output (each distinct token once: x > 0 ? x / p : x * p)
//   → x -= frequency * count + presence over the distinct output tokens
//   → -inf for the masked ids (EOS and stop ids while output < min_tokens).
// Same float operations as the CPU (the frequency/presence term in double, rounded once), so the
// results are bitwise equal. The sampler then reads these logits; the raw ones stay in bf16 for
// the logprobs (sampling.h, raw_logits).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace miniinfer::cuda {

// One penalised row (plain struct, 24 bytes, uploaded once per step with the token lists).
struct RowPenalties {
    int32_t row;               // the row of logits it changes; each row listed at most once
    float repetition_penalty;  // 1 = off (the CPU's float(double))
    double frequency_penalty;  // 0 = off
    double presence_penalty;   // 0 = off
};

// Global workspace apply_penalties needs: one int per vocabulary entry per block in flight
// (the output counts). Its contents need no initialisation and are garbage afterwards.
size_t penalties_workspace_bytes(int64_t vocab);

// logits: [rows, vocab] f32 CUDA, changed in place on the listed rows only.
// params: [n] RowPenalties (any dtype, n * sizeof(RowPenalties) bytes, CUDA).
// segment_start: [3n + 1] i32 CUDA, non-decreasing, segment_start[0] = 0: row j's prompt ids
//   are token_ids[segment_start[3j] .. segment_start[3j+1]), its output ids up to
//   segment_start[3j+2], its masked ids up to segment_start[3j+3]. Duplicates are allowed
//   (counted, for the output). The prompt ids matter only with a repetition penalty; the output
//   ids with any penalty.
// token_ids: [segment_start[3n]] i32 CUDA, every id in [0, vocab) (the kernel trusts them).
// n = 0 launches nothing. No host sync, no allocation.
void apply_penalties(Tensor& logits, const Tensor& params, const Tensor& segment_start,
                     const Tensor& token_ids, void* workspace, size_t workspace_bytes,
                     cudaStream_t stream);

}  // namespace miniinfer::cuda
