// The routing half of a mixture-of-experts block on the GPU (see moe_routing.cu). One MoE layer:
//
//   router GEMM        logits = x · W_gateᵀ                          [n, E] f32    (cuda::Gemm)
//   moe_route          softmax, top-k, renormalise -> topk_ids, topk_weights [n, k]
//   moe_permute        topk_ids -> expert_offsets [E + 1], row_token [max_rows], slot_row [n, k]
//   moe_gather         x -> x_perm [max_rows, H]: each expert's tokens in contiguous rows
//   grouped GEMM       gate_up per expert over its rows, silu_mul, grouped GEMM down -> y_perm
//                      (cuda::Moe fuses the gather into the gate_up GEMM: its row loads read
//                      x through row_token; at the 16-row tile silu_mul too, in its epilogue.
//                      Up to kMoeGemvMaxPairs choices skip all of this: moe_gemv.h)
//   moe_combine        out[t] = Σ_j topk_weights[t, j] · y_perm[slot_row[t, j]]     [n, H] bf16
//
// Every launcher takes its sizes from the host (n = the step's num_tokens, E, k, tile_rows) and
// reads nothing back: no host synchronisation and no allocation, so a CUDA graph can capture the
// whole chain. Results are deterministic: no atomics whose order shows in an output.
//
// Permuted layout: expert e owns rows [expert_offsets[e], expert_offsets[e + 1]); its segment is
// its token count rounded up to a multiple of tile_rows (0 rows for an expert with no tokens), so
// a grouped GEMM tile of tile_rows rows never straddles two experts. Within a segment, rows are
// in (token, choice) order, then padding rows (row_token -1, zeros in x_perm). Rows from
// expert_offsets[E] to max_rows are unused.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace miniinfer::cuda {

constexpr int64_t kMoeMaxExperts = 512;  // moe_route and moe_permute hold E values per token/block
constexpr int64_t kMoeMaxTopK = 32;      // moe_route keeps one choice per lane of a warp

// Rows of the permuted buffers for n tokens with k choices each: the n·k routed rows plus at most
// tile_rows - 1 padding rows for each expert that has a token (at most min(E, n·k) of them),
// rounded up to a multiple of tile_rows. Size x_perm, y_perm and row_token with this.
int64_t moe_max_rows(int64_t n, int64_t top_k, int64_t num_experts, int64_t tile_rows);

// Per token: p = softmax(logits[t]) in fp32, the top_k experts by p (ties to the lower expert id,
// as cpu::moe_route), their probabilities, divided by the chosen ones' sum when renormalize
// (Qwen3-MoE's norm_topk_prob). Experts are ranked by logit, which orders them as p does without
// the rounding of the division.
// Experts whose logits agree to 2^-14 (relative) rank as equal, ties to the lower id.
//   logits:       [n, E] f32 or bf16, E <= kMoeMaxExperts (the router GEMM's output)
//   topk_ids:     [n, k] i32, written; k = top_k <= min(E, kMoeMaxTopK); best first
//   topk_weights: [n, k] f32, written
void moe_route(const Tensor& logits, int64_t top_k, bool renormalize, Tensor& topk_ids,
               Tensor& topk_weights, cudaStream_t stream);

// i32 elements of moe_permute's workspace for n tokens with k choices over E experts.
int64_t moe_permute_workspace_elems(int64_t n, int64_t top_k, int64_t num_experts);

// Groups the n·k (token, choice) slots by expert: three launches (per-chunk counts over n·k / 1024
// blocks, one block's prefix sum, the scatter over the chunks again).
//   topk_ids:       [n, k] i32, every value in [0, num_experts) (not checked: device values)
//   num_experts:    E <= kMoeMaxExperts; tile_rows >= 1
//   workspace:      i32, at least moe_permute_workspace_elems(n, k, E) elements (scratch)
//   expert_offsets: [E + 1] i32, written: expert e's rows are [offsets[e], offsets[e + 1])
//   row_token:      [max_rows] i32, written in full: the token whose activations row r holds, -1
//                   for padding and for rows past offsets[E]; max_rows >= moe_max_rows(...)
//   slot_row:       [n, k] i32, written: the permuted row of token t's j-th choice
void moe_permute(const Tensor& topk_ids, int64_t num_experts, int64_t tile_rows, Tensor& workspace,
                 Tensor& expert_offsets, Tensor& row_token, Tensor& slot_row, cudaStream_t stream);

// x_perm[r] = x[row_token[r]] for r < expert_offsets[E], zeros where row_token[r] is -1. Rows
// from expert_offsets[E] on are left as they are: no expert reads them, and writing them would
// cost a decode step as much as a prefill.
//   x:              [n, H] bf16
//   row_token:      [max_rows] i32, from moe_permute (values in [-1, n))
//   expert_offsets: [E + 1] i32, from moe_permute
//   x_perm:         [max_rows, H] bf16, written (see above)
void moe_gather(const Tensor& x, const Tensor& row_token, const Tensor& expert_offsets,
                Tensor& x_perm, cudaStream_t stream);

// out[t] = bf16(Σ_{j = 0 .. k-1} topk_weights[t, j] · y_perm[slot_row[t, j]]), summed in fp32 in
// that order (one fused multiply-add per term), rounded once. One block per token, no atomics:
// the same bits every run.
//   y_perm:       [max_rows, H] bf16 (the grouped down GEMM's output)
//   slot_row:     [n, k] i32, from moe_permute (values in [0, max_rows))
//   topk_weights: [n, k] f32, from moe_route
//   out:          [n, H] bf16, written
void moe_combine(const Tensor& y_perm, const Tensor& slot_row, const Tensor& topk_weights,
                 Tensor& out, cudaStream_t stream);

}  // namespace miniinfer::cuda
