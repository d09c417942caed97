// CudaSampler: the CUDA runner's sampling step. For the rows whose logits penalties, biases or
// masks change (structured output's token bitmask, allowed_token_ids, bad words, logit_bias,
// repetition/frequency/presence penalties, min_tokens), it uploads their token lists (CSR, one copy
// per step; a step's bad-word bans found on the host from output_ids) and applies them to its own
// copy of the logits (kernels/cuda/sampling/penalties.h); then it samples every row on the GPU —
// argmax when all rows are greedy without logprobs, else the full sampler
// (kernels/cuda/sampling/sampling.h) — and copies the tokens and logprobs back (launch() enqueues,
// collect() waits for a step, so that the runner can overlap steps). No row falls back to the CPU
// sampler; the results are the CPU sampler's (layers/sampler.h) up to the float-sum boundaries
// sampling.h describes.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "core/cuda/device_buffer.h"
#include "layers/sampler.h"

namespace miniinfer {

class CudaSampler {
  public:
    // Allocates every buffer for max_rows rows of `vocab` logits; the token-list upload starts
    // with room for max_model_len ids and 64 more ids a row (masked, allowed, biased) and grows
    // when a step needs more.
    CudaSampler(int64_t max_rows, int64_t vocab, int64_t max_model_len);
    ~CudaSampler();

    // Enqueues one step's sampling on `stream` and the copies of its results to pinned host
    // memory, and returns at once. logits: [rows, vocab] f32 CUDA (the LM head's), read only:
    // when penalties or masks apply to some row, they change the sampler's own copy, and the
    // logprobs still come from these values. rows_in[i] describes row i (its logits span is
    // ignored; nothing in it is read after launch returns). At most two steps are launched and
    // not yet collected (the overlap loop's depth): each has its own host buffers.
    void launch(const Tensor& logits, std::span<const SamplerInput> rows_in, cudaStream_t stream);
    // Waits (on an event, not the stream) for the oldest launched step and returns its tokens.
    std::vector<SampledToken> collect();
    // launch, then collect.
    std::vector<SampledToken> sample(const Tensor& logits, std::span<const SamplerInput> rows_in,
                                     cudaStream_t stream) {
        launch(logits, rows_in, stream);
        return collect();
    }

    // [max_rows] i32 CUDA: the tokens of the last launched step with rows, valid on the stream
    // after it (placeholders of the next step read them: kernels/cuda/sampling/sampling.h).
    const Tensor& device_tokens() const;

  private:
    struct Buffers;
    struct Launched;
    // Uploads the penalised rows' lists and applies them to logits in place. MI_CHECK on an id
    // outside the vocabulary (validated params cannot hold one).
    void apply_penalties(Tensor& logits, std::span<const SamplerInput> rows_in,
                         const std::vector<int32_t>& penalised, cudaStream_t stream);
    // Applies the structured-output masks of the penalised rows that have one (the mask upload,
    // then kernels/cuda/sampling/token_bitmask.h); called first by apply_penalties.
    void apply_token_bitmasks(Tensor& logits, std::span<const SamplerInput> rows_in,
                              const std::vector<int32_t>& penalised, cudaStream_t stream);
    int64_t max_rows_, vocab_;
    std::unique_ptr<Buffers> buf_;
};

}  // namespace miniinfer
