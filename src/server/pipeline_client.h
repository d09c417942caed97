// PipelineClient: the multi-process EngineClient (`use_multiprocess`). It starts the tokenizer,
// engine core and detokenizer processes (pipeline_worker.h), sends requests, aborts and pings
// over ZeroMQ, and turns what comes back into the same RequestOutputs and metrics as EngineLoop.
//
// The frontend keeps its own Tokenizer and ModelConfig (chat templates, /tokenize, limits);
// max_model_len, the EOS ids and the default sampling parameters come from the engine process once
// its model is loaded (the constructor waits for that).
//
// If a child process dies: the log says which (role, pid) and how (exit status or signal);
// every request in flight ends with finish_reason "error"; ping() answers false and submit()
// throws EngineUnavailable from then on. Destruction stops the children (SIGTERM, then
// SIGKILL after 5 s), reaps them and removes the socket directory; open requests end with
// finish_reason "abort". Construct it on a thread that outlives it (the children's
// PR_SET_PDEATHSIG follows the thread that started them).
#pragma once

#include <atomic>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "config/engine_config.h"
#include "server/engine_client.h"
#include "server/metrics.h"
#include "server/pipeline_ipc.h"
#include "server/pipeline_messages.h"
#include "server/pipeline_process.h"
#include "server/request_tracker.h"

namespace miniinfer {

class PipelineClient : public EngineClient {
  public:
    // Throws Error if a process cannot start or the engine process fails to load the model.
    // metrics may be null; max_queued as EngineLoop's.
    PipelineClient(const EngineConfig& config, Metrics* metrics, int64_t max_queued);
    ~PipelineClient() override;

    std::shared_ptr<OutputChannel> submit(
        const std::string& id, const Prompt& prompt, const SamplingParams& params,
        std::shared_ptr<OutputChannel> channel = nullptr) override;
    // submit() without waiting for the verdict: the future throws what submit() would. The
    // engine receives requests in the order of these calls (generate uses this: one round trip
    // for all its prompts, and requests without a seed draw theirs in input order).
    std::future<void> submit_async(const std::string& id, const Prompt& prompt,
                                   const SamplingParams& params,
                                   std::shared_ptr<OutputChannel> channel);
    void abort(const std::string& id) override;
    bool ping(std::chrono::milliseconds timeout) override;

    // For an emergency exit (a second SIGTERM): the children to kill and the directory to
    // remove without going through the destructor.
    std::vector<pid_t> child_pids() const { return children_->pids(); }
    const std::filesystem::path& socket_dir() const { return dir_.path(); }

    const Tokenizer* tokenizer() const override { return tokenizer_ ? &*tokenizer_ : nullptr; }
    const ModelConfig& model_config() const override { return model_config_; }
    const SamplingParams& default_params() const override { return default_params_; }
    int64_t max_model_len() const override { return max_model_len_; }
    // The EOS ids every request stops on (the engine process's StopRules).
    const std::vector<int64_t>& eos_token_ids() const { return eos_token_ids_; }

  private:
    void wait_until_ready();
    void receive_loop();
    void handle(const Json& message);
    void on_child_exit(const pipeline::ChildExit& exit);
    void send(zmq::socket_t& socket, const Json& message);
    // Answers every waiting submit() (EngineUnavailable) and ping() (false).
    void fail_waiters(const std::string& why);

    EngineConfig config_;
    ModelConfig model_config_;
    std::optional<Tokenizer> tokenizer_;
    SamplingParams default_params_;
    int64_t max_model_len_ = 0;
    std::vector<int64_t> eos_token_ids_;
    Metrics* metrics_;
    int64_t max_queued_;
    RequestTracker tracker_;

    pipeline::IpcDir dir_;  // destroyed last: after every socket and child
    zmq::context_t context_{1};
    zmq::socket_t inbox_;
    std::mutex send_mutex_;  // ZeroMQ sockets are single-threaded: sends from many handlers
    zmq::socket_t to_tokenizer_, to_engine_;
    std::unique_ptr<pipeline::ChildProcesses> children_;

    std::mutex waiters_mutex_;  // guards what follows up to the receiver
    bool dead_ = false;         // a child died: nothing more can be served
    std::string death_;         // which one and how
    std::map<std::string, std::promise<void>> verdicts_;  // submits waiting for the engine's answer
    std::map<uint64_t, std::promise<bool>> pings_;
    uint64_t next_ping_ = 0;

    pipeline::OutputAssembler assembler_;  // receiver thread only
    std::atomic<int64_t> num_waiting_{0};
    int64_t num_preemptions_seen_ = 0;  // receiver thread only
    std::atomic<bool> ready_{false};    // the engine process has loaded the model
    std::atomic<bool> stopping_{false};
    std::thread receiver_;
};

}  // namespace miniinfer
