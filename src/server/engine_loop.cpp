#include "server/engine_loop.h"

#include "core/logging.h"

namespace miniinfer {

using Clock = std::chrono::steady_clock;

void OutputChannel::push(RequestOutput out) {
    {
        std::lock_guard lock(mutex_);
        queue_.push_back(std::move(out));
    }
    ready_.notify_one();
}

std::optional<RequestOutput> OutputChannel::next(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    if (!ready_.wait_for(lock, timeout, [&] { return !queue_.empty(); })) return std::nullopt;
    RequestOutput out = std::move(queue_.front());
    queue_.pop_front();
    return out;
}

EngineLoop::EngineLoop(std::unique_ptr<LLMEngine> engine, Metrics* metrics, int64_t max_queued)
    : engine_(std::move(engine)), metrics_(metrics), max_queued_(max_queued), thread_([this] { run(); }) {}

EngineLoop::~EngineLoop() {
    {
        std::lock_guard lock(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
}

void EngineLoop::post(Command command) {
    {
        std::lock_guard lock(mutex_);
        commands_.push_back(std::move(command));
    }
    wake_.notify_all();
}

std::shared_ptr<OutputChannel> EngineLoop::submit(const std::string& id, const Prompt& prompt,
                                                  const SamplingParams& params, std::shared_ptr<OutputChannel> channel) {
    if (max_queued_ > 0 && num_waiting_.load() >= max_queued_)
        throw QueueFull(fmt::format("too many requests are queued ({}); try again later", max_queued_));
    if (!channel) channel = std::make_shared<OutputChannel>();
    std::promise<std::string> verdict;  // "" = accepted, else the error
    auto result = verdict.get_future();
    post([&, channel] {
        try {
            engine_->add_request(prompt, params, id);
            channels_[id] = channel;
            timings_[id].arrival = Clock::now();
            ++num_waiting_;
            verdict.set_value("");
        } catch (const Error& e) {
            verdict.set_value(e.what());
        }
    });
    const std::string error = result.get();
    if (!error.empty()) throw Error(error);
    return channel;
}

void EngineLoop::abort(const std::string& id) {
    post([this, id] { engine_->abort(id); });
}

bool EngineLoop::ping(std::chrono::milliseconds timeout) {
    auto answered = std::make_shared<std::promise<void>>();
    auto future = answered->get_future();
    post([answered] { answered->set_value(); });
    return future.wait_for(timeout) == std::future_status::ready;
}

// The loop: run commands, then one engine step if there is work, else sleep until a command.
void EngineLoop::run() {
    for (;;) {
        std::deque<Command> commands;
        {
            std::unique_lock lock(mutex_);
            wake_.wait(lock, [&] { return stop_ || !commands_.empty() || engine_->has_unfinished(); });
            if (stop_) break;
            commands.swap(commands_);
        }
        for (Command& c : commands) c();
        if (!engine_->has_unfinished()) continue;
        try {
            publish(engine_->step());
        } catch (const std::exception& e) {  // a bug: say which and keep serving is not safe
            MI_LOG_ERROR("engine step failed: {}", e.what());
            throw;
        }
        update_metrics();
    }
    {
        std::lock_guard lock(mutex_);  // answer submits that raced the shutdown
        for (Command& c : commands_) c();
        commands_.clear();
    }
    for (auto& [id, channel] : channels_) {  // shutting down: end every open stream
        RequestOutput out;
        out.request_id = id;
        out.finished = true;
        out.finish_reason = "abort";
        channel->push(std::move(out));
    }
}

void EngineLoop::publish(std::vector<RequestOutput> outputs) {
    const auto now = Clock::now();
    for (RequestOutput& out : outputs) {
        auto it = channels_.find(out.request_id);
        if (it == channels_.end()) continue;
        Timing& t = timings_[out.request_id];
        if (out.token_ids.size() > t.num_tokens) {
            if (t.num_tokens == 0) {
                t.first_token = now;
                if (metrics_) metrics_->observe_time_to_first_token(std::chrono::duration<double>(now - t.arrival).count());
            } else if (metrics_) {
                metrics_->observe_inter_token_latency(std::chrono::duration<double>(now - t.last_token).count());
            }
            if (metrics_) metrics_->add_tokens(0, int64_t(out.token_ids.size() - t.num_tokens));
            t.num_tokens = out.token_ids.size();
            t.last_token = now;
        }
        if (out.finished) {
            if (metrics_) {
                metrics_->add_tokens(out.num_prompt_tokens, 0);
                metrics_->add_prefix_cache(out.num_prompt_tokens, out.num_cached_tokens);
                metrics_->add_request_finished(out.finish_reason);
                metrics_->observe_e2e_request_latency(std::chrono::duration<double>(now - t.arrival).count());
                if (t.num_tokens > 1)
                    metrics_->observe_time_per_output_token(
                        std::chrono::duration<double>(t.last_token - t.first_token).count() / double(t.num_tokens - 1));
            }
            const std::string id = out.request_id;
            it->second->push(std::move(out));
            channels_.erase(it);
            timings_.erase(id);
        } else {
            it->second->push(std::move(out));
        }
    }
}

void EngineLoop::update_metrics() {
    const Scheduler& s = engine_->scheduler();
    num_waiting_ = int64_t(s.num_waiting());
    if (!metrics_) return;
    metrics_->set_requests(int64_t(s.num_running()), int64_t(s.num_waiting()));
    metrics_->set_kv_cache_usage(s.kv_usage());
    metrics_->add_preemptions(s.num_preemptions() - num_preemptions_seen_);
    num_preemptions_seen_ = s.num_preemptions();
}

}  // namespace miniinfer
