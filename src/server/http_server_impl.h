// HttpServer's insides, shared by its two source files: http_server.cpp (listening, routes,
// request parsing, drain) and http_responses.cpp (writing a response as the engine's outputs
// arrive, whole or streamed). Not for use outside src/server.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "server/http_listener.h"
#include "server/http_server.h"
#include "server/openai_protocol.h"
#include "server/tool_calls.h"

namespace miniinfer::http_internal {

inline std::string dump(const Json& j) {
    return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

inline ApiError shutdown_error() {
    return {503, "the server is shutting down", "server_error"};
}

inline void send_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
    res.set_content(dump(e.body()), "application/json");
}

// One choice of a response while it is generated.
struct Choice {
    std::string text, reasoning;
    ReasoningSplitter splitter;
    std::optional<ToolCallStreamer> tools;  // when the request parses tool calls
    int64_t num_calls_sent = 0;
    bool role_sent = false;
    RequestOutput last;
};

}  // namespace miniinfer::http_internal

namespace miniinfer {

struct HttpServer::Impl {
    ServerOptions options;
    EngineClient& engine;
    Metrics& metrics;
    const ChatTemplate* chat_template;
    HttpListener server;
    std::atomic<int64_t> next_id{0};
    bool split_reasoning = false;
    // drain(): a timer that shuts down what is still open after the grace period.
    std::mutex drain_mutex;
    std::condition_variable listen_ended;
    bool listening_done = false;
    std::thread drain_timer;

    Impl(ServerOptions o, EngineClient& e, Metrics& m, const ChatTemplate* t)
        : options(std::move(o)),
          engine(e),
          metrics(m),
          chat_template(t),
          server(ConnectionLimits{.max_connections = options.max_connections,
                                  .request_read_timeout = std::chrono::milliseconds(
                                      int64_t(options.request_read_timeout_s * 1000)),
                                  .max_body_bytes = options.max_body_bytes}) {
        split_reasoning = engine.model_config().arch != Arch::kQwen2 && engine.tokenizer() &&
                          engine.tokenizer()->token_to_id("</think>").has_value();
    }

    bool authorized(const httplib::Request& req, httplib::Response& res) {
        if (options.api_key.empty() || req.path == "/health") return true;
        if (req.get_header_value("Authorization") == "Bearer " + options.api_key) return true;
        http_internal::send_error(res, {401, "invalid or missing API key", "authentication_error"});
        return false;
    }

    // A POST route whose body is read here, within the limits, then handed to `handler`.
    void post(const std::string& path,
              std::function<void(const std::string& body, httplib::Response&)> handler) {
        server.Post(path, [this, handler](const httplib::Request&, httplib::Response& res,
                                          const httplib::ContentReader& reader) {
            if (auto body = server.read_body(reader, res)) handler(*body, res);
        });
    }

    void handle_generate(const std::string& body, httplib::Response& res, bool chat);
    void stream_response(httplib::Response& res, std::shared_ptr<ApiRequest> r,
                         std::shared_ptr<OutputChannel> channel, std::vector<std::string> ids,
                         std::string response_id);
    void respond_when_done(httplib::Response& res, std::shared_ptr<ApiRequest> r,
                           std::shared_ptr<OutputChannel> channel, std::vector<std::string> ids,
                           std::string response_id);
    Json choice_json(const ApiRequest& r, size_t index, http_internal::Choice& c,
                     const RequestOutput& out);
    // Tool-call ids: unique in this server's life ("call_<n>_<index in the answer>").
    std::string call_id_prefix() { return "call_" + std::to_string(next_id++) + "_"; }
    // The tokenizer that names logprob tokens: none when the client asked for "token_id:<id>".
    const Tokenizer* logprob_tokenizer(const ApiRequest& r) const {
        return r.tokens_as_ids ? nullptr : engine.tokenizer();
    }
    static Json tool_call_json(const ToolCall& c) {
        return {{"id", c.id},
                {"type", "function"},
                {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
    }
    void setup_routes();
};

}  // namespace miniinfer
