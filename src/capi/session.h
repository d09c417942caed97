// Session: the engine behind one C API handle (one Python LLMEngine). Either an LLMEngine that
// steps on the caller's thread (one process) or a PipelineClient (tokenizer, engine core and
// detokenizer processes); the C API and Python see the same calls and outputs for both.
//
// Requests are added in batches, all or none. Aborted requests are "discarded": their later
// outputs, final included, are dropped here, so a Ctrl-C'd generate leaves nothing behind for
// the next caller. Not thread-safe (one caller at a time; the Python side holds a lock).
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "config/engine_config.h"
#include "config/sampling_params.h"
#include "core/json.h"
#include "engine/request_output.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace miniinfer {

class LLMEngine;
class OutputChannel;
class PipelineClient;

// One request of a batch: an id unique among open requests, the prompt, its parameters.
struct NewRequest {
    std::string request_id;
    Prompt prompt;
    SamplingParams params;
};

// A batch rejected by add_requests: which request (-1: none in particular) and why.
class BatchError : public Error {
  public:
    BatchError(int64_t index, const std::string& message) : Error(message), index(index) {}
    int64_t index;
};

class Session {
  public:
    // Loads the model (and starts the child processes when config.use_multiprocess, running
    // `worker_binary pipeline-worker ...`). Throws Error for a bad config or model.
    Session(const EngineConfig& config, const std::string& worker_binary);
    ~Session();

    // Parses one request of the C API's JSON (prompt, prompt_token_ids, or a
    // prompt_token_range into `token_ids`; params over the engine's defaults, or the defaults
    // when null). Throws Error naming the bad field.
    NewRequest parse_request(const Json& request, std::span<const int32_t> token_ids) const;
    // Queues every request or none: throws BatchError naming the first bad one.
    void add_requests(std::vector<NewRequest> requests);
    // One step's outputs (one process), or those that arrive within timeout_s (pipeline).
    std::vector<RequestOutput> step(double timeout_s);
    // Steps for up to max_seconds; returns only final outputs (see miniinfer_c.h).
    std::vector<RequestOutput> run(double max_seconds);
    // Ends the requests and drops everything they still produce.
    void abort(const std::vector<std::string>& ids);
    bool has_unfinished() const;

    const EngineConfig& config() const { return config_; }  // resolved
    const ModelConfig& model_config() const;
    const SamplingParams& default_params() const;
    int64_t max_model_len() const;
    // The engine overlaps a step's processing with the next one's launch (one process only;
    // the pipeline's engine process decides for itself: false here).
    bool overlapping() const;
    std::vector<int64_t> eos_token_ids() const;
    const Tokenizer& tokenizer() const;         // Error if the model has none
    const ChatTemplate& chat_template() const;  // Error if the model has none

  private:
    // False for outputs of discarded requests (and forgets a discarded one at its final).
    bool keep(const RequestOutput& out);

    EngineConfig config_;
    std::unique_ptr<LLMEngine> engine_;         // one process
    std::unique_ptr<PipelineClient> pipeline_;  // or the pipeline
    std::shared_ptr<OutputChannel> channel_;    // the pipeline's outputs, all requests
    std::set<std::string> open_;                // pipeline: submitted, final not yet seen
    std::set<std::string> discarded_;
    std::optional<ChatTemplate> chat_template_;
};

}  // namespace miniinfer
