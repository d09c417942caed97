#include "server/pipeline_client.h"

#include <unistd.h>

#include <filesystem>

#include "core/logging.h"

namespace miniinfer {

using namespace std::chrono_literals;
using namespace pipeline;

PipelineClient::PipelineClient(const EngineConfig& config, Metrics* metrics, int64_t max_queued)
    : config_(config),
      model_config_(ModelConfig::load(config.model_dir)),
      tokenizer_(load_tokenizer(config.model_dir)),
      metrics_(metrics),
      max_queued_(max_queued),
      tracker_(metrics) {
    EngineConfig checked = config_;  // a bad flag is reported here, before any process starts
    checked.resolve(model_config_);
    const std::filesystem::path& dir = dir_.path();
    inbox_ = bind_inbox(context_, IpcDir::endpoint(dir, "frontend"));
    to_tokenizer_ = connect_to(context_, IpcDir::endpoint(dir, "tokenizer"));
    to_engine_ = connect_to(context_, IpcDir::endpoint(dir, "engine"));
    std::vector<ChildSpec> specs;
    for (const char* role : {"tokenizer", "engine", "detokenizer"})
        specs.push_back({role,
                         {"pipeline-worker", "--role", role, "--ipc-dir", dir.string(),
                          "--parent-pid", std::to_string(getpid()), "--config",
                          config_.to_json().dump(), "--max-queued", std::to_string(max_queued_)}});
    children_ =
        std::make_unique<ChildProcesses>(specs, [this](const ChildExit& e) { on_child_exit(e); });
    wait_until_ready();
    receiver_ = std::thread([this] { receive_loop(); });
}

PipelineClient::~PipelineClient() {
    stopping_ = true;
    children_->terminate_all(5s);
    receiver_.join();
    fail_waiters("the server is shutting down");
    tracker_.finish_all("abort");
}

// The engine process sends "ready" once its model is loaded (through the detokenizer, so all
// three are up). A child that exits meanwhile is a startup failure; its error is in the log.
void PipelineClient::wait_until_ready() {
    for (;;) {
        std::optional<Json> m = receive(inbox_, 100ms);
        {
            std::lock_guard lock(waiters_mutex_);
            if (dead_) fail("the multi-process pipeline did not start: {}", death_);
        }
        if (!m) continue;
        if (m->at("type") != kReady) continue;
        max_model_len_ = m->at("max_model_len").get<int64_t>();
        default_params_ = params_from_json(m->at("default_params"));
        eos_token_ids_ = m->at("eos_token_ids").get<std::vector<int64_t>>();
        MI_LOG_INFO("multi-process pipeline ready (sockets in {})", dir_.path().string());
        ready_ = true;
        return;
    }
}

void PipelineClient::on_child_exit(const ChildExit& e) {
    if (e.expected || stopping_) {
        MI_LOG_INFO("the {} process (pid {}) {}", e.role, e.pid, e.how);
        return;
    }
    const std::string why = fmt::format("the {} process (pid {}) {}", e.role, e.pid, e.how);
    {
        std::lock_guard lock(waiters_mutex_);
        if (dead_) return;
        dead_ = true;
        death_ = why;
    }
    if (!ready_) {  // the constructor reports it
        MI_LOG_ERROR("pipeline: {} while starting", why);
        return;
    }
    MI_LOG_ERROR("pipeline: {}; no more requests can be served (/health answers 503)", why);
    fail_waiters(why);
    const size_t n = tracker_.finish_all("error", "the engine stopped: " + why);
    if (n > 0) MI_LOG_ERROR("pipeline: {} requests in flight ended with an error", n);
}

void PipelineClient::fail_waiters(const std::string& why) {
    std::lock_guard lock(waiters_mutex_);
    for (auto& [id, verdict] : verdicts_) {
        tracker_.remove(id);
        verdict.set_exception(
            std::make_exception_ptr(EngineUnavailable("the engine is unavailable: " + why)));
    }
    verdicts_.clear();
    for (auto& [seq, pong] : pings_) pong.set_value(false);
    pings_.clear();
}

void PipelineClient::send(zmq::socket_t& socket, const Json& message) {
    std::lock_guard lock(send_mutex_);
    pipeline::send(socket, message);
}

std::shared_ptr<OutputChannel> PipelineClient::submit(const std::string& id, const Prompt& prompt,
                                                      const SamplingParams& params,
                                                      std::shared_ptr<OutputChannel> channel) {
    if (!channel) channel = std::make_shared<OutputChannel>();
    submit_async(id, prompt, params, channel).get();
    return channel;
}

std::future<void> PipelineClient::submit_async(const std::string& id, const Prompt& prompt,
                                               const SamplingParams& params,
                                               std::shared_ptr<OutputChannel> channel) {
    if (std::optional<QueueFull> full = check_queue(num_waiting_.load(), max_queued_)) throw *full;
    std::future<void> verdict;
    {
        std::lock_guard lock(waiters_mutex_);
        if (dead_) throw EngineUnavailable("the engine is unavailable: " + death_);
        verdict = verdicts_[id].get_future();
        tracker_.add(id, std::move(channel));
    }
    Json add = {{"type", kAdd}, {"id", id}, {"params", to_json(params)}};
    if (!prompt.token_ids.empty())
        add["ids"] = prompt.token_ids;
    else
        add["text"] = prompt.text;
    send(to_tokenizer_, add);
    return verdict;
}

void PipelineClient::abort(const std::string& id) {
    {
        std::lock_guard lock(waiters_mutex_);
        if (dead_) return;
    }
    send(to_engine_, {{"type", kAbort}, {"id", id}});
}

bool PipelineClient::ping(std::chrono::milliseconds timeout) {
    std::future<bool> pong;
    uint64_t seq = 0;
    {
        std::lock_guard lock(waiters_mutex_);
        if (dead_) return false;
        seq = next_ping_++;
        pong = pings_[seq].get_future();
    }
    send(to_engine_, {{"type", kPing}, {"seq", seq}});
    if (pong.wait_for(timeout) == std::future_status::ready) return pong.get();
    std::lock_guard lock(waiters_mutex_);
    pings_.erase(seq);
    return false;
}

void PipelineClient::receive_loop() {
    while (!stopping_) {
        try {
            if (std::optional<Json> m = receive(inbox_, 100ms)) handle(*m);
        } catch (
            const std::exception& e) {  // a malformed message is a bug in a peer: say so, go on
            MI_LOG_ERROR("pipeline: bad message from a worker: {}", e.what());
        }
    }
}

// One message from the detokenizer (or a rejection from the tokenizer), on the receiver thread.
void PipelineClient::handle(const Json& m) {
    const std::string type = m.at("type").get<std::string>();
    auto answer = [&](const std::string& id, const std::string& error, bool queue_full) {
        std::lock_guard lock(waiters_mutex_);
        auto it = verdicts_.find(id);
        if (it == verdicts_.end()) return;
        if (error.empty()) {
            it->second.set_value();
        } else {
            tracker_.remove(id);
            it->second.set_exception(queue_full ? std::make_exception_ptr(QueueFull(error))
                                                : std::make_exception_ptr(Error(error)));
        }
        verdicts_.erase(it);
    };
    if (type == kOutputs) {
        for (const Json& d : m.at("outputs"))
            if (std::optional<RequestOutput> out = assembler_.apply(delta_from_json(d)))
                tracker_.publish(std::move(*out));
        const Json& stats = m.at("stats");
        num_waiting_ = stats.at("waiting").get<int64_t>();
        if (!metrics_) return;
        metrics_->set_requests(stats.at("running").get<int64_t>(),
                               stats.at("waiting").get<int64_t>());
        metrics_->set_kv_cache_usage(stats.at("kv_usage").get<double>());
        const int64_t preemptions = stats.at("preemptions").get<int64_t>();
        metrics_->add_preemptions(preemptions - num_preemptions_seen_);
        num_preemptions_seen_ = preemptions;
        for (const Json& v : stats.at("mask_seconds"))
            metrics_->observe_structured_mask(v.get<double>());
        for (const Json& v : stats.at("compile_seconds"))
            metrics_->observe_grammar_compile(v.get<double>());
    } else if (type == kAccepted) {
        const std::string id = m.at("id").get<std::string>();
        assembler_.start(id, m.at("prompt_ids").get<std::vector<int32_t>>());
        ++num_waiting_;
        answer(id, "", false);
    } else if (type == kRejected) {
        answer(m.at("id").get<std::string>(), m.at("error").get<std::string>(),
               m.value("queue_full", false));
    } else if (type == kPong) {
        std::lock_guard lock(waiters_mutex_);
        auto it = pings_.find(m.at("seq").get<uint64_t>());
        if (it == pings_.end()) return;
        it->second.set_value(true);
        pings_.erase(it);
    } else {
        MI_LOG_WARN("pipeline: unexpected message '{}'", type);
    }
}

}  // namespace miniinfer
