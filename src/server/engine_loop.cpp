#include "server/engine_loop.h"

#include <future>

#include "core/logging.h"

namespace miniinfer {

EngineLoop::EngineLoop(std::unique_ptr<LLMEngine> engine, Metrics* metrics, int64_t max_queued)
    : engine_(std::move(engine)), metrics_(metrics), max_queued_(max_queued), tracker_(metrics),
      thread_([this] { run(); }) {}

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
    // Text is tokenized here, on the caller's thread, not on the engine thread.
    const Prompt ids = prompt.token_ids.empty() && !prompt.text.empty() && tokenizer()
                           ? Prompt::from_ids(tokenizer()->encode(prompt.text))
                           : prompt;
    std::promise<std::string> verdict;  // "" = accepted, else the error
    auto result = verdict.get_future();
    post([&, channel] {
        try {
            engine_->add_request(ids, params, id);
            tracker_.add(id, channel);
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
            for (RequestOutput& out : engine_->step()) tracker_.publish(std::move(out));
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
    tracker_.finish_all("abort");  // shutting down: end every open stream
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
