// CudaModelRunner: the ModelRunner on one GPU. Dense Qwen2 / Qwen3 (Qwen3-MoE comes later).
//
// At construction it uploads the weights as bf16, allocates every activation buffer for the
// worst step (max_num_batched_tokens tokens, max_num_seqs sampled rows), measures the memory of
// the decode CUDA graphs (captured once against a one-page KV pool, then destroyed; see
// cuda_graphs.h), then gives the KV cache the rest of gpu_memory_utilization of the card, in
// pages, and captures the graphs for real. The log line says weights / activations / graphs /
// KV cache in MiB. A step copies the Batch to the GPU in one transfer, runs embedding -> N x
// [add&norm, QKV GEMM, q/k norm + rope + K/V store, paged attention, O GEMM, add&norm, gate-up
// GEMM, SiLU*mul, down GEMM] -> norm of the sampled rows -> lm_head, and samples on the GPU
// (cuda_sampler.h: penalties and masks included). Decode-only steps replay the graphs.
#pragma once

#include <memory>
#include <string>

#include "engine/model_runner.h"
#include "models/weights.h"

namespace miniinfer {

struct CudaRunnerOptions {
    int64_t page_size = 16;
    int64_t max_num_seqs = 256;
    int64_t max_num_batched_tokens = 2048;
    int64_t max_model_len = 4096;
    double gpu_memory_utilization = 0.9;
    int64_t num_pages = 0;       // > 0: exactly this many KV pages
    bool enforce_eager = false;  // no CUDA graphs
    std::string attention_backend =
        "auto";  // fa2 | flashinfer; auto: fa2 (faster on the H200 so far)
};

class CudaModelRunner : public ModelRunner {
  public:
    // Throws Error when the model does not fit (with the numbers) or is not supported on CUDA.
    CudaModelRunner(ModelConfig config, const ModelWeights& weights,
                    const CudaRunnerOptions& options);
    ~CudaModelRunner() override;

    const ModelConfig& config() const override;
    int64_t num_pages() const;
    std::vector<SampledToken> run(const Batch& batch,
                                  std::span<const SamplerInput> sampling) override;
    // The f32 logits of the last run's sampled rows, copied to the host ([rows, vocab]; tests);
    // penalised rows hold their penalised logits.
    Tensor last_logits() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace miniinfer
