// The OpenAI-compatible HTTP server (cpp-httplib): routes, API key, limits, SSE streaming.
//
//   POST /v1/completions, /v1/chat/completions   (stream or not; n; logprobs; usage)
//   GET  /v1/models, /health, /metrics
//   POST /tokenize, /detokenize
// Every error is OpenAI's error JSON with the right status; one client's bad request never
// disturbs the others. A streaming client that disconnects aborts its requests. A request that
// fails inside the engine after it was accepted (the engine process died) ends its stream with
// an error event ({"error": {...}}, then [DONE]); /health and new requests then answer 503.
#pragma once

#include <memory>
#include <string>

#include "server/engine_client.h"
#include "server/metrics.h"
#include "tokenizer/chat_template.h"

namespace miniinfer {

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8000;
    std::string api_key;             // empty: no authentication
    std::string served_model_name;   // default: the model directory's name
    int64_t max_body_bytes = 32 << 20;
    int num_threads = 512;           // concurrent connections (each stream holds one)
};

class HttpServer {
public:
    // `chat_template` may be null (then /v1/chat/completions answers 400).
    HttpServer(ServerOptions options, EngineClient& engine, Metrics& metrics, const ChatTemplate* chat_template);
    ~HttpServer();
    // Blocks until stop() (from another thread or a signal handler's helper thread).
    void listen();
    void stop();
    // The port actually bound (useful with port 0).
    int port() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace miniinfer
