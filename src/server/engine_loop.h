// EngineLoop: the single-process EngineClient. An LLMEngine on its own thread, shared by many
// HTTP handler threads.
//
// submit() waits for the engine thread's verdict (bad input is its Error); abort() ends a
// request (a client went away). The loop answers ping() between steps, which is what /health
// checks. Destruction stops the thread; unfinished requests get a final output with
// finish_reason "abort". If a step throws (a bug, a GPU fault, a tensor-parallel peer gone),
// the engine is not stepped again: open requests end with finish_reason "error" and the
// reason, submit() throws EngineUnavailable and ping() answers false (HTTP 503).
//
// Two threads: the engine thread only steps the engine and hands each step's outputs over in
// one piece; a publisher thread routes them to the channels (one wake-up per request) and
// records the metrics. So the GPU waits for neither the handlers' wake-ups nor the metrics
// (with 256 streams that was about 2 ms a step).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/llm_engine.h"
#include "server/engine_client.h"
#include "server/metrics.h"
#include "server/request_tracker.h"

namespace miniinfer {

class EngineLoop : public EngineClient {
  public:
    // `engine` is built by the caller (it may take long); max_queued: requests waiting beyond
    // this many are refused with QueueFull.
    EngineLoop(std::unique_ptr<LLMEngine> engine, Metrics* metrics, int64_t max_queued);
    ~EngineLoop() override;

    std::shared_ptr<OutputChannel> submit(
        const std::string& id, const Prompt& prompt, const SamplingParams& params,
        std::shared_ptr<OutputChannel> channel = nullptr) override;
    void abort(const std::string& id) override;
    bool ping(std::chrono::milliseconds timeout) override;

    const Tokenizer* tokenizer() const override { return engine_->tokenizer(); }
    const ModelConfig& model_config() const override { return engine_->model_config(); }
    const SamplingParams& default_params() const override { return engine_->default_params(); }
    int64_t max_model_len() const override { return engine_->config().max_model_len; }

  private:
    using Command = std::function<void()>;  // runs on the engine thread
    // One step's outputs and the scheduler's numbers after it (engine -> publisher thread).
    struct StepResult {
        std::vector<RequestOutput> outputs;
        int64_t running = 0, waiting = 0, preemptions = 0;
        double kv_usage = 0;
        bool failed = false;  // the engine failed here: end every open request
    };
    void run();
    void post(Command command);
    void run_publisher();
    void publish(StepResult& step);
    std::string unavailable_message() const;

    std::unique_ptr<LLMEngine> engine_;
    Metrics* metrics_;
    int64_t max_queued_;
    RequestTracker tracker_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<Command> commands_;
    bool stop_ = false;
    std::atomic<int64_t> num_waiting_{0};
    // A step threw: the engine is not stepped again (failure_ is written once, before failed_).
    std::atomic<bool> failed_{false};
    std::string failure_;
    // Engine thread -> publisher thread.
    std::mutex steps_mutex_;
    std::condition_variable steps_ready_;
    std::deque<StepResult> steps_;
    bool engine_done_ = false;
    int64_t num_preemptions_seen_ = 0;  // publisher thread only
    std::thread publisher_;             // started before the engine thread, joined after it
    std::thread thread_;
};

}  // namespace miniinfer
