#include "engine/model_runner.h"

#include <algorithm>
#include <cstring>
#include <future>

#include "core/check.h"
#include "core/logging.h"

namespace miniinfer {

void ModelRunner::launch(const Batch& batch, std::span<const SamplerInput> sampling) {
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

CpuModelRunner::CpuModelRunner(QwenModel model, int64_t num_pages, int64_t page_size) {
    const ModelConfig& c = model.config();
    kv_.emplace_back(c.num_layers, num_pages, page_size, c.num_kv_heads, c.head_dim);
    models_.push_back(std::move(model));
}

namespace {
// Each of `ranks_here` ranks computing at once on this machine gets a pool of its share of the
// cores.
int rank_threads(int64_t ranks_here) {
    return std::max(1, ThreadPool::global().num_threads() / int(ranks_here));
}
}  // namespace

std::unique_ptr<CpuModelRunner> CpuModelRunner::load_parallel(
    const std::filesystem::path& model_dir, LoadFormat format, uint64_t seed, int64_t world,
    bool expert_parallel, int64_t num_pages, int64_t page_size) {
    MI_CHECK(world >= 1, "tensor_parallel_size {}", world);
    std::unique_ptr<CpuModelRunner> runner(new CpuModelRunner());
    runner->group_ = std::make_unique<CpuCommunicator::Group>(world);
    for (int64_t r = 0; r < world; ++r) {
        runner->comms_.push_back(std::make_unique<CpuCommunicator>(*runner->group_, r));
        runner->pools_.push_back(std::make_unique<ThreadPool>(rank_threads(world)));
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

namespace {

// How long ranks wait for each other to join (other nodes may start later, by hand).
constexpr std::chrono::seconds kJoinTimeout{300};

// Control messages from rank 0 to the other ranks: 'S' + a ForwardBatch, or 'Q' (the end).
constexpr char kStep = 'S', kQuit = 'Q';

std::string encode_step(const ForwardBatch& b) {
    const std::span<const int32_t> parts[] = {b.input_ids,     b.positions,   b.query_start,
                                              b.seq_lens,      b.block_table, b.slot_mapping,
                                              b.logits_indices};
    std::string out(1, kStep);
    auto put = [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
    put(&b.max_pages, sizeof b.max_pages);
    for (const auto& part : parts) {
        const int64_t n = int64_t(part.size());
        put(&n, sizeof n);
        put(part.data(), part.size_bytes());
    }
    return out;
}

// A decoded step: the vectors ForwardBatch views.
struct DecodedStep {
    std::vector<int32_t> parts[7];
    int64_t max_pages = 0;
    ForwardBatch batch() const {
        return {parts[0], parts[1], parts[2], parts[3], parts[4], max_pages, parts[5], parts[6]};
    }
};

DecodedStep decode_step(const std::string& m) {
    DecodedStep d;
    size_t at = 1;
    auto get = [&](void* p, size_t n) {
        if (at + n > m.size()) fail("tensor-parallel link: a truncated step message");
        std::memcpy(p, m.data() + at, n);
        at += n;
    };
    get(&d.max_pages, sizeof d.max_pages);
    for (auto& part : d.parts) {
        int64_t n = 0;
        get(&n, sizeof n);
        if (n < 0 || size_t(n) > m.size()) fail("tensor-parallel link: a corrupt step message");
        part.resize(size_t(n));
        get(part.data(), size_t(n) * sizeof(int32_t));
    }
    return d;
}

// Enough of a model to catch a node that loaded another one.
Json model_identity(const ModelConfig& m) {
    return {
        {"vocab_size", m.vocab_size}, {"num_layers", m.num_layers}, {"hidden_size", m.hidden_size}};
}

// What rank 0 tells the others once they have joined: its settings and the cache's shape.
Json welcome_of(const EngineConfig& c, const ModelConfig& m) {
    return {{"num_pages", c.num_pages},
            {"page_size", c.page_size},
            {"expert_parallel", c.enable_expert_parallel},
            {"seed", c.seed},
            {"load_format", c.load_format},
            {"kv_cache_dtype", c.kv_cache_dtype},
            {"model", model_identity(m)}};
}

// Rank `rank` (> 0): joins rank 0, loads its shard with rank 0's settings, reports, then runs
// every step until rank 0 says the end or closes its link.
void run_rank(const EngineConfig& config, int64_t rank, int64_t ranks_here) {
    const int64_t world = config.tensor_parallel_size;
    // A pool of its own for everything this rank does, loading included: ranks on threads of
    // one process must not share one.
    ThreadPool pool(rank_threads(ranks_here));
    ThreadPool::Bind bind(pool);
    TcpCommunicator comm(config.master_addr, int(config.master_port), rank, world, kJoinTimeout);
    const std::optional<std::string> hello = comm.receive_control();
    if (!hello || hello->empty() || (*hello)[0] == kQuit) return;  // rank 0 failed to start
    const Json w = Json::parse(*hello);
    std::optional<QwenModel> model;
    std::optional<KvCache> kv;
    std::string status;
    try {
        model.emplace(QwenModel::load(
            config.model_dir, parse_load_format(w.at("load_format").get<std::string>()),
            w.at("seed").get<uint64_t>(),
            CpuParallel{rank, world, w.at("expert_parallel").get<bool>(), &comm}));
        const ModelConfig& m = model->config();
        if (model_identity(m) != w.at("model"))
            fail("{} is not rank 0's model ({} here, {} there)", config.model_dir,
                 model_identity(m).dump(), w.at("model").dump());
        if (w.at("kv_cache_dtype") != "auto") model->use_fp8_kv_cache();
        kv.emplace(m.num_layers, w.at("num_pages").get<int64_t>(), w.at("page_size").get<int64_t>(),
                   model->num_local_kv_heads(), m.head_dim);
    } catch (const Error& e) {
        status = e.what();
    }
    comm.send_status(status);
    if (!status.empty()) fail("tensor-parallel rank {}: {}", rank, status);
    while (std::optional<std::string> m = comm.receive_control()) {
        if (m->empty() || (*m)[0] == kQuit) return;
        if ((*m)[0] != kStep) fail("tensor-parallel rank {}: an unknown control message", rank);
        const DecodedStep step = decode_step(*m);
        model->forward(step.batch(), *kv);
    }
}

// run_rank on a thread: an error is logged (rank 0 sees the closed link and fails the step).
std::thread start_rank(const EngineConfig& config, int64_t rank, int64_t ranks_here) {
    return std::thread([config, rank, ranks_here] {
        try {
            run_rank(config, rank, ranks_here);
        } catch (const std::exception& e) {
            MI_LOG_ERROR("{}", e.what());
        }
    });
}

}  // namespace

std::unique_ptr<CpuModelRunner> CpuModelRunner::load_distributed(const EngineConfig& config) {
    const int64_t world = config.tensor_parallel_size, here = world / config.nnodes;
    MI_CHECK(config.node_rank == 0 && world > 1, "load_distributed: node 0 of a group only");
    std::unique_ptr<CpuModelRunner> runner(new CpuModelRunner());
    runner->pools_.push_back(std::make_unique<ThreadPool>(rank_threads(here)));
    ThreadPool::Bind bind(*runner->pools_[0]);  // this node's other ranks load at the same time
    for (int64_t r = 1; r < here; ++r) runner->local_ranks_.push_back(start_rank(config, r, here));
    MI_LOG_INFO("tensor-parallel rank 0 of {} ({} nodes): waiting for the others on {}:{}", world,
                config.nnodes, config.master_addr, config.master_port);
    runner->tcp_ = std::make_unique<TcpCommunicator>(config.master_addr, int(config.master_port), 0,
                                                     world, kJoinTimeout);
    // The others load their shards while rank 0 loads its own.
    runner->tcp_->send_control(welcome_of(config, ModelConfig::load(config.model_dir)).dump());
    QwenModel model =
        QwenModel::load(config.model_dir, parse_load_format(config.load_format), config.seed,
                        CpuParallel{0, world, config.enable_expert_parallel, runner->tcp_.get()});
    const std::vector<std::string> statuses = runner->tcp_->receive_statuses();
    for (size_t i = 0; i < statuses.size(); ++i)
        if (!statuses[i].empty()) fail("tensor-parallel rank {}: {}", i + 1, statuses[i]);
    const ModelConfig& c = model.config();
    runner->kv_.emplace_back(c.num_layers, config.num_pages, config.page_size,
                             model.num_local_kv_heads(), c.head_dim);
    runner->models_.push_back(std::move(model));
    MI_LOG_INFO("tensor-parallel: all {} ranks joined and loaded their shards", world);
    return runner;
}

CpuModelRunner::~CpuModelRunner() {
    if (tcp_) {
        try {
            tcp_->send_control(std::string(1, kQuit));
        } catch (const Error&) {  // a rank already gone
        }
        tcp_.reset();  // closed links end any rank still waiting
    }
    for (std::thread& t : local_ranks_) t.join();
}

void run_worker_node(const EngineConfig& config) {
    const int64_t here = config.tensor_parallel_size / config.nnodes;
    MI_CHECK(config.node_rank > 0, "run_worker_node: node_rank > 0 only");
    MI_LOG_INFO("node {} of {}: ranks {}-{} of {}, joining rank 0 at {}:{}", config.node_rank,
                config.nnodes, config.node_rank * here, (config.node_rank + 1) * here - 1,
                config.tensor_parallel_size, config.master_addr, config.master_port);
    std::vector<std::future<void>> ranks;
    for (int64_t r = config.node_rank * here; r < (config.node_rank + 1) * here; ++r)
        ranks.push_back(
            std::async(std::launch::async, [&config, r, here] { run_rank(config, r, here); }));
    std::string errors;  // every rank's: the first to fail may not be the one that says why
    for (auto& f : ranks) {
        try {
            f.get();
        } catch (const std::exception& e) {
            errors += (errors.empty() ? "" : "; ") + std::string(e.what());
        }
    }
    if (!errors.empty()) fail("{}", errors);
    MI_LOG_INFO("node {}: rank 0 ended the group", config.node_rank);
}

// Every rank at once (they meet in the all-reduces), rank 0 on this thread.
Tensor CpuModelRunner::forward_all_ranks(const ForwardBatch& fb) {
    if (tcp_) {  // the other ranks are in other threads or processes: tell them the step
        tcp_->send_control(encode_step(fb));
        ThreadPool::Bind bind(*pools_[0]);
        return models_[0].forward(fb, kv_[0]);
    }
    if (models_.size() == 1) return models_[0].forward(fb, kv_[0]);
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
    ForwardBatch fb{b.input_ids,   b.positions, b.query_start,  b.seq_lens,
                    b.block_table, b.max_pages, b.slot_mapping, b.logits_indices};
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
