// Sampling on the GPU with the CPU reference sampler's semantics (layers/sampler.h): greedy
// argmax, or / temperature → min_p → top_k → top_p → one Philox draw per (seed, step).
// Penalties and min_tokens masking are applied before, in place (penalties.h). Given the same
// inputs it picks the CPU sampler's token, except when a floating-point sum lands exactly on a
// top_p or draw boundary (the sums run in another order).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace miniinfer::cuda {

// Per-row sampling parameters, uploaded once per step (plain struct, 40 bytes).
// Float fields: the CPU sampler works with the double in SamplingParams; both agree exactly
// when that double is a float (otherwise only as closely as the float rounding allows).
struct RowSampling {
    float temperature;  // 0 = greedy
    int32_t top_k;      // 0 = all
    float top_p, min_p;
    uint64_t seed;
    int32_t step;          // tokens generated so far by this request (Philox counter)
    int32_t num_logprobs;  // top-n logprobs wanted (0..20); the sampled one's is always returned
    int32_t penalised;     // 1: apply_penalties changed this row; raw_logits holds the original
};

// Bytes of global workspace sample() needs. Currently 0: one block per row keeps its whole
// state in shared memory. Callers still size the workspace with it.
size_t sampling_workspace_bytes(int64_t rows, int64_t vocab);

// logits: [rows, vocab] f32 CUDA, read only: the logits to sample from (penalised where
// apply_penalties ran). Temperature and the filters are applied on the fly, never stored.
// rows_params: [rows] RowSampling, any dtype with rows * sizeof(RowSampling) bytes (CUDA).
// raw_logits: [rows, vocab] bf16 or f32 CUDA, the logits before penalties (the runner's bf16
// lm_head output, from which `logits` was converted exactly); read instead of `logits` for
// the logprobs of rows with `penalised`. nullptr when no row is penalised.
// Writes tokens: [rows] i32, logprobs: [rows] f32 (of the sampled token, log_softmax of the RAW
// logits) and, if max_logprobs > 0 (at most 32), top_ids: [rows, max_logprobs] i32 /
// top_logprobs: [rows, max_logprobs] f32, the row's min(num_logprobs, max_logprobs) best raw
// logprobs first (ties by lower id), then -1 / -inf. No host sync, no allocation.
// Cost (sampling.cu, 256 rows of 151,936 on the H200): a row at a temperature alone ~150 µs for
// all, one pass over its logits; with a top_k of up to 256 (and any top_p, min_p) ~130 µs, two;
// other rows (top_p alone, top logprobs) ~775 µs, the general radix-select path. A penalised row
// adds a pass over its raw logits.
void sample(const Tensor& logits, const Tensor& rows_params, const Tensor* raw_logits,
            int64_t max_logprobs, Tensor& tokens, Tensor& logprobs, Tensor* top_ids,
            Tensor* top_logprobs, void* workspace, size_t workspace_bytes, cudaStream_t stream);

// Greedy fast path for batches where every row is greedy without logprobs (penalties applied):
// tokens[r] = argmax of logits[r], the first on ties.
// logits: [rows, vocab] f32 CUDA; tokens: [rows] i32 CUDA. One block reads a row, unless a
// workspace of argmax_workspace_bytes(rows) is given and the rows are few (below
// kArgmaxSplitRows): then each row is spread over up to 32 blocks and the row's last block to
// finish picks from their partial results (at batch 1: ~21 µs for 151,936 logits with one block).
// The workspace must be zero-filled before its first use; argmax leaves it so.
inline constexpr int64_t kArgmaxSplitRows = 16;
size_t argmax_workspace_bytes(int64_t rows);
void argmax(const Tensor& logits, Tensor& tokens, cudaStream_t stream, void* workspace = nullptr,
            size_t workspace_bytes = 0);

// Overlap scheduling: a step launched before the previous one's tokens are known names them by
// placeholder (ModelRunner::placeholder(row) = -row - 1). ids[i] < 0 becomes
// sampled[-ids[i] - 1]; other ids stay. ids: [n] i32 CUDA; sampled: [rows] i32 CUDA, the
// previous step's tokens (placeholders must name rows below `rows`: not checked, on the device).
void resolve_placeholders(Tensor& ids, const Tensor& sampled, cudaStream_t stream);

}  // namespace miniinfer::cuda
