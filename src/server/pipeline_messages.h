// The messages of the multi-process pipeline and their wire format (MessagePack).
//
//   frontend ──add──► tokenizer ──add (ids)──► engine core ──accepted/outputs+stats/pong──►
//   detokenizer ──accepted/outputs (with text)+stats/pong──► frontend
//   frontend ──abort/ping──► engine core ◄──abort (a stop string matched)── detokenizer
//   tokenizer, engine core ──rejected──► frontend (a bad request; the detokenizer forwards)
//
// Every message is one MessagePack map with "type" (kAdd, ...) and the fields listed beside
// each type. Outputs travel as OutputDelta: only what is new since the request's last output
// (new token ids and logprobs, new text), never the whole token list.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/sampling_params.h"
#include "core/json.h"
#include "engine/request_output.h"

namespace miniinfer::pipeline {

// Message types ("type" field) and their other fields.
inline constexpr const char* kAdd = "add";            // id, params, text | ids
inline constexpr const char* kAccepted = "accepted";  // id, prompt_ids, params
inline constexpr const char* kRejected = "rejected";  // id, error, queue_full
inline constexpr const char* kAbort = "abort";        // id
// One a step: outputs: [OutputDelta (to_json: [id, tokens, finished, cached(, {rest})])],
// stats: {running, waiting, kv_usage, preemptions, mask_seconds, compile_seconds}; the last two
// list structured output's times since the previous message (LLMEngine::StructuredTimers).
inline constexpr const char* kOutputs = "outputs";
inline constexpr const char* kPing = "ping";    // seq
inline constexpr const char* kPong = "pong";    // seq
inline constexpr const char* kReady = "ready";  // max_model_len, default_params, eos_token_ids

// What is new in one request's output since the previous one.
struct OutputDelta {
    std::string request_id;
    std::vector<int32_t> new_token_ids;
    std::vector<TokenLogprob> new_logprobs;  // one per new token, if the request asked for them
    std::string delta_text;                  // filled in by the detokenizer process
    bool finished = false;
    std::string finish_reason, stop_reason, error;
    int64_t num_cached_tokens = 0;

    bool operator==(const OutputDelta&) const = default;
};

// MessagePack bytes of `message`, and back. decode throws Error on bytes that are not
// MessagePack or not a map with a string "type".
std::string encode(const Json& message);
Json decode(std::string_view bytes);

Json to_json(const SamplingParams& params);
SamplingParams params_from_json(const Json& json);
Json to_json(const OutputDelta& delta);
OutputDelta delta_from_json(const Json& json);

// What a step's output of LLMEngine puts on the wire (the whole request of a final output is
// rebuilt at the far end, not sent).
OutputDelta delta_of(const RequestOutput& out);

// The frontend's side: turns a request's deltas back into RequestOutputs as LLMEngine::step
// returns them (this step's change; the whole request in the final one), keeping the whole
// request so far for that final output.
class OutputAssembler {
  public:
    // A request the engine accepted; its deltas may follow.
    void start(const std::string& id, std::vector<int32_t> prompt_ids);
    // The RequestOutput of `delta`; nullopt for an unknown id. A finished request is forgotten.
    std::optional<RequestOutput> apply(const OutputDelta& delta);
    void clear() { whole_.clear(); }

  private:
    std::map<std::string, RequestOutput> whole_;  // each open request's tokens, text, logprobs
};

}  // namespace miniinfer::pipeline
