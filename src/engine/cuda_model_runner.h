// CudaModelRunner: the ModelRunner on one GPU. It knows no architecture: the model
// (models/cuda_model.h, picked by make_cuda_model) launches the layers; the runner owns what
// every model needs around them — the memory budget, the paged KV pool, the step inputs'
// staging, the decode CUDA graphs, the attention backend's per-step plan, and sampling.
//
// At construction, in phases: upload the weights (bf16, as the loader wrote them); allocate
// every activation for the worst step (max_num_batched_tokens tokens, max_num_seqs sampled
// rows); measure the decode CUDA graphs' memory (captured once against a one-page KV pool, then
// destroyed; see cuda_graphs.h); give the KV cache the rest of gpu_memory_utilization of the
// card, in pages; capture the graphs for real; log weights / activations / graphs / KV cache
// in MiB. A step copies the Batch to the GPU in one transfer, plans attention on the host, runs
// the model's forward (or replays a graph for a decode-only batch) and samples on the GPU
// (cuda_sampler.h: penalties and masks included).
#pragma once

#include <memory>
#include <string>

#include "config/engine_config.h"
#include "engine/model_runner.h"
#include "models/weights.h"

namespace miniinfer {

class CudaModelRunner : public ModelRunner {
  public:
    // config: resolved (EngineConfig::resolve); reads page_size, max_num_seqs,
    // max_num_batched_tokens, max_model_len, gpu_memory_utilization, num_pages (> 0: exactly
    // that many KV pages), enforce_eager and attention_backend. weights: bf16 host tensors
    // (load_weights / dummy_weights with WeightTarget{DType::kBF16}), released as they upload.
    // Throws Error when the model does not fit (with the numbers) or does not run on CUDA.
    CudaModelRunner(const EngineConfig& config, ModelConfig model_config, ModelWeights weights);
    ~CudaModelRunner() override;

    const ModelConfig& config() const override;
    int64_t num_pages() const;
    std::vector<SampledToken> run(const Batch& batch,
                                  std::span<const SamplerInput> sampling) override;
    // Overlap: launch() stages the step (its placeholders are resolved on the device, from the
    // previous step's sampled tokens), launches the forward pass and sampling, and returns;
    // collect() waits for the oldest launched step's tokens.
    void launch(const Batch& batch, std::span<const SamplerInput> sampling) override;
    std::vector<SampledToken> collect() override;
    bool overlaps() const override;
    // The f32 logits of the last run's sampled rows, copied to the host ([rows, vocab]; tests);
    // penalised rows hold their penalised logits.
    Tensor last_logits() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace miniinfer
