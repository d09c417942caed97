#include "engine/model_runner.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <future>

#include "core/check.h"
#include "core/logging.h"
#ifdef MINIINFER_HAS_CUDA
#include "engine/cuda_model_runner.h"
#endif

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

std::string encode_step(const ForwardBatch& b) {
    const std::span<const int32_t> parts[] = {b.input_ids,     b.positions,   b.query_start,
                                              b.seq_lens,      b.block_table, b.slot_mapping,
                                              b.logits_indices};
    std::string out(1, 'S');
    auto put = [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
    put(&b.max_pages, sizeof b.max_pages);
    for (const auto& part : parts) {
        const int64_t n = int64_t(part.size());
        put(&n, sizeof n);
        put(part.data(), part.size_bytes());
    }
    return out;
}

std::optional<DecodedStep> decode_control(const std::string& m) {
    if (m.empty() || m[0] == kQuitMessage) return std::nullopt;
    if (m[0] != 'S') fail("tensor-parallel link: an unknown control message");
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

namespace tensor_parallel {

namespace {
Json identity(const ModelConfig& m) {
    return {
        {"vocab_size", m.vocab_size}, {"num_layers", m.num_layers}, {"hidden_size", m.hidden_size}};
}
}  // namespace

Json welcome(const EngineConfig& c, const ModelConfig& m) {
    return {{"num_pages", c.num_pages},
            {"page_size", c.page_size},
            {"expert_parallel", c.enable_expert_parallel},
            {"seed", c.seed},
            {"load_format", c.load_format},
            {"kv_cache_dtype", c.kv_cache_dtype},
            {"model", identity(m)}};
}

void check_same_model(const Json& welcome, const ModelConfig& m, const std::string& model_dir) {
    if (identity(m) != welcome.at("model"))
        fail("{} is not rank 0's model ({} here, {} there)", model_dir, identity(m).dump(),
             welcome.at("model").dump());
}

}  // namespace tensor_parallel

namespace {
using tensor_parallel::kJoinTimeout;

// Rank `rank` (> 0): joins rank 0, loads its shard with rank 0's settings, reports, then runs
// every step until rank 0 says the end or closes its link. give_up: see TcpCommunicator.
void run_rank(const EngineConfig& config, int64_t rank, int64_t ranks_here,
              const std::atomic<bool>* give_up = nullptr) {
    const int64_t world = config.tensor_parallel_size;
    // A pool of its own for everything this rank does, loading included: ranks on threads of
    // one process must not share one.
    ThreadPool pool(rank_threads(ranks_here));
    ThreadPool::Bind bind(pool);
    TcpCommunicator comm(config.master_addr, int(config.master_port), rank, world, kJoinTimeout,
                         give_up);
    const std::optional<std::string> hello = comm.receive_control();
    // Rank 0 sends a JSON welcome, or the end if it failed to start.
    if (!hello || hello->empty() || (*hello)[0] != '{') return;
    const Json w = Json::parse(*hello);
    if (config.device == "cuda") {
#ifdef MINIINFER_HAS_CUDA
        run_cuda_rank(config, rank, rank % ranks_here, comm, w);
        return;
#else
        fail("tensor-parallel rank {}: this build has no CUDA backend", rank);
#endif
    }
    std::optional<QwenModel> model;
    std::optional<KvCache> kv;
    std::string status;
    try {
        model.emplace(QwenModel::load(
            config.model_dir, parse_load_format(w.at("load_format").get<std::string>()),
            w.at("seed").get<uint64_t>(),
            CpuParallel{rank, world, w.at("expert_parallel").get<bool>(), &comm}));
        const ModelConfig& m = model->config();
        tensor_parallel::check_same_model(w, m, config.model_dir);
        if (w.at("kv_cache_dtype") != "auto") model->use_fp8_kv_cache();
        kv.emplace(m.num_layers, w.at("num_pages").get<int64_t>(), w.at("page_size").get<int64_t>(),
                   model->num_local_kv_heads(), m.head_dim);
    } catch (const Error& e) {
        status = e.what();
    }
    comm.send_status(status);
    if (!status.empty()) fail("tensor-parallel rank {}: {}", rank, status);
    while (std::optional<std::string> m = comm.receive_control()) {
        const std::optional<DecodedStep> step = decode_control(*m);
        if (!step) return;
        model->forward(step->batch(), *kv);
    }
}

}  // namespace

std::thread start_rank_thread(const EngineConfig& config, int64_t rank, int64_t ranks_here) {
    return std::thread([config, rank, ranks_here] {
        try {
            run_rank(config, rank, ranks_here);
        } catch (const std::exception& e) {
            MI_LOG_ERROR("{}", e.what());
            // A CUDA rank that fails leaves its peers waiting in NCCL, with no timeout: end the
            // process rather than hang. A CPU rank's peers see the closed link and fail the step.
            if (config.device == "cuda") std::_Exit(1);
        }
    });
}

std::unique_ptr<CpuModelRunner> CpuModelRunner::load_distributed(const EngineConfig& config) {
    const int64_t world = config.tensor_parallel_size, here = world / config.nnodes;
    MI_CHECK(config.node_rank == 0 && world > 1, "load_distributed: node 0 of a group only");
    std::unique_ptr<CpuModelRunner> runner(new CpuModelRunner());
    runner->pools_.push_back(std::make_unique<ThreadPool>(rank_threads(here)));
    ThreadPool::Bind bind(*runner->pools_[0]);  // this node's other ranks load at the same time
    for (int64_t r = 1; r < here; ++r)
        runner->local_ranks_.push_back(start_rank_thread(config, r, here));
    MI_LOG_INFO("tensor-parallel rank 0 of {} ({} nodes): waiting for the others on {}:{}", world,
                config.nnodes, config.master_addr, config.master_port);
    runner->tcp_ = std::make_unique<TcpCommunicator>(config.master_addr, int(config.master_port), 0,
                                                     world, kJoinTimeout);
    // The others load their shards while rank 0 loads its own.
    runner->tcp_->send_control(
        tensor_parallel::welcome(config, ModelConfig::load(config.model_dir)).dump());
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
            tcp_->send_control(std::string(1, kQuitMessage));
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
    // A rank that fails (refused by rank 0, say) stops its siblings' connection attempts: rank 0
    // has given up on the group and would never accept them.
    std::atomic<bool> failed{false};
    for (int64_t r = config.node_rank * here; r < (config.node_rank + 1) * here; ++r)
        ranks.push_back(std::async(std::launch::async, [&config, &failed, r, here] {
            try {
                run_rank(config, r, here, &failed);
            } catch (...) {
                failed = true;
                throw;
            }
        }));
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
