// Penalties and token masks on the GPU, in place on the f32 logits of the rows that need them,
// with the CPU reference's semantics (layers/sampler.h, apply_penalties), in vLLM's order:
//   -inf outside the allowed ids (allowed_token_ids) → -inf for the banned ids (bad words)
//   → x += bias for each logit_bias entry
//   → repetition penalty over prompt ∪ output (each distinct token once: x > 0 ? x / p : x * p)
//   → x -= frequency * count + presence over the distinct output tokens
//   → -inf for the masked ids (EOS and stop ids while output < min_tokens).
// Same float operations as the CPU (the biases of one id added one by one in list order; the
// frequency/presence term in double, rounded once), so the results are bitwise equal. The
// sampler then reads these logits; the raw ones stay in bf16 for the logprobs (sampling.h,
// raw_logits).
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

// Each row's token lists in the upload, in this order (segment_start below).
enum PenaltySegment : int {
    kPromptIds,   // for the repetition penalty
    kOutputIds,   // for any penalty; duplicates counted
    kMaskedIds,   // -inf last (EOS and stop ids while output < min_tokens)
    kBannedIds,   // -inf first (this step's bad-word bans: layers/sampler.h, banned_bad_word_ids)
    kAllowedIds,  // empty: every token allowed; else -inf for every other token
    kBiasPairs,   // (id, bias as f32 bits) i32 pairs; equal ids adjacent, in list order
    kNumPenaltySegments
};

// Global workspace apply_penalties needs: one int per vocabulary entry per block in flight
// (the output counts). Its contents need no initialisation and are garbage afterwards.
size_t penalties_workspace_bytes(int64_t vocab);

// logits: [rows, vocab] f32 CUDA, changed in place on the listed rows only.
// params: [n] RowPenalties (any dtype, n * sizeof(RowPenalties) bytes, CUDA).
// segment_start: [S n + 1] i32 CUDA (S = kNumPenaltySegments), non-decreasing,
//   segment_start[0] = 0: row j's segment s is token_ids[segment_start[S j + s] ..
//   segment_start[S j + s + 1]). Duplicates are allowed in every list. The prompt ids matter
//   only with a repetition penalty; the output ids with any penalty. The bias segment has an
//   even length.
// token_ids: [segment_start[S n]] i32 CUDA, every id in [0, vocab) (the kernel trusts them;
//   the bias bits are no ids).
// n = 0 launches nothing. No host sync, no allocation.
void apply_penalties(Tensor& logits, const Tensor& params, const Tensor& segment_start,
                     const Tensor& token_ids, void* workspace, size_t workspace_bytes,
                     cudaStream_t stream);

}  // namespace miniinfer::cuda
