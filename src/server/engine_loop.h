// EngineLoop: the single-process EngineClient. An LLMEngine on its own thread, shared by many
// HTTP handler threads.
//
// submit() waits for the engine thread's verdict (bad input is its Error); abort() ends a
// request (a client went away). The loop answers ping() between steps, which is what /health
// checks. Destruction stops the thread; unfinished requests get a final output with
// finish_reason "abort".
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

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

    std::shared_ptr<OutputChannel> submit(const std::string& id, const Prompt& prompt, const SamplingParams& params,
                                          std::shared_ptr<OutputChannel> channel = nullptr) override;
    void abort(const std::string& id) override;
    bool ping(std::chrono::milliseconds timeout) override;

    const Tokenizer* tokenizer() const override { return engine_->tokenizer(); }
    const ModelConfig& model_config() const override { return engine_->model_config(); }
    const SamplingParams& default_params() const override { return engine_->default_params(); }
    int64_t max_model_len() const override { return engine_->config().max_model_len; }

private:
    using Command = std::function<void()>;  // runs on the engine thread
    void run();
    void post(Command command);
    void update_metrics();

    std::unique_ptr<LLMEngine> engine_;
    Metrics* metrics_;
    int64_t max_queued_;
    RequestTracker tracker_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<Command> commands_;
    bool stop_ = false;
    int64_t num_preemptions_seen_ = 0;  // engine thread only
    std::atomic<int64_t> num_waiting_{0};
    std::thread thread_;
};

}  // namespace miniinfer
