#include "engine/llm_engine.h"

#include <algorithm>
#include <filesystem>

#include "core/logging.h"
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
};

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
    if (config.device == "cuda") {
#ifdef MINIINFER_HAS_CUDA
        if (cuda::device_count() == 0) fail("--device cuda: no CUDA device is visible");
        const WeightTarget bf16{.dtype = DType::kBF16};
        ModelWeights weights = parse_load_format(config.load_format) == LoadFormat::kDummy
                                   ? dummy_cuda_weights(model_config, config.seed, bf16)
                                   : load_weights(model_config, config.model_dir, bf16);
        auto runner =
            std::make_unique<CudaModelRunner>(config, std::move(model_config), std::move(weights));
        config.num_pages = runner->num_pages();
        return runner;
#else
        fail(
            "--device cuda: this build of MiniInfer has no CUDA backend (configure with nvcc "
            "present)");
#endif
    }
    QwenModel model =
        QwenModel::load(config.model_dir, parse_load_format(config.load_format), config.seed);
    return std::make_unique<CpuModelRunner>(std::move(model), config.num_pages, config.page_size);
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
                double(config_.num_pages * config_.page_size *
                       EngineConfig::kv_bytes_per_token(model, config_.device)) /
                    1048576.0,
                config_.max_model_len);
    scheduler_ = std::make_unique<Scheduler>(config_);
    default_params_ = SamplingParams::from_defaults(generation);
    stop_rules_.eos_token_ids = model.eos_token_ids;
    for (int64_t id : generation.eos_token_ids)
        if (!contains(stop_rules_.eos_token_ids, int32_t(id)))
            stop_rules_.eos_token_ids.push_back(id);
    stop_rules_.max_model_len = config_.max_model_len;
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
    for (int32_t id : r.prompt_ids)
        if (id < 0 || id >= vocab)
            fail("prompt token id {} is outside the vocabulary [0, {})", id, vocab);
    r.id = request_id;
    r.params = params;
    r.seed = params.seed.value_or(seed_rng_());
    r.arrival = next_id_++;
    scheduler_->validate_request(r);
    t->output.emplace(params, stop_rules_,
                      tokenizer_ && config_.detokenize ? &*tokenizer_ : nullptr,
                      int64_t(r.prompt_ids.size()));
    scheduler_->add(&r);
    requests_.emplace(request_id, std::move(t));
    return request_id;
}

std::vector<RequestOutput> LLMEngine::step() {
    std::vector<RequestOutput> outputs;
    for (const std::string& id : std::exchange(pending_, {}))
        outputs.push_back(output_of(*requests_.at(id)));
    Batch batch = scheduler_->schedule();
    if (batch.empty()) return outputs;
    std::vector<SamplerInput> sampling;
    for (const Request* r : batch.sampling)
        sampling.push_back(SamplerInput{.logits = {},
                                        .params = &r->params,
                                        .prompt_ids = r->prompt_ids,
                                        .output_ids = r->output_ids,
                                        .eos_ids = stop_rules_.eos_token_ids,
                                        .seed = r->seed});
    std::vector<SampledToken> tokens = runner_->run(batch, sampling);
    scheduler_->update(batch);
    for (size_t i = 0; i < tokens.size(); ++i) {
        Tracked& t = *requests_.at(batch.sampling[i]->id);
        append_token(t, tokens[i]);
        outputs.push_back(output_of(t));
    }
    return outputs;
}

// The stop checks are OutputProcessor's; a request it ends is finished in the scheduler too
// (its pages go back to the pool before the next schedule).
void LLMEngine::append_token(Tracked& t, const SampledToken& sampled) {
    Request& r = t.request;
    r.output_ids.push_back(sampled.token);
    if (r.params.logprobs)
        t.logprobs.push_back({sampled.token, sampled.logprob, sampled.top_logprobs});
    OutputProcessor::Update update = t.output->append(sampled.token);
    t.delta += update.delta_text;
    if (update.finished()) scheduler_->finish(&r, update.finish_reason);
}

void LLMEngine::abort(const std::string& request_id) {
    auto it = requests_.find(request_id);
    if (it == requests_.end() || it->second->request.finished()) return;
    Tracked& t = *it->second;
    t.delta += t.output->finish(FinishReason::kAbort);
    scheduler_->finish(&t.request, FinishReason::kAbort);
    pending_.push_back(request_id);
}

// What changed since the last output; the whole request too when it has finished (it is then
// forgotten).
RequestOutput LLMEngine::output_of(Tracked& t) {
    Request& r = t.request;
    t.text += t.delta;
    const size_t from = t.num_reported;
    t.num_reported = r.output_ids.size();
    RequestOutput out;
    out.request_id = r.id;
    out.new_token_ids.assign(r.output_ids.begin() + long(from), r.output_ids.end());
    if (t.logprobs.size() > from)
        out.new_logprobs.assign(t.logprobs.begin() + long(from), t.logprobs.end());
    out.delta_text = std::exchange(t.delta, {});
    out.num_output_tokens = int64_t(r.output_ids.size());
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
    requests_.erase(r.id);
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
