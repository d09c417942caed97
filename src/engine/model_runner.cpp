#include "engine/model_runner.h"

#include <algorithm>
#include <future>

#include "core/check.h"
#include "core/logging.h"
#include "distributed/control_messages.h"

namespace miniinfer {

void ModelRunner::launch(const Batch& batch, std::span<const SamplerInput> sampling,
                         const std::function<void()>& before_sampling) {
    if (before_sampling) before_sampling();
    const bool has_placeholders =
        std::any_of(batch.input_ids.begin(), batch.input_ids.end(), is_placeholder);
    std::vector<SampledToken> tokens;
    if (has_placeholders) {
        Batch resolved = batch;
        for (int32_t& id : resolved.input_ids)
            if (is_placeholder(id)) {
                MI_CHECK(placeholder_row(id) < last_tokens_.size(),
                         "placeholder {} refers to no row of the previous step", id);
                id = last_tokens_[placeholder_row(id)];
            }
        tokens = run(resolved, sampling);
    } else {
        tokens = run(batch, sampling);
    }
    last_tokens_.clear();
    for (const SampledToken& t : tokens) last_tokens_.push_back(t.token);
    launched_.push_back(std::move(tokens));
}

std::vector<SampledToken> ModelRunner::collect() {
    MI_CHECK(!launched_.empty(), "collect() without a launched step");
    std::vector<SampledToken> tokens = std::move(launched_.front());
    launched_.pop_front();
    return tokens;
}

CpuModelRunner::CpuModelRunner(QwenModel model, int64_t num_pages, int64_t page_size,
                               int64_t num_state_slots) {
    const ModelConfig& c = model.config();
    MI_CHECK(num_state_slots > 0 || c.num_linear_attention_layers() == 0,
             "{}: a hybrid model needs state slots", c.model_type);
    kv_.emplace_back(c.num_kv_layers(), num_pages, page_size, c.num_kv_heads, c.head_dim);
    if (num_state_slots > 0) state_.emplace(c, num_state_slots);
    models_.push_back(std::move(model));
}

std::unique_ptr<CpuModelRunner> CpuModelRunner::load_parallel(
    const std::filesystem::path& model_dir, LoadFormat format, uint64_t seed, int64_t world,
    bool expert_parallel, int64_t num_pages, int64_t page_size) {
    MI_CHECK(world >= 1, "tensor_parallel_size {}", world);
    std::unique_ptr<CpuModelRunner> runner(new CpuModelRunner());
    runner->group_ = std::make_unique<CpuCommunicator::Group>(world);
    for (int64_t r = 0; r < world; ++r) {
        runner->comms_.push_back(std::make_unique<CpuCommunicator>(*runner->group_, r));
        runner->pools_.push_back(
            std::make_unique<ThreadPool>(tensor_parallel::rank_threads(world)));
        QwenModel model =
            QwenModel::load(model_dir, format, seed,
                            CpuParallel{r, world, expert_parallel,
                                        world > 1 ? runner->comms_.back().get() : nullptr});
        const ModelConfig& c = model.config();
        runner->kv_.emplace_back(c.num_layers, num_pages, page_size, model.num_local_kv_heads(),
                                 c.head_dim);
        runner->models_.push_back(std::move(model));
    }
    return runner;
}

void run_cpu_rank(const EngineConfig& config, int64_t rank, int64_t /*local_rank*/,
                  StepReceiver& steps, const Json& w) {
    const int64_t world = config.tensor_parallel_size;
    std::optional<QwenModel> model;
    std::optional<KvCache> kv;
    std::string status;
    try {
        model.emplace(QwenModel::load(
            config.model_dir, parse_load_format(w.at("load_format").get<std::string>()),
            w.at("seed").get<uint64_t>(),
            CpuParallel{rank, world, w.at("expert_parallel").get<bool>(), &steps.collectives()}));
        const ModelConfig& m = model->config();
        tensor_parallel::check_same_model(w, m, config.model_dir);
        if (w.at("kv_cache_dtype") != "auto") model->use_fp8_kv_cache();
        kv.emplace(m.num_layers, w.at("num_pages").get<int64_t>(), w.at("page_size").get<int64_t>(),
                   model->num_local_kv_heads(), m.head_dim);
    } catch (const Error& e) {
        status = e.what();
    }
    if (!steps.report(status)) {
        if (!status.empty()) fail("tensor-parallel rank {}: {}", rank, status);
        return;  // another rank cannot come
    }
    while (const std::optional<DecodedStep> step = steps.next_step())
        model->forward(step->batch(), *kv);
}

std::unique_ptr<CpuModelRunner> CpuModelRunner::load_distributed(const EngineConfig& config) {
    const int64_t world = config.tensor_parallel_size;
    std::unique_ptr<CpuModelRunner> runner(new CpuModelRunner());
    runner->pools_.push_back(
        std::make_unique<ThreadPool>(tensor_parallel::rank_threads(world / config.nnodes)));
    ThreadPool::Bind bind(*runner->pools_[0]);  // this node's other ranks load at the same time
    runner->steps_ = std::make_unique<StepBroadcaster>(
        config, tensor_parallel::welcome(config, ModelConfig::load(config.model_dir)),
        run_cpu_rank);
    // The others load their shards while rank 0 loads its own.
    QwenModel model = QwenModel::load(
        config.model_dir, parse_load_format(config.load_format), config.seed,
        CpuParallel{0, world, config.enable_expert_parallel, &runner->steps_->collectives()});
    runner->steps_->wait_for_ranks();
    const ModelConfig& c = model.config();
    runner->kv_.emplace_back(c.num_layers, config.num_pages, config.page_size,
                             model.num_local_kv_heads(), c.head_dim);
    runner->models_.push_back(std::move(model));
    MI_LOG_INFO("tensor-parallel: all {} ranks joined and loaded their shards", world);
    return runner;
}

// steps_ goes first (members in reverse order): every other rank ends before rank 0's model.
CpuModelRunner::~CpuModelRunner() = default;

// Every rank at once (they meet in the all-reduces), rank 0 on this thread.
Tensor CpuModelRunner::forward_all_ranks(const ForwardBatch& fb) {
    if (steps_) {  // the other ranks are in other threads or processes: tell them the step
        steps_->broadcast(fb);
        ThreadPool::Bind bind(*pools_[0]);
        return models_[0].forward(fb, kv_[0]);
    }
    if (models_.size() == 1) return models_[0].forward(fb, kv_[0], state_ ? &*state_ : nullptr);
    std::vector<std::future<Tensor>> others;
    for (size_t r = 1; r < models_.size(); ++r)
        others.push_back(std::async(std::launch::async, [this, r, &fb] {
            ThreadPool::Bind bind(*pools_[r]);
            return models_[r].forward(fb, kv_[r]);
        }));
    Tensor logits;
    {
        ThreadPool::Bind bind(*pools_[0]);
        logits = models_[0].forward(fb, kv_[0]);
    }
    for (auto& f : others) f.get();  // the same logits; rethrows a rank's error
    return logits;
}

std::vector<SampledToken> CpuModelRunner::run(const Batch& b,
                                              std::span<const SamplerInput> sampling) {
    MI_CHECK(sampling.size() == b.logits_indices.size(), "{} sampling inputs for {} logits rows",
             sampling.size(), b.logits_indices.size());
    const ForwardBatch fb = forward_batch_of(b);
    Tensor logits = forward_all_ranks(fb);  // [num_sampling, vocab]
    if (sampling.empty()) return {};
    std::vector<SamplerInput> inputs(sampling.begin(), sampling.end());
    const int64_t vocab = logits.size(1);
    for (size_t i = 0; i < inputs.size(); ++i)
        inputs[i].logits =
            std::span<const float>(logits.data<float>() + int64_t(i) * vocab, size_t(vocab));
    return sample_batch(inputs);
}

}  // namespace miniinfer
