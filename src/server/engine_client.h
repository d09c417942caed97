// EngineClient: what the HTTP server (and `generate`) talk to. Two implementations:
// EngineLoop (the engine on a thread of this process) and PipelineClient (tokenizer, engine
// core and detokenizer as child processes joined by ZeroMQ). Both deliver the same outputs.
//
// A caller submit()s a request and reads its outputs from an OutputChannel, in order, until
// the final one (finished == true). Every method is safe from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "config/model_config.h"
#include "config/sampling_params.h"
#include "core/check.h"
#include "engine/request_output.h"
#include "tokenizer/tokenizer.h"

namespace miniinfer {

// Outputs of engine requests, produced by the engine side, consumed by one handler (shared by
// the n choices of one API request).
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

// submit() refused a request because too many are waiting (HTTP 429).
class QueueFull : public Error {
  public:
    using Error::Error;
};

// The admission check of every EngineClient (--max-queued), written once: the refusal for a
// request that arrives while `num_waiting` requests wait, or nullopt to admit it. max_queued
// <= 0: no limit. Callers check twice, early on the caller's thread (cheap, approximate) and
// again where the queue is exact (the engine's thread or process), with the same words.
std::optional<QueueFull> check_queue(int64_t num_waiting, int64_t max_queued);

// The engine is gone (a pipeline process died): nothing can be served any more (HTTP 503).
class EngineUnavailable : public Error {
  public:
    using Error::Error;
};

class EngineClient {
  public:
    virtual ~EngineClient() = default;

    // Queues a request; its outputs go to `channel` (or a new one, returned). The id must be
    // unique (the server makes them). Throws Error (bad input: the same messages as
    // LLMEngine::add_request), QueueFull or EngineUnavailable; then nothing was queued.
    virtual std::shared_ptr<OutputChannel> submit(
        const std::string& id, const Prompt& prompt, const SamplingParams& params,
        std::shared_ptr<OutputChannel> channel = nullptr) = 0;
    // Ends a request; its final output has finish_reason "abort". Unknown ids are ignored.
    virtual void abort(const std::string& id) = 0;
    // True if the engine loop answered within `timeout` (what /health checks).
    virtual bool ping(std::chrono::milliseconds timeout) = 0;

    // Immutable after construction.
    virtual const Tokenizer* tokenizer() const = 0;  // null: the model has none
    virtual const ModelConfig& model_config() const = 0;
    virtual const SamplingParams& default_params() const = 0;
    virtual int64_t max_model_len() const = 0;
};

}  // namespace miniinfer
