// AttentionBackend: paged attention over a layer's KV pages, one interface for both backends.
//
//   fa2 (kernels/cuda/attention/attention.h): FlashAttention-2's algorithm; a workspace for the
//     split-KV decode, and a plan of two integers (the step's Σ seq_lens and longest seq_len,
//     from which each decode block finds its keys: kernels/cuda/attention/decode_plan.h).
//   flashinfer (kernels/cuda/attention/attention_flashinfer.h): FlashInfer's plan/run design;
//     plan() spreads the step's work over a fixed persistent grid.
//
// A step calls plan() once on the host with its query_start / seq_lens, then run() once per
// layer. run() allocates nothing and never synchronises, so a decode step can be captured in a
// CUDA graph and replayed after later plan() calls with other lengths (up to the same bounds).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "kernels/cuda/attention/attention.h"
#include "layers/cuda/step.h"

namespace miniinfer::cuda {

// The largest step a backend is built for, and this rank's attention heads.
struct AttentionShape {
    int64_t max_tokens, max_seqs, num_heads, num_kv_heads, head_dim, page_size;
};

class AttentionBackend {
  public:
    virtual ~AttentionBackend() = default;
    virtual const char* name() const = 0;
    // Host side, once per step before run(): the step's query_start [num_seqs + 1] and
    // seq_lens [num_seqs], as the device copy run() reads will hold them.
    virtual void plan(std::span<const int32_t> query_start, std::span<const int32_t> seq_lens,
                      cudaStream_t stream) = 0;
    // Device side: p.out = attention(p.q, the pages of p.k_cache / p.v_cache).
    virtual void run(const AttentionParams& p, cudaStream_t stream) = 0;
    // Whether run() takes AttentionParams::qkv_step on a decode step of num_seqs sequences (the
    // q/k norm, rotary and K/V store inside the decode kernel: one kernel fewer a layer).
    // flashinfer never does; fa2 for small batches (Fa2Backend says why).
    virtual bool decode_takes_qkv_step(int64_t /*num_seqs*/) const { return false; }
};

// p with the sequences of the step `in` (which must outlive it): their query_start, seq_lens and
// block table on the device and the host-side bounds, what every layer's attention call shares.
inline AttentionParams with_step_sequences(AttentionParams p, const StepInputs& in) {
    p.query_start = &in.query_start;
    p.seq_lens = &in.seq_lens;
    p.block_table = &in.block_table;
    p.num_seqs = in.num_seqs;
    p.max_query_len = in.max_query_len;
    p.max_seq_len = in.max_seq_len;
    return p;
}

// "fa2", "flashinfer", or "auto" (fa2: faster on the H200 so far). Throws Error for any other.
// fa2 reads tuning's decode_* fields; flashinfer plans its own splits.
std::unique_ptr<AttentionBackend> make_attention_backend(const std::string& name,
                                                         const AttentionShape& shape,
                                                         const Tuning& tuning = {});

}  // namespace miniinfer::cuda
