// PiecewiseGraphs: the steps a decode graph cannot take (prefill chunks, mixed batches) as CUDA
// graphs with the attention left out. For each token count of a ladder, the model's forward
// pass up to the logits is captured as num_layers + 1 graphs, cut at every attention call; a
// step padded to the next count replays them, with each layer's attention launched eagerly in
// between for the step's real sequences.
//
// Why the attention stays out: its grid and plan depend on the step's sequences (how many, how
// long, where their pages are); every other kernel of a layer depends on the token count alone.
// Padded rows are token 0 at position 0 writing its K/V to the dummy page; the attention never
// reads them (query_start covers only the real tokens) and no other kernel mixes rows, so the
// real rows come out as an eager step of the padded size would give them. The logits (the
// sampled rows' gather, norm and LM head) run eagerly after the pieces.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "engine/cuda_graphs.h"
#include "layers/cuda/attention_backend.h"
#include "layers/cuda/step.h"
#include "layers/forward_batch.h"

namespace miniinfer {

class PiecewiseGraphs {
  public:
    // Token counts 16, 32, ... up to max_tokens (at least 16; see sizes()). device_inputs: the
    // runner's input buffer (StepInputLayout).
    PiecewiseGraphs(StepInputLayout layout, int64_t max_tokens, int64_t page_size,
                    int32_t* device_inputs);
    ~PiecewiseGraphs();
    PiecewiseGraphs(const PiecewiseGraphs&) = delete;
    PiecewiseGraphs& operator=(const PiecewiseGraphs&) = delete;

    const std::vector<int64_t>& sizes() const { return sizes_; }
    // Pieces (graphs) a step of a captured size replays: the model's layers + 1.
    int64_t num_pieces() const;

    // Captures the ladder, largest first. layers(N, backend) launches the forward pass of N
    // tokens without the logits on `stream`, its attention through `backend` (which records
    // each call and cuts the capture there); it runs once eagerly per size first (GEMM
    // algorithms, lazily loaded kernels), with zeros for the attention's output (so that no
    // later kernel, the MoE router least of all, reads what an allocation held). Returns the device
    // memory the instantiated graphs hold (as DecodeGraphs::capture). `host`: pinned staging, free
    // to write.
    size_t capture(int64_t dummy_page, int32_t* host,
                   const std::function<void(int64_t, cuda::AttentionBackend&)>& layers,
                   cudaStream_t stream);
    size_t clear();  // destroys every graph; returns device_memory_freed_by the destruction

    // For a batch of at most the largest size that is not decode-only: writes its inputs, token
    // rows padded to the smallest captured size N >= its tokens, to `host` and copies them to the
    // device on `stream` (block table at the batch's stride, at layout.table); returns N. Returns
    // 0 (writing nothing) for any other batch.
    int64_t stage(const ForwardBatch& b, int64_t dummy_page, int32_t* host, cudaStream_t stream);
    // Replays the pieces of size in.num_tokens (a size stage() returned) on `stream`, each
    // layer's attention run by `attention` (planned for this step) with in's sequences.
    void launch(const cuda::StepInputs& in, cuda::AttentionBackend& attention,
                cudaStream_t stream) const;

  private:
    // What a captured layer hands its attention: the buffers of the capture, fixed per size.
    struct AttentionCall {
        Tensor q, k_cache, v_cache, out;
        float scale, k_scale, v_scale;
    };
    struct Pieces {
        std::vector<cudaGraphExec_t> execs;
        std::vector<AttentionCall> calls;  // calls[i] runs between execs[i] and execs[i + 1]
    };
    class Recorder;
    void destroy();

    StepInputLayout layout_;
    int64_t page_size_;
    int32_t* device_;
    std::vector<int64_t> sizes_;
    std::map<int64_t, Pieces> pieces_;  // token count -> its pieces
};

}  // namespace miniinfer
