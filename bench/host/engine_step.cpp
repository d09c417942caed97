// Host-side cost of one engine step (schedule -> batch -> update -> outputs) with a runner that
// does no work: what the CPU adds to every GPU step. 256 running requests decoding, as in
// decode256; context lengths grow as the benchmark runs.
#include <benchmark/benchmark.h>

#include "engine/llm_engine.h"

using namespace miniinfer;

namespace {

class NullRunner : public ModelRunner {
  public:
    NullRunner() {
        config_.model_type = "null";
        config_.vocab_size = 151936;
        config_.max_position_embeddings = 1 << 20;
        config_.num_layers = config_.num_kv_heads = config_.head_dim = 1;
    }
    const ModelConfig& config() const override { return config_; }
    std::vector<SampledToken> run(const Batch&, std::span<const SamplerInput> sampling) override {
        return std::vector<SampledToken>(sampling.size(), SampledToken{7, 0.f, {}});
    }

  private:
    ModelConfig config_;
};

void BM_DecodeStep(benchmark::State& state) {
    const int64_t num_requests = state.range(0);
    EngineConfig c;
    c.model_dir = "(null)";
    c.num_pages = 1 << 16;
    c.max_model_len = 1 << 16;
    c.max_num_seqs = num_requests;
    LLMEngine engine(c, std::make_unique<NullRunner>(), std::nullopt);
    SamplingParams p;
    p.max_tokens = 1 << 15;
    p.ignore_eos = true;
    p.temperature = 0;
    for (int64_t i = 0; i < num_requests; ++i)
        engine.add_request(Prompt::from_ids(std::vector<int32_t>(128, 1)), p);
    engine.step();  // prefill
    for (auto _ : state) benchmark::DoNotOptimize(engine.step());
    state.SetItemsProcessed(state.iterations() * num_requests);
}
BENCHMARK(BM_DecodeStep)
    ->Arg(1)
    ->Arg(64)
    ->Arg(256)
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(2000);

}  // namespace

BENCHMARK_MAIN();
