// EngineLoop: an LLMEngine on its own thread, shared by many HTTP handler threads.
//
// Handlers submit() a request and read its outputs from the returned OutputChannel, in order,
// until the final one; abort() ends a request (a client went away). Bad input is reported by
// submit() itself (it waits for the engine thread's verdict). The loop answers ping() between
// steps, which is what /health checks. Destruction stops the thread; unfinished requests get
// a final output with finish_reason "abort".
//
// Two threads: the engine thread only steps the engine and hands each step's outputs over in
// one piece; a publisher thread routes them to the channels (one wake-up per request) and
// records the metrics. So the GPU waits for neither the handlers' wake-ups nor the metrics.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <variant>

#include "engine/llm_engine.h"
#include "server/metrics.h"

namespace miniinfer {

// Outputs of one engine request, produced by the engine thread, consumed by one handler.
class OutputChannel {
public:
    void push(RequestOutput out);
    // The next output, or nullopt after `timeout` (the caller checks its client meanwhile).
    std::optional<RequestOutput> next(std::chrono::milliseconds timeout);

private:
    std::mutex mutex_;
    std::condition_variable ready_;
    std::deque<RequestOutput> queue_;
};

class QueueFull : public Error {
public:
    using Error::Error;
};

class EngineLoop {
public:
    // `engine` is built by the caller (it may take long); max_queued: requests waiting beyond
    // this many are refused with QueueFull.
    EngineLoop(std::unique_ptr<LLMEngine> engine, Metrics* metrics, int64_t max_queued);
    ~EngineLoop();

    // Throws Error (bad input) or QueueFull. The id must be unique (the server makes them).
    // Outputs go to `channel` (shared by the n choices of one API request) or a new one.
    std::shared_ptr<OutputChannel> submit(const std::string& id, const Prompt& prompt, const SamplingParams& params,
                                          std::shared_ptr<OutputChannel> channel = nullptr);
    void abort(const std::string& id);
    // True if the engine thread answered within `timeout`.
    bool ping(std::chrono::milliseconds timeout);

    // Immutable after construction: safe from any thread.
    const Tokenizer* tokenizer() const { return engine_->tokenizer(); }
    const ModelConfig& model_config() const { return engine_->model_config(); }
    const SamplingParams& default_params() const { return engine_->default_params(); }
    int64_t max_model_len() const { return engine_->config().max_model_len; }

private:
    using Command = std::function<void()>;  // runs on the engine thread
    // What the engine thread hands the publisher, in order: a new request's channel, or one
    // step's outputs with the scheduler's numbers after it.
    struct Registration {
        std::string id;
        std::shared_ptr<OutputChannel> channel;
        std::chrono::steady_clock::time_point arrival;
    };
    struct StepResult {
        std::vector<RequestOutput> outputs;
        std::chrono::steady_clock::time_point time;
        int64_t running = 0, waiting = 0, preemptions = 0;
        double kv_usage = 0;
    };
    using Event = std::variant<Registration, StepResult>;

    void run();
    void post(Command command);
    void hand_over(Event event);
    void run_publisher();
    void publish(StepResult& step);

    std::unique_ptr<LLMEngine> engine_;
    Metrics* metrics_;
    int64_t max_queued_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<Command> commands_;
    bool stop_ = false;
    std::atomic<int64_t> num_waiting_{0};
    // Engine thread -> publisher thread.
    std::mutex events_mutex_;
    std::condition_variable events_ready_;
    std::deque<Event> events_;
    bool engine_done_ = false;
    // Publisher thread only:
    std::map<std::string, std::shared_ptr<OutputChannel>> channels_;
    struct Timing {
        std::chrono::steady_clock::time_point arrival, first_token, last_token;
        size_t num_tokens = 0;
    };
    std::map<std::string, Timing> timings_;
    int64_t num_preemptions_seen_ = 0;
    std::thread publisher_;  // started before the engine thread, joined after it
    std::thread thread_;
};

}  // namespace miniinfer
