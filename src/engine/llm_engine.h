// LLMEngine: the public C++ API. Many requests share one model, one KV cache and one step.
//
//   LLMEngine engine(config);                       // loads the model and tokenizer
//   auto outs = engine.generate({Prompt::from_text("Hello")}, params);
// or, streaming:
//   engine.add_request(prompt, params, "id-1");
//   while (engine.has_unfinished()) for (auto& o : engine.step()) ...;
//
// Bad input (empty or over-long prompt, invalid SamplingParams, ids outside the vocabulary,
// text, bad_words or structured output without a tokenizer) is an Error for that request only:
// add_request throws and adds nothing; generate reports it as that request's finish_reason
// "error". A bad schema, regex or grammar is found by its compile: precompile throws it, else
// (compiled in the background, see add_request) the request ends with finish_reason "error".
// Not thread-safe: one thread drives it (the server puts it on its own thread).
//
// With config.detokenize == false the engine is the pipeline's engine core: outputs carry
// token ids, logprobs and finish reasons but no text, and stop strings are left to the
// caller (PipelineDetokenizer applies them and abort()s the request).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "config/engine_config.h"
#include "config/generation_config.h"
#include "config/sampling_params.h"
#include "engine/grammar_compiler.h"
#include "engine/model_runner.h"
#include "engine/output_processor.h"
#include "engine/request_output.h"
#include "scheduler/scheduler.h"
#include "structured/grammar_cache.h"
#include "tokenizer/tokenizer.h"

namespace miniinfer {

class LLMEngine {
  public:
    // Loads config.json, weights and (if present) tokenizer.json from config.model_dir.
    explicit LLMEngine(EngineConfig config);
    // With a given runner (tests use fake ones); `tokenizer` may be empty (ids only).
    LLMEngine(EngineConfig config, std::unique_ptr<ModelRunner> runner,
              std::optional<Tokenizer> tokenizer, GenerationConfig generation = {});
    ~LLMEngine();

    // Queues a request and returns its id (request_id, or a fresh one): the prompt encoded (text)
    // and truncated (truncate_prompt_tokens), bad_words resolved into the request's own
    // params (engine/request_inputs.h). Throws Error on bad input. A structured output grammar
    // not in the cache compiles on a background thread (GrammarCompiler), never on the caller's:
    // the request waits outside the scheduler until it is ready, while the others decode; one
    // compile serves every request with that spec. If it fails, the request ends with
    // finish_reason "error" and the compile's message.
    std::string add_request(const Prompt& prompt, const SamplingParams& params,
                            std::string request_id = "");
    // One step: schedule -> forward -> sample -> update. Outputs of the requests that got a
    // token or finished in this step (and of requests aborted since the last step).
    // With overlap scheduling (a runner that overlaps(), unless config.disable_overlap) a step
    // launches the next batch first and then processes the previous one: its outputs are the
    // previous step's. The next batch is scheduled before those tokens are known, so each
    // sampled request gets a placeholder token; a request that finishes at step N has had one
    // more token launched at N + 1, which is dropped (never reported; its K/V not cached).
    std::vector<RequestOutput> step();
    // Ends a request in any state (a compile of its grammar goes on and fills the cache); its
    // final output (finish_reason "abort") comes from the next step(). Unknown or finished ids
    // are ignored.
    void abort(const std::string& request_id);
    bool has_unfinished() const {
        return scheduler_->has_unfinished() || !pending_.empty() || in_flight_.has_value() ||
               !compiling_.empty();
    }
    // Requests not yet running: the scheduler's waiting ones and those whose grammar compiles.
    size_t num_waiting() const { return scheduler_->num_waiting() + compiling_.size(); }
    bool overlapping() const { return overlap_; }
    // The runner's GPU step timing (EngineConfig::measure_gpu_idle), and its reset.
    std::optional<ModelRunner::StepTiming> step_timing() const { return runner_->step_timing(); }
    void reset_step_timing() { runner_->reset_step_timing(); }

    // Runs every prompt to completion; outputs in prompt order.
    std::vector<RequestOutput> generate(const std::vector<Prompt>& prompts,
                                        const SamplingParams& params);
    std::vector<RequestOutput> generate(const std::vector<Prompt>& prompts,
                                        const std::vector<SamplingParams>& params);

    // Compiles the grammar of params.structured_outputs into the process's grammar cache, where
    // add_request then finds it: the server calls it on the request's own thread, so that a bad
    // constraint is an Error there (a 400) and the engine finds the grammar ready. Thread-safe
    // (may run beside step()). Throws Error for a bad constraint; no-op without one.
    void precompile(const SamplingParams& params);

    // Structured output's host time, in seconds (the server's /metrics): `mask` gets each step's
    // time filling token masks (steps that filled any), on the engine's thread; `compile` each
    // grammar built and compiled (cache hits cost nothing and report nothing), on the thread
    // that compiled it (the engine's compile thread, or precompile's caller). Unset (the default):
    // nothing is measured. Set before requests arrive.
    struct StructuredTimers {
        std::function<void(double)> mask, compile;
    };
    void set_structured_timers(StructuredTimers timers) { timers_ = std::move(timers); }

    // generation_config.json's defaults (temperature, top_p, ...) on top of vLLM's.
    const SamplingParams& default_params() const { return default_params_; }
    const ModelConfig& model_config() const { return runner_->config(); }
    const EngineConfig& config() const { return config_; }
    const Tokenizer* tokenizer() const { return tokenizer_ ? &*tokenizer_ : nullptr; }
    const Scheduler& scheduler() const { return *scheduler_; }
    const std::vector<int64_t>& eos_token_ids() const { return stop_rules_.eos_token_ids; }
    // The EOS ids and max_model_len every request stops on (the pipeline's detokenizer needs
    // the same to reach the same verdicts).
    const StopRules& stop_rules() const { return stop_rules_; }

  private:
    struct Tracked;  // a Request plus its OutputProcessor and the output built so far
    // A launched step not yet processed: where each of its sampling rows' token goes.
    struct InFlight {
        struct Row {
            Tracked* tracked;
            size_t index;  // of its placeholder in output_ids
        };
        std::vector<Row> rows;
        // Its tokens when collected before it is processed (launch's structured-output masks).
        std::optional<std::vector<SampledToken>> tokens;
    };

    // previous: the step in flight, if any (overlap).
    InFlight launch(const Batch& batch, InFlight* previous);
    void process(InFlight& step, std::vector<RequestOutput>& outputs);
    // Requests whose grammar compile finished: into the scheduler, or (it failed) ended with an
    // output. With nothing else to run it first waits a moment for a compile.
    void admit_compiled(std::vector<RequestOutput>& outputs);
    // Collects the step's tokens into step.tokens and advances the grammars of its rows by them.
    void collect_early(InFlight& step);
    // The grammar of t takes output token `index` (once: again is a no-op); grammar_rejected if
    // it refuses it.
    void advance_grammar(Tracked& t, size_t index, int32_t token);
    void append_token(Tracked& t, size_t index, const SampledToken& sampled);
    RequestOutput output_of(Tracked& t);
    // The compiled grammar of a request's structured_outputs, compiled on this thread on a cache
    // miss. Error for a bad schema, regex or grammar. Thread-safe.
    std::shared_ptr<const structured::CompiledGrammar> compile(const StructuredOutput& spec);
    // grammar_cache_, taken on first use for the tokenizer's vocabulary. Error without a
    // tokenizer. Thread-safe.
    structured::GrammarCache& grammar_cache();

    EngineConfig config_;
    std::unique_ptr<ModelRunner> runner_;
    std::optional<Tokenizer> tokenizer_;
    std::unique_ptr<Scheduler> scheduler_;
    SamplingParams default_params_;
    StopRules stop_rules_;
    std::map<std::string, std::unique_ptr<Tracked>> requests_;
    std::vector<std::string> pending_;  // ids finished outside step() (aborts)
    bool overlap_ = false;
    std::optional<InFlight> in_flight_;  // overlap: the step launched, not yet processed
    // Finished requests a launched step may still name; freed once that step is processed.
    std::vector<std::unique_ptr<Tracked>> retired_, retiring_;
    // The process's grammars for this vocabulary, compiled once per distinct spec.
    std::shared_ptr<structured::GrammarCache> grammar_cache_;
    std::once_flag grammar_cache_once_;  // compile() may run on precompile's threads
    std::atomic<structured::GrammarCache*> ready_grammar_cache_{nullptr};  // once built
    StructuredTimers timers_;
    std::mt19937_64 seed_rng_;
    int64_t next_id_ = 0;
    // Requests added while their grammar compiles, in arrival order (not in the scheduler yet).
    struct Compiling {
        Tracked* tracked;
        std::shared_future<GrammarCompiler::Compiled> grammar;
    };
    std::vector<Compiling> compiling_;
    // Started at the first cache miss. Last: destroyed first, as its thread calls compile().
    std::unique_ptr<GrammarCompiler> compiler_;
};

// A node of a multi-node group with node_rank > 0 (`miniinfer serve ... --node-rank 1`): runs
// its tensor_parallel_size / nnodes ranks (threads) on config.device, each joining rank 0 over
// TCP, loading its shard and running every step rank 0 sends, until rank 0 ends
// (distributed/rank_startup.h). Throws Error if a rank fails.
void run_worker_node(const EngineConfig& config);

}  // namespace miniinfer
