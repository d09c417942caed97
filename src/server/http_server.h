// The OpenAI-compatible HTTP server (cpp-httplib): routes, API key, limits, SSE streaming.
//
//   POST /v1/completions, /v1/chat/completions   (stream or not; n; logprobs; usage)
//   GET  /v1/models, /health, /metrics
//   POST /tokenize, /detokenize
// Every error is OpenAI's error JSON with the right status; one client's bad request never
// disturbs the others. A streaming client that disconnects aborts its requests. A request that
// fails inside the engine after it was accepted (the engine process died) ends its stream with
// an error event ({"error": {...}}, then [DONE]); /health and new requests then answer 503.
// Connections (one thread each, a cap, a deadline and a byte budget per request) are
// HttpListener's (http_listener.h). Request bodies nesting deeper than kMaxJsonDepth are
// refused before anything looks at them.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "server/engine_client.h"
#include "server/metrics.h"
#include "tokenizer/chat_template.h"

namespace miniinfer {

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8000;
    std::string api_key;            // empty: no authentication
    std::string served_model_name;  // the one name requests may give (serve: MODEL as given)
    int64_t max_body_bytes = 32 << 20;
    int max_connections = 2048;          // open at once (each holds a thread); beyond: 503, closed
    double request_read_timeout_s = 30;  // to receive one request's headers and body
    bool custom_chat_template = false;   // --chat-template: message roles are not checked
    // --enable-auto-tool-choice --tool-call-parser hermes: chat answers' <tool_call> blocks
    // become message.tool_calls (server/tool_calls.h).
    bool auto_tool_choice = false;
};

class HttpServer {
  public:
    // `chat_template` may be null (then /v1/chat/completions answers 400).
    HttpServer(ServerOptions options, EngineClient& engine, Metrics& metrics,
               const ChatTemplate* chat_template);
    ~HttpServer();
    // Blocks until drain() (from another thread) has ended every connection.
    void listen();
    // Graceful shutdown: stop accepting; every request in flight ends now (a stream with an
    // error event and [DONE], a plain request with an error body); connections still open
    // after `grace` are shut down. Returns at once; listen() returns when all are closed.
    void drain(std::chrono::milliseconds grace);
    // The port actually bound (useful with port 0).
    int port() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace miniinfer
