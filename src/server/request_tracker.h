// RequestTracker: the open requests of an EngineClient. It knows where each request's outputs
// go (its OutputChannel) and times them for Metrics: time to first token, inter-token latency,
// time per output token, end-to-end latency, prompt/generation token counts, prefix-cache hits
// and finish reasons. EngineLoop and PipelineClient share it, so /metrics means the same in
// both modes. Thread-safe (one mutex; a few operations per output).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "server/engine_client.h"
#include "server/metrics.h"

namespace miniinfer {

class RequestTracker {
  public:
    explicit RequestTracker(Metrics* metrics) : metrics_(metrics) {}  // metrics may be null

    // Starts tracking `id` (its arrival time is now); its outputs go to `channel`.
    void add(const std::string& id, std::shared_ptr<OutputChannel> channel);
    // Stops tracking `id` without an output (its submit failed).
    void remove(const std::string& id);
    // Pushes `out` to its request's channel and records its timing; a finished request is
    // forgotten. Outputs of unknown ids are dropped (the request was already ended).
    void publish(RequestOutput out);
    // Ends every open request with a final output (finish_reason, error); returns how many.
    size_t finish_all(const std::string& finish_reason, const std::string& error = "");
    bool contains(const std::string& id) const;

  private:
    using Clock = std::chrono::steady_clock;
    struct Open {
        std::shared_ptr<OutputChannel> channel;
        Clock::time_point arrival, first_token, last_token;
        size_t num_tokens = 0;
    };
    void record(Open& r, const RequestOutput& out, Clock::time_point now);

    Metrics* metrics_;
    mutable std::mutex mutex_;
    std::map<std::string, Open> open_;
};

}  // namespace miniinfer
