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
    : engine_(std::move(engine)),
      metrics_(metrics),
      max_queued_(max_queued),
      publisher_([this] { run_publisher(); }),
      thread_([this] { run(); }) {}

EngineLoop::~EngineLoop() {
    {
        std::lock_guard lock(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
    publisher_.join();
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
            hand_over(Registration{id, channel, Clock::now()});
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
        StepResult step;
        try {
            step.outputs = engine_->step();
        } catch (const std::exception& e) {  // a bug: say which and keep serving is not safe
            MI_LOG_ERROR("engine step failed: {}", e.what());
            throw;
        }
        const Scheduler& s = engine_->scheduler();
        step.time = Clock::now();
        step.running = int64_t(s.num_running());
        step.waiting = int64_t(s.num_waiting());
        step.preemptions = s.num_preemptions();
        step.kv_usage = s.kv_usage();
        num_waiting_ = step.waiting;
        hand_over(std::move(step));
    }
    {
        std::lock_guard lock(mutex_);  // answer submits that raced the shutdown
        for (Command& c : commands_) c();
        commands_.clear();
    }
    {
        std::lock_guard lock(events_mutex_);
        engine_done_ = true;
    }
    events_ready_.notify_one();
}

void EngineLoop::hand_over(Event event) {
    {
        std::lock_guard lock(events_mutex_);
        events_.push_back(std::move(event));
    }
    events_ready_.notify_one();
}

// The publisher: takes everything the engine thread handed over so far, in order.
void EngineLoop::run_publisher() {
    for (;;) {
        std::deque<Event> events;
        bool done = false;
        {
            std::unique_lock lock(events_mutex_);
            events_ready_.wait(lock, [&] { return engine_done_ || !events_.empty(); });
            events.swap(events_);
            done = engine_done_;
        }
        for (Event& e : events) {
            if (auto* r = std::get_if<Registration>(&e)) {
                channels_[r->id] = std::move(r->channel);
                timings_[r->id].arrival = r->arrival;
            } else {
                publish(std::get<StepResult>(e));
            }
        }
        if (done) break;
    }
    for (auto& [id, channel] : channels_) {  // shutting down: end every open stream
        RequestOutput out;
        out.request_id = id;
        out.finished = true;
        out.finish_reason = "abort";
        channel->push(std::move(out));
    }
}

void EngineLoop::publish(StepResult& step) {
    const auto now = step.time;
    for (RequestOutput& out : step.outputs) {
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
    if (!metrics_) return;
    metrics_->set_requests(step.running, step.waiting);
    metrics_->set_kv_cache_usage(step.kv_usage);
    metrics_->add_preemptions(step.preemptions - num_preemptions_seen_);
    num_preemptions_seen_ = step.preemptions;
}

}  // namespace miniinfer
