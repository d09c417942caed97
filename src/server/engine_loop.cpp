#include "server/engine_loop.h"

#include <future>

#include "core/logging.h"

namespace miniinfer {
namespace {

// The engine, reporting structured output's times to metrics (from its own thread: Metrics is
// thread-safe). Set before the engine thread starts.
std::unique_ptr<LLMEngine> timed(std::unique_ptr<LLMEngine> engine, Metrics* metrics) {
    if (metrics)
        engine->set_structured_timers(
            {.mask = [metrics](double s) { metrics->observe_structured_mask(s); },
             .compile = [metrics](double s) { metrics->observe_grammar_compile(s); }});
    return engine;
}

}  // namespace

EngineLoop::EngineLoop(std::unique_ptr<LLMEngine> engine, Metrics* metrics, int64_t max_queued)
    : engine_(timed(std::move(engine), metrics)),
      metrics_(metrics),
      max_queued_(max_queued),
      tracker_(metrics),
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
                                                  const SamplingParams& params,
                                                  std::shared_ptr<OutputChannel> channel) {
    if (failed_) throw EngineUnavailable(unavailable_message());
    if (std::optional<QueueFull> full = check_queue(num_waiting_.load(), max_queued_)) throw *full;
    if (!channel) channel = std::make_shared<OutputChannel>();
    // A structured output grammar compiles here too, so the engine thread finds it cached.
    engine_->precompile(params);
    // Text is tokenized here, on the caller's thread, not on the engine thread.
    const Prompt ids = prompt.token_ids.empty() && !prompt.text.empty() && tokenizer()
                           ? Prompt::from_ids(tokenizer()->encode(prompt.text))
                           : prompt;
    // The verdict comes from the engine thread, which also counts the queue exactly (the
    // check above only turns requests away early): a burst of submits cannot slip past it.
    struct Verdict {
        bool queue_full = false, unavailable = false;
        std::string error;  // "" = accepted
    };
    std::promise<Verdict> verdict;
    auto result = verdict.get_future();
    post([&, channel] {
        if (failed_) {
            verdict.set_value({.unavailable = true, .error = unavailable_message()});
            return;
        }
        if (std::optional<QueueFull> full =
                check_queue(int64_t(engine_->num_waiting()), max_queued_)) {
            verdict.set_value({.queue_full = true, .error = full->what()});
            return;
        }
        try {
            engine_->add_request(ids, params, id);
            tracker_.add(id, channel);
            ++num_waiting_;
            verdict.set_value({});
        } catch (const Error& e) {
            verdict.set_value({.error = e.what()});
        }
    });
    const Verdict v = result.get();
    if (v.unavailable) throw EngineUnavailable(v.error);
    if (v.queue_full) throw QueueFull(v.error);
    if (!v.error.empty()) throw Error(v.error);
    return channel;
}

void EngineLoop::abort(const std::string& id) {
    post([this, id] { engine_->abort(id); });
}

bool EngineLoop::ping(std::chrono::milliseconds timeout) {
    if (failed_) return false;
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
            wake_.wait(lock,
                       [&] { return stop_ || !commands_.empty() || engine_->has_unfinished(); });
            if (stop_) break;
            commands.swap(commands_);
        }
        for (Command& c : commands) c();
        if (failed_ || !engine_->has_unfinished()) continue;
        StepResult step;
        try {
            step.outputs = engine_->step();
        } catch (const std::exception& e) {
            // A bug, a GPU fault, a tensor-parallel peer gone: the engine cannot go on, and
            // stepping it again is not safe. Every open request ends with the reason, and new
            // ones are refused (503) while the server stays up to say so.
            failure_ = e.what();
            failed_ = true;
            MI_LOG_ERROR("engine step failed: {}; the engine stops serving", failure_);
            {
                std::lock_guard lock(steps_mutex_);  // after the steps already handed over
                StepResult failed;
                failed.failed = true;
                steps_.push_back(std::move(failed));
            }
            steps_ready_.notify_one();
            continue;
        }
        const Scheduler& s = engine_->scheduler();
        step.running = int64_t(s.num_running());
        step.waiting = int64_t(engine_->num_waiting());
        step.preemptions = s.num_preemptions();
        step.kv_usage = s.kv_usage();
        num_waiting_ = step.waiting;
        {
            std::lock_guard lock(steps_mutex_);
            steps_.push_back(std::move(step));
        }
        steps_ready_.notify_one();
    }
    {
        std::lock_guard lock(mutex_);  // answer submits that raced the shutdown
        for (Command& c : commands_) c();
        commands_.clear();
    }
    {
        std::lock_guard lock(steps_mutex_);
        engine_done_ = true;
    }
    steps_ready_.notify_one();
}

// The publisher: every step handed over so far, in order; once the engine thread is done,
// every request still open ends with finish_reason "abort".
void EngineLoop::run_publisher() {
    for (;;) {
        std::deque<StepResult> steps;
        bool done = false;
        {
            std::unique_lock lock(steps_mutex_);
            steps_ready_.wait(lock, [&] { return engine_done_ || !steps_.empty(); });
            steps.swap(steps_);
            done = engine_done_;
        }
        for (StepResult& step : steps) publish(step);
        if (done) break;
    }
    tracker_.finish_all("abort");
}

std::string EngineLoop::unavailable_message() const {
    return "the engine is unavailable: " + failure_;
}

void EngineLoop::publish(StepResult& step) {
    if (step.failed) {
        tracker_.finish_all("error", "the engine failed: " + failure_);
        return;
    }
    for (RequestOutput& out : step.outputs) tracker_.publish(std::move(out));
    if (!metrics_) return;
    metrics_->set_requests(step.running, step.waiting);
    metrics_->set_kv_cache_usage(step.kv_usage);
    metrics_->add_preemptions(step.preemptions - num_preemptions_seen_);
    num_preemptions_seen_ = step.preemptions;
}

}  // namespace miniinfer
