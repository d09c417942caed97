// CudaModelRunner: the ModelRunner on one GPU. It knows no architecture: the model
// (models/cuda_model.h, picked by make_cuda_model) launches the layers; the runner owns what
// every model needs around them — the memory budget, the paged KV pool, the step inputs'
// staging, the decode CUDA graphs, the attention backend's per-step plan, and sampling; for a
// hybrid model, the Gated DeltaNet state slots too.
//
// At construction, in phases: upload the weights (bf16, as the loader wrote them); allocate
// every activation for the worst step (max_num_batched_tokens tokens, max_num_seqs sampled
// rows); measure the decode CUDA graphs' memory (captured once against a one-page KV pool, then
// destroyed; see cuda_graphs.h); give a hybrid's state slots their share and the KV cache the
// rest of gpu_memory_utilization of the card, in pages; capture the graphs for real; log weights /
// activations / graphs / KV cache in MiB. A step copies the Batch to the GPU in one transfer, plans
// attention on the host, runs the model's forward (or replays a graph for a decode-only batch) and
// samples on the GPU (cuda_sampler.h: penalties and masks included).
#pragma once

#include <memory>
#include <string>

#include "config/engine_config.h"
#include "distributed/communicator.h"
#include "distributed/step_receiver.h"
#include "engine/model_runner.h"
#include "models/weights.h"

namespace miniinfer {

class CudaModelRunner : public ModelRunner {
  public:
    // config: resolved (EngineConfig::resolve); reads page_size, max_num_seqs,
    // max_num_batched_tokens, max_model_len, gpu_memory_utilization, num_pages (> 0: exactly
    // that many KV pages), num_state_slots (a hybrid's; 0: a slot for each of max_num_seqs and,
    // with enable_prefix_caching, as many for snapshots, within half the memory left for the
    // KV cache), enforce_eager and attention_backend. weights: bf16 host tensors
    // (load_weights / dummy_weights with WeightTarget{DType::kBF16}), released as they upload.
    // Throws Error when the model does not fit (with the numbers) or does not run on CUDA.
    // comm (tensor parallelism): this rank's collectives, or null on one GPU. Every rank of a
    // world constructs its runner at the same time (the warm-up steps and graph captures meet
    // in the collectives) and they agree on the smallest rank's KV pages.
    CudaModelRunner(const EngineConfig& config, ModelConfig model_config, ModelWeights weights,
                    Communicator* comm = nullptr);
    // Tensor parallelism (config.tensor_parallel_size > 1, node 0): rank 0 in this runner, this
    // node's other ranks on threads (one GPU each: rank r on device r of the node), other nodes'
    // ranks in their processes (run_worker_node); NCCL for the collectives, a StepBroadcaster
    // (distributed/step_broadcaster.h) for the start-up (the welcome carries the NCCL id) and
    // each step's batch. Rank 0 samples.
    // Throws Error if NCCL is missing from this build or a rank fails to start.
    static std::unique_ptr<CudaModelRunner> load_parallel(const EngineConfig& config);
    ~CudaModelRunner() override;

    const ModelConfig& config() const override;
    int64_t num_pages() const;
    // A hybrid's state slots (EngineConfig::num_state_slots, or sized with the KV cache when 0).
    int64_t num_state_slots() const;
    std::vector<SampledToken> run(const Batch& batch,
                                  std::span<const SamplerInput> sampling) override;
    // Overlap: launch() stages the step (its placeholders are resolved on the device, from the
    // previous step's sampled tokens), launches the forward pass and sampling, and returns;
    // collect() waits for the oldest launched step's tokens.
    void launch(const Batch& batch, std::span<const SamplerInput> sampling,
                const std::function<void()>& before_sampling = {}) override;
    std::vector<SampledToken> collect() override;
    bool overlaps() const override;
    std::optional<StepTiming> step_timing() const override;
    void reset_step_timing() override;
    // The f32 logits of the last run's sampled rows, copied to the host ([rows, vocab]; tests);
    // penalised rows hold their penalised logits.
    Tensor last_logits() const;
    // Tests: the MoE layers' expert choices of each eager step into *trace (CudaModel's).
    void trace_routing(Tensor* trace);
    // A rank > 0's step: the forward pass of `batch` (its collectives meet rank 0's), no
    // sampling: rank 0's sampled tokens arrive instead (overlap: the next step's placeholders
    // name them); returns when the step has run.
    void forward_only(const ForwardBatch& batch);

  private:
    struct Impl;
    struct Parallel;                      // load_parallel's StepBroadcaster and NCCL communicator
    std::unique_ptr<Parallel> parallel_;  // destroyed after impl_: the ranks end first
    std::unique_ptr<Impl> impl_;
};

// A CUDA rank > 0 on this thread (tensor_parallel::RankMain, distributed/rank_startup.h), after
// it joined rank 0 (steps) and read its welcome: selects device `local_device`, reports whether it
// can come, joins NCCL, loads its shard, builds its runner (with the other ranks), reports again,
// then runs every step rank 0 sends until the end. Throws Error.
void run_cuda_rank(const EngineConfig& config, int64_t rank, int64_t local_device,
                   StepReceiver& steps, const Json& welcome);

}  // namespace miniinfer
