// ModelRunner: one step of the model for a Batch — forward, then sample the next token of
// every sequence that reached its last token. The CPU runner is below; the CUDA runner
// implements the same interface. A runner owns the model weights and the KV cache memory;
// which pages a request uses is the scheduler's business.
#pragma once

#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "config/engine_config.h"
#include "config/model_config.h"
#include "core/thread_pool.h"
#include "distributed/cpu_communicator.h"
#include "distributed/step_broadcaster.h"
#include "distributed/step_receiver.h"
#include "kvcache/kv_cache.h"
#include "layers/sampler.h"
#include "models/qwen_model.h"
#include "scheduler/batch.h"

namespace miniinfer {

// The model's view of a scheduled batch.
inline ForwardBatch forward_batch_of(const Batch& b) {
    return {b.input_ids,   b.positions,      b.query_start,   b.seq_lens,
            b.block_table, b.max_pages,      b.slot_mapping,  b.logits_indices,
            b.state_slots, b.state_restores, b.snapshot_rows, b.snapshot_slots};
}

// A CPU rank > 0 of a group over TCP (tensor_parallel::RankMain, distributed/rank_startup.h), after
// it joined rank 0 (steps) and read its welcome: loads its shard with rank 0's settings, reports,
// then runs every step until rank 0 says the end or closes its link. Throws Error.
void run_cpu_rank(const EngineConfig& config, int64_t rank, int64_t local_rank, StepReceiver& steps,
                  const Json& welcome);

class ModelRunner {
  public:
    virtual ~ModelRunner() = default;
    virtual const ModelConfig& config() const = 0;
    // sampling[i] describes batch.sampling[i]; returns one token per entry, in order.
    virtual std::vector<SampledToken> run(const Batch& batch,
                                          std::span<const SamplerInput> sampling) = 0;

    // Overlap scheduling (LLMEngine): launch() starts a step and returns; collect() returns the
    // tokens of the oldest launched step not yet collected, in launch order. A step's input_ids
    // may hold placeholder(i) for the token the previous launched step samples in its row i;
    // its SamplerInputs' output_ids may end with such a placeholder too, whose value the
    // sampler must not need (the engine collects first when penalties need the values).
    // before_sampling, when given, runs after the step's forward is enqueued and before its
    // sampling is: there the engine collects the previous step and computes structured output's
    // masks (which the sampling inputs' token_bitmask spans then hold) while the GPU runs the
    // forward. The default runs the step in launch(), after replacing placeholders on the host:
    // the engine's overlap loop then works, without overlapping anything.
    virtual void launch(const Batch& batch, std::span<const SamplerInput> sampling,
                        const std::function<void()>& before_sampling = {});
    virtual std::vector<SampledToken> collect();
    // Whether launch() returns before the step has run. The engine overlaps only then (and
    // for runners that ask for the loop anyway, to have it exercised: the CPU runner).
    virtual bool overlaps() const { return false; }

    // With EngineConfig::measure_gpu_idle, where the GPU's time went since the last reset: steps
    // collected, their time on the GPU (first to last event of a step) and the gaps between
    // one step's end and the next one's start (the GPU waiting for the host). nullopt where not
    // measured (the CPU runner, or measuring off).
    struct StepTiming {
        int64_t steps = 0;
        double busy_ms = 0, idle_ms = 0;
    };
    virtual std::optional<StepTiming> step_timing() const { return std::nullopt; }
    virtual void reset_step_timing() {}

    static int32_t placeholder(size_t row) { return -int32_t(row) - 1; }
    static bool is_placeholder(int32_t id) { return id < 0; }
    static size_t placeholder_row(int32_t id) { return size_t(-(id + 1)); }

  private:
    std::deque<std::vector<SampledToken>> launched_;  // ran, not yet collected
    std::vector<int32_t> last_tokens_;                // what the last launched step sampled
};

class CpuModelRunner : public ModelRunner {
  public:
    // A hybrid model's Gated DeltaNet states: num_state_slots of them (the scheduler's slots).
    CpuModelRunner(QwenModel model, int64_t num_pages, int64_t page_size,
                   int64_t num_state_slots = 0);
    // Tensor parallelism over `world` ranks, threads of this process: rank r loads its shards
    // (QwenModel::load with CpuParallel{r, world}) and keeps its KV heads in a cache of its own;
    // each step runs every rank at once (each on a thread pool of its own share of the cores)
    // and samples from rank 0's logits, which every rank has too. Proves the sharding the GPU
    // uses; a CPU gains no speed from it.
    static std::unique_ptr<CpuModelRunner> load_parallel(const std::filesystem::path& model_dir,
                                                         LoadFormat format, uint64_t seed,
                                                         int64_t world, bool expert_parallel,
                                                         int64_t num_pages, int64_t page_size);
    // Tensor parallelism over processes and hosts (config.nnodes > 1, node_rank 0): rank 0
    // here, this node's other ranks on threads and the other nodes' ranks in their processes
    // (run_worker_node), all joined over TCP and started by a StepBroadcaster, which sends each
    // step's batch to every rank; rank 0 samples. Throws Error if a rank does
    // not join in time or cannot load its shard (with its reason). config: resolved.
    static std::unique_ptr<CpuModelRunner> load_distributed(const EngineConfig& config);
    ~CpuModelRunner() override;

    const ModelConfig& config() const override { return models_.front().config(); }
    // Every local rank stores K/V rounded to FP8 e4m3 (QwenModel::use_fp8_kv_cache).
    void use_fp8_kv_cache() {
        for (QwenModel& m : models_) m.use_fp8_kv_cache();
    }
    std::vector<SampledToken> run(const Batch& batch,
                                  std::span<const SamplerInput> sampling) override;
    // Runs each step in launch() (no thread of its own) but asks for the overlap loop, so that
    // every CPU test exercises the engine's placeholders, deferred outputs and dropped tokens.
    bool overlaps() const override { return true; }

  private:
    CpuModelRunner() = default;
    Tensor forward_all_ranks(const ForwardBatch& batch);

    // One entry per rank (one in all without tensor parallelism).
    std::vector<QwenModel> models_;
    std::vector<KvCache> kv_;
    std::optional<StateCache> state_;  // hybrids (no tensor parallelism for them yet)
    std::unique_ptr<CpuCommunicator::Group> group_;
    std::vector<std::unique_ptr<CpuCommunicator>> comms_;
    std::vector<std::unique_ptr<ThreadPool>> pools_;
    // load_distributed: rank 0's end of the group (its links and this node's other ranks).
    std::unique_ptr<StepBroadcaster> steps_;
};

}  // namespace miniinfer
