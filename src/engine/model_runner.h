// ModelRunner: one step of the model for a Batch — forward, then sample the next token of
// every sequence that reached its last token. The CPU runner is below; the CUDA runner
// implements the same interface. A runner owns the model weights and the KV cache memory;
// which pages a request uses is the scheduler's business.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "config/model_config.h"
#include "kvcache/kv_cache.h"
#include "layers/sampler.h"
#include "models/qwen_model.h"
#include "scheduler/batch.h"

namespace miniinfer {

class ModelRunner {
  public:
    virtual ~ModelRunner() = default;
    virtual const ModelConfig& config() const = 0;
    // sampling[i] describes batch.sampling[i]; returns one token per entry, in order.
    virtual std::vector<SampledToken> run(const Batch& batch,
                                          std::span<const SamplerInput> sampling) = 0;
};

class CpuModelRunner : public ModelRunner {
  public:
    CpuModelRunner(QwenModel model, int64_t num_pages, int64_t page_size);
    const ModelConfig& config() const override { return model_.config(); }
    std::vector<SampledToken> run(const Batch& batch,
                                  std::span<const SamplerInput> sampling) override;

  private:
    QwenModel model_;
    KvCache kv_;
};

}  // namespace miniinfer
