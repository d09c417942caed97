#include "server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <mutex>
#include <thread>

#include "core/logging.h"
#include "engine/request_inputs.h"
#include "server/http_server_impl.h"

namespace miniinfer {

using namespace std::chrono_literals;
using namespace http_internal;

HttpServer::HttpServer(ServerOptions options, EngineClient& engine, Metrics& metrics,
                       const ChatTemplate* chat_template)
    : impl_(std::make_unique<Impl>(std::move(options), engine, metrics, chat_template)) {
    impl_->setup_routes();
}

HttpServer::~HttpServer() {
    {
        std::lock_guard lock(impl_->drain_mutex);
        impl_->listening_done = true;
    }
    impl_->listen_ended.notify_all();
    if (impl_->drain_timer.joinable()) impl_->drain_timer.join();
}

void HttpServer::listen() {
    auto& s = impl_->server;
    const int wanted = impl_->options.port;
    int port = wanted;
    int listen_fd = -1;
    // cpp-httplib 0.11 sets SO_REUSEPORT alone; SO_REUSEADDR too lets a restarted server bind
    // while the last one's closed connections are still in TIME_WAIT.
    s.set_socket_options([&listen_fd](socket_t sock) {
        httplib::default_socket_options(sock);
        const int yes = 1;
        setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
        listen_fd = sock;
    });
    if (wanted == 0)
        port = s.bind_to_any_port(impl_->options.host);
    else if (!s.bind_to_port(impl_->options.host, wanted))
        port = -1;
    s.set_socket_options(httplib::default_socket_options);
    if (port < 0) fail("cannot listen on {}:{}", impl_->options.host, wanted);
    // cpp-httplib 0.11 listens with a backlog of 5: a burst of clients (bench-serve's 256 at
    // once) overflows it, the kernel drops handshakes, and a client whose request then waits
    // out the server's 5 s read timeout sees its connection closed. Listening again raises it.
    if (::listen(listen_fd, SOMAXCONN) != 0)
        fail("listen on {}:{}: {}", impl_->options.host, port, std::strerror(errno));
    impl_->options.port = port;
    MI_LOG_INFO("serving '{}' on http://{}:{}", impl_->options.served_model_name,
                impl_->options.host, port);
    if (!s.draining()) s.listen_after_bind();  // a drain before this point: nothing to serve
    std::lock_guard lock(impl_->drain_mutex);
    impl_->listening_done = true;
    impl_->listen_ended.notify_all();
}

void HttpServer::drain(std::chrono::milliseconds grace) {
    std::lock_guard lock(impl_->drain_mutex);
    if (impl_->server.draining()) return;
    MI_LOG_INFO("draining: no new connections; {} open, their requests end now (grace {} ms)",
                impl_->server.num_open_connections(), grace.count());
    impl_->server.drain();
    impl_->drain_timer = std::thread([impl = impl_.get(), grace] {
        std::unique_lock lock(impl->drain_mutex);
        if (impl->listen_ended.wait_for(lock, grace, [&] { return impl->listening_done; })) return;
        MI_LOG_WARN("{} connections still open after {} ms: closing them",
                    impl->server.num_open_connections(), grace.count());
        impl->server.close_all();
    });
}

int HttpServer::port() const {
    return impl_->options.port;
}

void HttpServer::Impl::setup_routes() {
    server.set_error_handler([](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return;
        if (res.status == 400) {  // a request httplib could not read: say why, when we know
            switch (HttpListener::current_read_failure()) {
                case ReadFailure::kTooLarge:
                    return send_error(res,
                                      {413, "the request is too large", "invalid_request_error"});
                case ReadFailure::kTimedOut:
                    return send_error(res, {408, "the request was not received in time",
                                            "invalid_request_error"});
                case ReadFailure::kDraining:
                    return send_error(res, shutdown_error());
                case ReadFailure::kNone:
                    break;
            }
        }
        if (res.status == 413)
            send_error(res, {413, "the request body is too large", "invalid_request_error"});
        else if (res.status == 404)
            send_error(res, {404, "no such route", "not_found_error"});
        else
            send_error(res, {res.status, "request failed", "invalid_request_error"});
    });
    server.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        const bool ok = server.admit_body(req, res) && authorized(req, res);
        return ok ? httplib::Server::HandlerResponse::Unhandled
                  : httplib::Server::HandlerResponse::Handled;
    });
    server.set_expect_100_continue_handler(
        [this](const httplib::Request& req, httplib::Response& res) {
            return server.admit_body(req, res) ? 100 : res.status;
        });
    server.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
        if (server.draining())
            send_error(res, shutdown_error());
        else if (engine.ping(5s))
            res.set_content("", "text/plain");
        else
            send_error(res, {503, "the engine is not responding", "server_error"});
    });
    server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
        res.set_content(metrics.render(), "text/plain; version=0.0.4");
    });
    server.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
        Json model = {{"id", options.served_model_name},
                      {"object", "model"},
                      {"created", int64_t(std::time(nullptr))},
                      {"owned_by", "miniinfer"},
                      {"max_model_len", engine.max_model_len()}};
        res.set_content(dump({{"object", "list"}, {"data", Json::array({model})}}),
                        "application/json");
    });
    post("/v1/completions", [this](const std::string& body, httplib::Response& r) {
        handle_generate(body, r, false);
    });
    post("/v1/chat/completions",
         [this](const std::string& body, httplib::Response& r) { handle_generate(body, r, true); });
    post("/tokenize", [this](const std::string& raw, httplib::Response& res) {
        try {
            if (!engine.tokenizer()) fail("this model has no tokenizer");
            const Json body = parse_untrusted_json(raw, "the request body");
            if (!body.is_object()) fail("the request body must be a JSON object");
            std::string text;
            if (body.contains("messages")) {
                if (!chat_template) fail("this model has no chat template");
                text = chat_template->render(
                    nlohmann::ordered_json(normalise_messages(body["messages"], true)), nullptr,
                    json_get_or<bool>(body, "add_generation_prompt", true, "request"));
            } else {
                text = json_get<std::string>(body, "prompt", "request");
            }
            const auto ids = engine.tokenizer()->encode(text);
            res.set_content(dump({{"tokens", ids},
                                  {"count", ids.size()},
                                  {"max_model_len", engine.max_model_len()}}),
                            "application/json");
        } catch (const std::exception& e) {
            send_error(res, {400, e.what(), "invalid_request_error"});
        }
    });
    post("/detokenize", [this](const std::string& raw, httplib::Response& res) {
        try {
            if (!engine.tokenizer()) fail("this model has no tokenizer");
            const Json body = parse_untrusted_json(raw, "the request body");
            if (!body.is_object()) fail("the request body must be a JSON object");
            const auto ids = json_get<std::vector<int64_t>>(body, "tokens", "request");
            std::vector<int32_t> ids32;
            for (int64_t id : ids) {
                if (id < 0 || id >= engine.model_config().vocab_size)
                    fail("token id {} is outside the vocabulary [0, {})", id,
                         engine.model_config().vocab_size);
                ids32.push_back(int32_t(id));
            }
            res.set_content(dump({{"prompt", engine.tokenizer()->decode(ids32)}}),
                            "application/json");
        } catch (const std::exception& e) {
            send_error(res, {400, e.what(), "invalid_request_error"});
        }
    });
    // Any other route that may carry a body: 404 without reading it (httplib would read a
    // chunked body whole before finding no handler). The connection closes after.
    auto no_route = [](const httplib::Request&, httplib::Response& res,
                       const httplib::ContentReader&) {
        send_error(res, {404, "no such route", "not_found_error"});
        HttpListener::close_after_response();
    };
    server.Post(".*", no_route);
    server.Put(".*", no_route);
    server.Patch(".*", no_route);
    server.Delete(".*", no_route);
}

void HttpServer::Impl::handle_generate(const std::string& raw_body, httplib::Response& res,
                                       bool chat) {
    if (server.draining()) return send_error(res, shutdown_error());
    auto r = std::make_shared<ApiRequest>();
    std::vector<std::string> ids;
    auto channel = std::make_shared<OutputChannel>();
    const std::string prefix = chat ? "chatcmpl-" : "cmpl-";
    const std::string engine_id = prefix + std::to_string(next_id++);  // unique in the engine
    std::string response_id = engine_id;
    try {
        const Json body = parse_untrusted_json(raw_body, "the request body");
        auto render = [this](const Json& messages, const Json& tools, const Json& kwargs) {
            if (!chat_template) fail("this model has no chat template");
            return chat_template->render(nlohmann::ordered_json(messages),
                                         nlohmann::ordered_json(tools), true,
                                         nlohmann::ordered_json(kwargs));
        };
        *r = chat ? parse_chat_request(body, engine.default_params(), render,
                                       options.custom_chat_template, options.auto_tool_choice)
                  : parse_completion_request(body, engine.default_params());
        if (!r->model.empty() && r->model != options.served_model_name)
            return send_error(res, {404, fmt::format("the model '{}' does not exist", r->model),
                                    "not_found_error"});
        if (!r->request_id.empty()) response_id = prefix + r->request_id;
        const bool has_max_tokens =
            body.contains("max_tokens") || body.contains("max_completion_tokens");
        const Tokenizer* tokenizer = engine.tokenizer();
        for (size_t p = 0; p < r->prompts.size(); ++p) {
            Prompt prompt = r->prompts[p];
            if (prompt.token_ids.empty() && !tokenizer)
                fail("this model has no tokenizer: send token ids");
            // The engine's encode adds the post-processor's tokens; a request that asks not to
            // (chat's default) is encoded here, where that makes a difference.
            if (prompt.token_ids.empty() && !r->add_special_tokens &&
                tokenizer->adds_special_tokens())
                prompt =
                    Prompt::from_ids(tokenizer->encode(prompt.text, {.add_special_tokens = false}));
            SamplingParams params = r->params;
            if (chat && !has_max_tokens) {  // as vLLM: whatever room the context leaves
                if (prompt.token_ids.empty())
                    prompt = Prompt::from_ids(tokenizer->encode(prompt.text));
                truncate_prompt(prompt.token_ids, params, engine.max_model_len());  // as the engine
                params.max_tokens =
                    std::max<int64_t>(1, engine.max_model_len() - int64_t(prompt.token_ids.size()));
            }
            for (int64_t i = 0; i < r->n; ++i) {
                if (params.seed && i > 0) params.seed = *r->params.seed + uint64_t(i);
                ids.push_back(engine_id + "-" + std::to_string(p * size_t(r->n) + size_t(i)));
                engine.submit(ids.back(), prompt, params, channel);
            }
        }
    } catch (const QueueFull& e) {
        for (const auto& id : ids) engine.abort(id);
        return send_error(res, {429, e.what(), "rate_limit_error"});
    } catch (const EngineUnavailable& e) {
        return send_error(res, {503, e.what(), "server_error"});
    } catch (const Error& e) {
        for (const auto& id : ids) engine.abort(id);
        return send_error(res, {400, e.what(), "invalid_request_error"});
    }
    if (r->stream) return stream_response(res, r, channel, ids, response_id);

    respond_when_done(res, r, channel, ids, response_id);
}

}  // namespace miniinfer
