#include "engine/llm_engine.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <mutex>

#include "core/host_memory.h"
#include "core/logging.h"
#include "core/thread_pool.h"
#include "distributed/rank_startup.h"
#include "engine/request_inputs.h"
#include "engine/scripted_runner.h"
#include "structured/grammar_matcher.h"
#include "structured/vocabulary.h"
#ifdef MINIINFER_HAS_CUDA
#include "core/cuda/device_buffer.h"
#include "engine/cuda_model_runner.h"
#include "models/cuda_model.h"
#endif

namespace miniinfer {

struct LLMEngine::Tracked {
    Request request;
    std::optional<OutputProcessor> output;  // set once the request is valid
    std::string text, delta;
    std::vector<TokenLogprob> logprobs;
    size_t num_reported = 0;  // output tokens already in an output
    size_t num_resolved = 0;  // output tokens known (the rest are placeholders)
    // Structured output: the grammar's position after the resolved tokens, and the mask of the
    // next token (filled at launch; the runner reads it until the step is collected).
    std::optional<structured::GrammarMatcher> matcher;
    std::vector<uint32_t> mask;
    size_t grammar_tokens = 0;      // output tokens the grammar has seen (reasoning included)
    bool grammar_rejected = false;  // it refused the next one (the request ends in an error)
    // Thinking: the output is free until this token (StructuredOutput::reasoning_end); the
    // matcher, untouched so far, constrains the tokens after it.
    std::optional<int32_t> reasoning_end;
};

namespace {

// Penalties and bad words of more than one token read the generated ids' values, which a
// placeholder does not have yet. (A grammar's mask needs them too, but only at sampling: launch
// collects the previous step while the GPU runs the forward.)
bool needs_output_values(const SamplingParams& p) {
    return p.repetition_penalty != 1.0 || p.frequency_penalty != 0.0 || p.presence_penalty != 0.0 ||
           std::any_of(p.bad_words_token_ids.begin(), p.bad_words_token_ids.end(),
                       [](const auto& word) { return word.size() > 1; });
}

}  // namespace

namespace {

bool contains(const std::vector<int64_t>& ids, int32_t id) {
    return std::find(ids.begin(), ids.end(), id) != ids.end();
}

// tokenizer_config.json's eos_token ("<|im_end|>" or {"content": ...}) as an id, if any.
std::optional<int32_t> tokenizer_eos(const std::filesystem::path& dir, const Tokenizer& tokenizer) {
    const auto path = dir / "tokenizer_config.json";
    if (!std::filesystem::exists(path)) return std::nullopt;
    Json json = read_json_file(path);
    Json eos = json.value("eos_token", Json());
    if (eos.is_object()) eos = eos.value("content", Json());
    if (!eos.is_string()) return std::nullopt;
    return tokenizer.token_to_id(eos.get<std::string>());
}

std::unique_ptr<ModelRunner> load_runner(EngineConfig& config) {
    ModelConfig model_config = ModelConfig::load(config.model_dir);
    config.resolve(model_config);
    if (!config.scripted_outputs.empty())
        return std::make_unique<ScriptedRunner>(config.model_dir, config.scripted_outputs);
    if (config.device == "cuda") {
#ifdef MINIINFER_HAS_CUDA
        if (cuda::device_count() == 0)
            fail(
                "--device cuda: no usable CUDA device or driver was found ({}); run with --device "
                "cpu",
                cuda::unavailable_reason());
        if (config.tensor_parallel_size > 1 || config.enable_expert_parallel) {
            if (config.node_rank != 0)
                fail("node_rank {} runs ranks for node 0 and no engine (run_worker_node)",
                     config.node_rank);
            if (config.tensor_parallel_size == 1)
                fail("--enable-expert-parallel needs --tensor-parallel-size > 1");
            auto runner = CudaModelRunner::load_parallel(config);
            config.num_pages = runner->num_pages();
            return runner;
        }
        const WeightTarget bf16{.dtype = DType::kBF16};
        ModelWeights weights = parse_load_format(config.load_format) == LoadFormat::kDummy
                                   ? dummy_cuda_weights(model_config, config.seed, bf16)
                                   : load_weights(model_config, config.model_dir, bf16);
        auto runner =
            std::make_unique<CudaModelRunner>(config, std::move(model_config), std::move(weights));
        config.num_pages = runner->num_pages();
        config.num_state_slots = runner->num_state_slots();
        return runner;
#else
        fail(
            "--device cuda: this build of MiniInfer has no CUDA backend (configure with nvcc "
            "present)");
#endif
    }
    const LoadFormat format = parse_load_format(config.load_format);
    if (config.nnodes > 1) {
        if (config.node_rank != 0)
            fail("node_rank {} runs ranks for node 0 and no engine (run_worker_node)",
                 config.node_rank);
        auto runner = CpuModelRunner::load_distributed(config);
        if (config.fp8_kv_cache()) runner->use_fp8_kv_cache();  // the others learn it from rank 0
        return runner;
    }
    std::unique_ptr<CpuModelRunner> runner;
    if (config.tensor_parallel_size > 1 || config.enable_expert_parallel) {
        runner = CpuModelRunner::load_parallel(
            config.model_dir, format, config.seed, config.tensor_parallel_size,
            config.enable_expert_parallel, config.num_pages, config.page_size);
    } else {
        runner = std::make_unique<CpuModelRunner>(
            QwenModel::load(config.model_dir, format, config.seed), config.num_pages,
            config.page_size, config.num_state_slots);
    }
    if (config.fp8_kv_cache()) runner->use_fp8_kv_cache();
    return runner;
}

// What a tensor-parallel rank > 0 runs on config.device, chosen here beside load_runner: the
// rank start-up (distributed/rank_startup.h) knows no runner.
tensor_parallel::RankMain rank_main(const EngineConfig& config) {
    if (config.device == "cuda") {
#ifdef MINIINFER_HAS_CUDA
        return run_cuda_rank;
#else
        return [](const EngineConfig&, int64_t rank, int64_t, StepReceiver&, const Json&) {
            fail("tensor-parallel rank {}: this build has no CUDA backend", rank);
        };
#endif
    }
    return run_cpu_rank;
}

// The process's grammar cache of a vocabulary: engines of one model (the server's, a test's
// several) compile each schema once. Keyed by the vocabulary's contents; never freed (one
// entry per model served, each holding at most GrammarCache's max_entries grammars).
std::shared_ptr<structured::GrammarCache> shared_grammar_cache(
    std::shared_ptr<const structured::Vocabulary> vocab) {
    static std::mutex mutex;
    static std::map<uint64_t, std::shared_ptr<structured::GrammarCache>> caches;
    std::lock_guard lock(mutex);
    auto& cache = caches[vocab->fingerprint()];
    if (!cache) cache = std::make_shared<structured::GrammarCache>(std::move(vocab));
    return cache;
}

// EngineConfig::generation_config: where the sampling defaults come from (see there).
GenerationConfig load_generation_config(const EngineConfig& c) {
    GenerationConfig model = GenerationConfig::load(c.model_dir);
    if (c.generation_config == "auto") return model;
    if (c.generation_config != "vllm") return GenerationConfig::load(c.generation_config);
    GenerationConfig defaults;
    defaults.eos_token_ids = model.eos_token_ids;  // where to stop is the model's, not a default
    defaults.bos_token_id = model.bos_token_id;
    return defaults;
}

}  // namespace

void run_worker_node(const EngineConfig& config) {
    tensor_parallel::run_worker_node(config, rank_main(config));
}

LLMEngine::LLMEngine(EngineConfig config)
    : LLMEngine(config, load_runner(config), load_tokenizer(config.model_dir),
                load_generation_config(config)) {
    std::vector<int64_t>& eos_ids = stop_rules_.eos_token_ids;
    if (tokenizer_)
        if (auto eos = tokenizer_eos(config_.model_dir, *tokenizer_);
            eos && !contains(eos_ids, *eos))
            eos_ids.push_back(*eos);
}

LLMEngine::LLMEngine(EngineConfig config, std::unique_ptr<ModelRunner> runner,
                     std::optional<Tokenizer> tokenizer, GenerationConfig generation)
    : config_(std::move(config)),
      runner_(std::move(runner)),
      tokenizer_(std::move(tokenizer)),
      seed_rng_(config_.seed) {
    const ModelConfig& model = runner_->config();
    const int64_t wanted_len = config_.max_model_len;
    config_.resolve(model);
    if (wanted_len > config_.max_model_len)
        MI_LOG_WARN("max_model_len lowered from {} to {}: the KV cache holds only that many tokens",
                    wanted_len, config_.max_model_len);
    MI_LOG_INFO("KV cache: {} pages of {} tokens ({} tokens, {:.1f} MiB); max_model_len {}",
                config_.num_pages, config_.page_size, config_.num_pages * config_.page_size,
                double(config_.num_pages * config_.page_size * config_.kv_bytes_per_token(model)) /
                    1048576.0,
                config_.max_model_len);
    scheduler_ = std::make_unique<Scheduler>(config_);
    overlap_ = runner_->overlaps() && !config_.disable_overlap;
    default_params_ = SamplingParams::from_defaults(generation);
    stop_rules_.eos_token_ids = model.eos_token_ids;
    for (int64_t id : generation.eos_token_ids)
        if (!contains(stop_rules_.eos_token_ids, int32_t(id)))
            stop_rules_.eos_token_ids.push_back(id);
    stop_rules_.max_model_len = config_.max_model_len;
    if (const double age = process_age_seconds(); age >= 0)
        MI_LOG_INFO("engine ready {:.2f} s after the process started", age);
}

LLMEngine::~LLMEngine() = default;

std::string LLMEngine::add_request(const Prompt& prompt, const SamplingParams& params,
                                   std::string request_id) {
    if (request_id.empty()) request_id = std::to_string(next_id_++);
    if (requests_.count(request_id)) fail("request id '{}' is already in use", request_id);
    const int64_t vocab = model_config().vocab_size;
    params.validate(vocab);
    auto t = std::make_unique<Tracked>();
    Request& r = t->request;
    if (!prompt.token_ids.empty()) {
        r.prompt_ids = prompt.token_ids;
    } else if (!prompt.text.empty()) {
        if (!tokenizer_)
            fail(
                "this model directory has no tokenizer.json: give prompt token ids instead of "
                "text");
        r.prompt_ids = tokenizer_->encode(prompt.text);
    }
    truncate_prompt(r.prompt_ids, params, config_.max_model_len);
    for (int32_t id : r.prompt_ids)
        if (id < 0 || id >= vocab)
            fail("prompt token id {} is outside the vocabulary [0, {})", id, vocab);
    r.id = request_id;
    r.params = params;
    resolve_bad_words(r.params, tokenizer());
    if (!r.params.bad_words.empty()) r.params.validate(vocab);  // the resolved ids
    if (params.structured_outputs) {
        if (!tokenizer_) fail("structured output needs the model's tokenizer.json");
        // Not cached: compiled below, once nothing else can refuse the request. No cache yet:
        // its vocabulary is built on the compile thread too.
        if (structured::GrammarCache* cache = ready_grammar_cache_.load())
            if (auto cached = cache->find(*params.structured_outputs))
                t->matcher.emplace(std::move(cached));
        // No such token: the constraint starts at the first token (StructuredOutput's rule).
        if (const std::string& end = params.structured_outputs->reasoning_end; !end.empty())
            t->reasoning_end = tokenizer_->token_to_id(end);
    }
    r.seed = params.seed.value_or(seed_rng_());
    r.arrival = next_id_++;
    scheduler_->validate_request(r);
    t->output.emplace(params, stop_rules_,
                      tokenizer_ && config_.detokenize ? &*tokenizer_ : nullptr,
                      int64_t(r.prompt_ids.size()));
    if (params.structured_outputs && !t->matcher) {
        if (!compiler_)
            compiler_ = std::make_unique<GrammarCompiler>(
                [this](const StructuredOutput& spec) { return compile(spec); });
        compiling_.push_back({t.get(), compiler_->compile(*params.structured_outputs)});
    } else {
        scheduler_->add(&r);
    }
    requests_.emplace(request_id, std::move(t));
    return request_id;
}

structured::GrammarCache& LLMEngine::grammar_cache() {
    if (!tokenizer_) fail("structured output needs the model's tokenizer.json");
    std::call_once(grammar_cache_once_, [&] {
        grammar_cache_ = shared_grammar_cache(structured::Vocabulary::from_tokenizer(
            *tokenizer_, int32_t(model_config().vocab_size),
            std::vector<int32_t>(stop_rules_.eos_token_ids.begin(),
                                 stop_rules_.eos_token_ids.end())));
        ready_grammar_cache_ = grammar_cache_.get();
    });
    return *grammar_cache_;
}

std::shared_ptr<const structured::CompiledGrammar> LLMEngine::compile(
    const StructuredOutput& spec) {
    structured::GrammarCache& cache = grammar_cache();
    if (!timers_.compile) return cache.get(spec);
    double seconds = 0;
    auto compiled = cache.get(spec, &seconds);
    if (seconds > 0) timers_.compile(seconds);
    return compiled;
}

void LLMEngine::precompile(const SamplingParams& params) {
    if (params.structured_outputs) compile(*params.structured_outputs);
}

std::vector<RequestOutput> LLMEngine::step() {
    std::vector<RequestOutput> outputs;
    admit_compiled(outputs);
    for (const std::string& id : std::exchange(pending_, {}))
        outputs.push_back(output_of(*requests_.at(id)));
    std::optional<InFlight> previous = std::exchange(in_flight_, std::nullopt);
    // Penalties and bad words need the last token's value: then this step waits for it.
    if (previous && std::any_of(previous->rows.begin(), previous->rows.end(), [](const auto& row) {
            return needs_output_values(row.tracked->request.params);
        })) {
        process(*previous, outputs);
        previous.reset();
    }
    Batch batch = scheduler_->schedule();
    if (!batch.empty()) {
        InFlight launched = launch(batch, previous ? &*previous : nullptr);
        if (overlap_)
            in_flight_ = std::move(launched);
        else
            process(launched, outputs);
    }
    if (previous) process(*previous, outputs);
    return outputs;
}

void LLMEngine::admit_compiled(std::vector<RequestOutput>& outputs) {
    if (compiling_.empty()) return;
    // Idle but for compiles: a short wait instead of a busy loop, short so that the caller
    // still takes new requests and aborts promptly.
    constexpr auto kIdleWait = std::chrono::milliseconds(2);
    if (!scheduler_->has_unfinished() && !in_flight_ && pending_.empty())
        compiling_.front().grammar.wait_for(kIdleWait);
    std::erase_if(compiling_, [&](const Compiling& c) {
        if (c.grammar.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return false;
        Tracked& t = *c.tracked;
        try {
            t.matcher.emplace(c.grammar.get());
            scheduler_->add(&t.request);
        } catch (const Error& e) {  // what add_request threw when it compiled there
            t.request.error = e.what();
            t.delta += t.output->finish(FinishReason::kError);
            scheduler_->finish(&t.request, FinishReason::kError);
            outputs.push_back(output_of(t));
        }
        return true;
    });
}

// Hands the batch to the runner and, before its tokens exist, moves every request on: its
// scheduled tokens count as computed and each sampled one gets a placeholder, so that the
// next schedule can already give it its next step. Rows under a grammar get their masks after
// the forward is enqueued: the previous step (in flight, if any) is collected then, its tokens
// advance the matchers, and the masks are computed while the GPU runs this step's forward.
LLMEngine::InFlight LLMEngine::launch(const Batch& batch, InFlight* previous) {
    std::vector<SamplerInput> sampling;
    sampling.reserve(batch.sampling.size());
    std::vector<Tracked*> constrained;
    for (const Request* r : batch.sampling) {
        Tracked& t = *requests_.at(r->id);
        if (t.matcher) {
            t.mask.resize(size_t(t.matcher->compiled().vocab().num_mask_words()));
            constrained.push_back(&t);
        }
        sampling.push_back(SamplerInput{.logits = {},
                                        .params = &r->params,
                                        .prompt_ids = r->prompt_ids,
                                        .output_ids = r->output_ids,
                                        .eos_ids = stop_rules_.eos_token_ids,
                                        .seed = r->seed,
                                        .token_bitmask = t.mask});
    }
    auto fill_masks = [&] {
        if (previous) collect_early(*previous);
        const auto start = std::chrono::steady_clock::now();
        // One matcher a thread (each has its own stacks; the compiled grammar is read only): at
        // a few tens of µs a mask, a batch of hundreds takes longer than the GPU's step alone.
        ThreadPool::current().parallel_for(int64_t(constrained.size()), [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) {
                Tracked* t = constrained[size_t(i)];
                // A request its previous token ends (EOS, or a token the grammar refused)
                // samples a token that is dropped: any mask does. While thinking, every token
                // may come.
                if (t->grammar_rejected || t->matcher->terminated() || t->reasoning_end) {
                    std::fill(t->mask.begin(), t->mask.end(), ~0u);
                    continue;
                }
                MI_CHECK(t->grammar_tokens == t->request.output_ids.size(),
                         "request {}: a mask before the grammar took every token", t->request.id);
                t->matcher->fill_next_token_mask(t->mask);
            }
        });
        if (timers_.mask)
            timers_.mask(
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    };
    runner_->launch(
        batch, sampling,
        constrained.empty() ? std::function<void()>() : std::function<void()>(fill_masks));
    scheduler_->update(batch);
    InFlight step;
    step.rows.reserve(batch.sampling.size());
    for (size_t i = 0; i < batch.sampling.size(); ++i) {
        Request& r = *batch.sampling[i];
        Tracked& t = *requests_.at(r.id);
        step.rows.push_back({&t, r.output_ids.size()});
        r.output_ids.push_back(ModelRunner::placeholder(i));
        r.last_token_launched = t.output->ends_by_length(int64_t(r.output_ids.size()));
    }
    return step;
}

// The launched step's tokens replace their placeholders, in order; a request that finished
// meanwhile (an earlier token ended it, or an abort) drops its token.
void LLMEngine::process(InFlight& step, std::vector<RequestOutput>& outputs) {
    std::vector<SampledToken> tokens =
        step.tokens ? std::move(*std::exchange(step.tokens, std::nullopt)) : runner_->collect();
    MI_CHECK(tokens.size() == step.rows.size(), "{} tokens for {} sampling rows", tokens.size(),
             step.rows.size());
    // Requests retired before this step was processed are named by no launched step any more.
    retired_ = std::exchange(retiring_, {});
    for (size_t i = 0; i < tokens.size(); ++i) {
        Tracked& t = *step.rows[i].tracked;
        if (t.request.finished()) continue;
        append_token(t, step.rows[i].index, tokens[i]);
        outputs.push_back(output_of(t));
    }
    retired_.clear();
}

// The stop checks are OutputProcessor's; a request it ends is finished in the scheduler too
// (its pages go back to the pool before the next schedule). Tokens launched after it are
// dropped, and K/V computed for its last token stays out of the prefix cache, as in the plain
// loop (where that K/V never exists).
void LLMEngine::append_token(Tracked& t, size_t index, const SampledToken& sampled) {
    Request& r = t.request;
    MI_CHECK(index == t.num_resolved && ModelRunner::is_placeholder(r.output_ids[index]),
             "request {}: token {} arrives out of order", r.id, index);
    r.output_ids[index] = sampled.token;
    ++t.num_resolved;
    if (r.params.logprobs)
        t.logprobs.push_back({sampled.token, sampled.logprob, sampled.top_logprobs});
    // The mask allowed only tokens the grammar takes (EOS once the text is complete). A token
    // outside it means the mask allowed nothing (a grammar with a dead end): that request
    // ends with an error rather than the server.
    advance_grammar(t, index, sampled.token);
    if (t.grammar_rejected) {
        r.error = fmt::format("structured output: the grammar allows no token after {} tokens",
                              t.num_resolved - 1);
        t.delta += t.output->finish(FinishReason::kError);
        r.output_ids.resize(t.num_resolved - 1);
        --t.num_resolved;
        r.num_computed = std::min(r.num_computed, std::max<int64_t>(r.num_tokens() - 1, 0));
        scheduler_->finish(&r, FinishReason::kError);
        return;
    }
    OutputProcessor::Update update = t.output->append(sampled.token);
    t.delta += update.delta_text;
    if (!update.finished()) return;
    r.output_ids.resize(t.num_resolved);
    r.num_computed = std::min(r.num_computed, r.num_tokens() - 1);
    scheduler_->finish(&r, update.finish_reason);
}

void LLMEngine::collect_early(InFlight& step) {
    step.tokens = runner_->collect();
    MI_CHECK(step.tokens->size() == step.rows.size(), "{} tokens for {} sampling rows",
             step.tokens->size(), step.rows.size());
    for (size_t i = 0; i < step.rows.size(); ++i)
        if (!step.rows[i].tracked->request.finished())
            advance_grammar(*step.rows[i].tracked, step.rows[i].index, (*step.tokens)[i].token);
}

void LLMEngine::advance_grammar(Tracked& t, size_t index, int32_t token) {
    if (!t.matcher || t.grammar_tokens > index) return;  // none, or it took this token already
    MI_CHECK(t.grammar_tokens == index, "request {}: the grammar is {} tokens behind", t.request.id,
             index - t.grammar_tokens);
    if (t.reasoning_end) {  // thinking: free up to and including the reasoning_end token
        if (token == *t.reasoning_end) t.reasoning_end.reset();
        ++t.grammar_tokens;
    } else if (t.matcher->accept_token(token)) {
        ++t.grammar_tokens;
    } else {
        t.grammar_rejected = true;
    }
}

void LLMEngine::abort(const std::string& request_id) {
    auto it = requests_.find(request_id);
    if (it == requests_.end() || it->second->request.finished()) return;
    Tracked& t = *it->second;
    Request& r = t.request;
    std::erase_if(compiling_, [&](const Compiling& c) { return c.tracked == &t; });
    t.delta += t.output->finish(FinishReason::kAbort);
    r.output_ids.resize(t.num_resolved);  // placeholders of launched steps: dropped
    r.num_computed = std::min(r.num_computed, std::max<int64_t>(r.num_tokens() - 1, 0));
    scheduler_->finish(&r, FinishReason::kAbort);
    pending_.push_back(request_id);
}

// What changed since the last output; the whole request too when it has finished (it is then
// forgotten).
RequestOutput LLMEngine::output_of(Tracked& t) {
    Request& r = t.request;
    t.text += t.delta;
    const size_t from = t.num_reported;
    t.num_reported = t.num_resolved;
    RequestOutput out;
    out.request_id = r.id;
    out.new_token_ids.assign(r.output_ids.begin() + long(from),
                             r.output_ids.begin() + long(t.num_resolved));
    if (t.logprobs.size() > from)
        out.new_logprobs.assign(t.logprobs.begin() + long(from), t.logprobs.end());
    out.delta_text = std::exchange(t.delta, {});
    out.num_output_tokens = int64_t(t.num_resolved);
    out.finished = r.finished();
    out.finish_reason = finish_reason_name(r.finish_reason);
    out.stop_reason = t.output->stop_reason();
    out.error = r.error;
    out.num_prompt_tokens = int64_t(r.prompt_ids.size());
    out.num_cached_tokens = r.num_cached_tokens;
    if (!r.finished()) return out;
    out.prompt_token_ids = std::move(r.prompt_ids);
    out.token_ids = std::move(r.output_ids);
    out.text = std::move(t.text);
    out.logprobs = std::move(t.logprobs);
    auto it = requests_.find(r.id);
    retiring_.push_back(std::move(it->second));  // a launched step may still name it
    requests_.erase(it);
    return out;
}

std::vector<RequestOutput> LLMEngine::generate(const std::vector<Prompt>& prompts,
                                               const SamplingParams& params) {
    return generate(prompts, std::vector<SamplingParams>(prompts.size(), params));
}

std::vector<RequestOutput> LLMEngine::generate(const std::vector<Prompt>& prompts,
                                               const std::vector<SamplingParams>& params) {
    MI_CHECK(prompts.size() == params.size(), "{} prompts, {} sampling params", prompts.size(),
             params.size());
    std::vector<RequestOutput> results(prompts.size());
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < prompts.size(); ++i) {
        try {
            index[add_request(prompts[i], params[i])] = i;
        } catch (const Error& e) {
            results[i].finished = true;
            results[i].finish_reason = "error";
            results[i].error = e.what();
        }
    }
    while (has_unfinished())
        for (RequestOutput& out : step())
            if (out.finished && index.count(out.request_id))
                results[index[out.request_id]] = std::move(out);
    return results;
}

}  // namespace miniinfer
