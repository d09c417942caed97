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
#include "server/http_listener.h"
#include "server/openai_protocol.h"

namespace miniinfer {
namespace {

using namespace std::chrono_literals;

std::string dump(const Json& j) {
    return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

ApiError shutdown_error() {
    return {503, "the server is shutting down", "server_error"};
}

void send_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
    res.set_content(dump(e.body()), "application/json");
}

// One choice of a response while it is generated.
struct Choice {
    std::string text, reasoning;
    size_t num_logprobs_sent = 0;
    ReasoningSplitter splitter;
    bool role_sent = false;
    RequestOutput last;
};

}  // namespace

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
        send_error(res, {401, "invalid or missing API key", "authentication_error"});
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
    Json choice_json(const ApiRequest& r, size_t index, Choice& c, const RequestOutput& out);
    void setup_routes();
};

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
    s.set_socket_options([&listen_fd](socket_t sock) {
        httplib::default_socket_options(sock);
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
                    nlohmann::ordered_json(body["messages"]), nullptr,
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
    const std::string response_id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
    try {
        const Json body = parse_untrusted_json(raw_body, "the request body");
        auto render = [this](const Json& messages, const Json& tools, const Json& kwargs) {
            if (!chat_template) fail("this model has no chat template");
            return chat_template->render(nlohmann::ordered_json(messages),
                                         nlohmann::ordered_json(tools), true,
                                         nlohmann::ordered_json(kwargs));
        };
        *r = chat ? parse_chat_request(body, engine.default_params(), render,
                                       options.custom_chat_template)
                  : parse_completion_request(body, engine.default_params());
        if (!r->model.empty() && r->model != options.served_model_name)
            return send_error(res, {404, fmt::format("the model '{}' does not exist", r->model),
                                    "not_found_error"});
        const bool has_max_tokens =
            body.contains("max_tokens") || body.contains("max_completion_tokens");
        for (size_t p = 0; p < r->prompts.size(); ++p) {
            Prompt prompt = r->prompts[p];
            if (prompt.token_ids.empty() && !engine.tokenizer())
                fail("this model has no tokenizer: send token ids");
            SamplingParams params = r->params;
            if (chat && !has_max_tokens) {  // as vLLM: whatever room the context leaves
                if (prompt.token_ids.empty())
                    prompt = Prompt::from_ids(engine.tokenizer()->encode(prompt.text));
                params.max_tokens =
                    std::max<int64_t>(1, engine.max_model_len() - int64_t(prompt.token_ids.size()));
            }
            for (int64_t i = 0; i < r->n; ++i) {
                if (params.seed && i > 0) params.seed = *r->params.seed + uint64_t(i);
                ids.push_back(response_id + "-" + std::to_string(p * size_t(r->n) + size_t(i)));
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

// Not streaming: the whole response once every choice has finished. Meanwhile a space (JSON
// allows leading whitespace) is written every 50 ms: a client that has hung up makes that
// write fail, and its requests are aborted instead of running to the end for nobody.
void HttpServer::Impl::respond_when_done(httplib::Response& res, std::shared_ptr<ApiRequest> r,
                                         std::shared_ptr<OutputChannel> channel,
                                         std::vector<std::string> ids, std::string response_id) {
    auto choices = std::make_shared<std::vector<Choice>>(ids.size());
    auto done = std::make_shared<size_t>(0);
    res.set_chunked_content_provider("application/json", [=, this](size_t,
                                                                   httplib::DataSink& sink) {
        std::map<std::string, size_t> index;
        for (size_t i = 0; i < ids.size(); ++i) index[ids[i]] = i;
        auto last_probe = std::chrono::steady_clock::now();
        while (*done < ids.size()) {
            if (server.draining()) {  // shutting down: the request ends now, with an error body
                for (const auto& id : ids) engine.abort(id);
                const std::string body = dump(shutdown_error().body());
                sink.write(body.data(), body.size());
                sink.done();
                return true;
            }
            auto out = channel->next(50ms);
            if (std::chrono::steady_clock::now() - last_probe >= 50ms) {
                last_probe = std::chrono::steady_clock::now();
                if (!sink.write(" ", 1)) {
                    for (const auto& id : ids) engine.abort(id);
                    return false;
                }
            }
            if (!out || !out->finished) continue;
            (*choices)[index.at(out->request_id)].last = std::move(*out);
            ++*done;
        }
        for (const Choice& c : *choices)
            if (c.last.finish_reason == "error") {  // the engine failed it (e.g. its process died)
                const std::string body = dump(ApiError{500, c.last.error, "server_error"}.body());
                sink.write(body.data(), body.size());
                sink.done();
                return true;
            }
        Json list = Json::array();
        int64_t prompt_tokens = 0, completion_tokens = 0, cached = 0;
        for (size_t i = 0; i < choices->size(); ++i) {
            const RequestOutput& out = (*choices)[i].last;
            if (i % size_t(r->n) == 0) {
                prompt_tokens += out.num_prompt_tokens;
                cached += out.num_cached_tokens;
            }
            completion_tokens += int64_t(out.token_ids.size());
            list.push_back(choice_json(*r, i, (*choices)[i], out));
        }
        const std::string body =
            dump({{"id", response_id},
                  {"object", r->chat ? "chat.completion" : "text_completion"},
                  {"created", int64_t(std::time(nullptr))},
                  {"model", options.served_model_name},
                  {"choices", list},
                  {"usage", usage_json(prompt_tokens, completion_tokens, cached)}});
        sink.write(body.data(), body.size());
        sink.done();
        return true;
    });
}

// A whole choice (non-streaming) from its final output.
Json HttpServer::Impl::choice_json(const ApiRequest& r, size_t index, Choice&,
                                   const RequestOutput& out) {
    const Tokenizer* tok = engine.tokenizer();
    Json logprobs = nullptr;
    if (r.params.logprobs)
        logprobs =
            r.chat ? chat_logprobs(out.logprobs, tok) : completion_logprobs(out.logprobs, tok);
    const Json finish = out.finish_reason.empty()
                            ? Json(nullptr)
                            : Json(out.finish_reason == "abort" ? "abort" : out.finish_reason);
    if (!r.chat)
        return {{"index", index},
                {"text", out.text},
                {"logprobs", logprobs},
                {"finish_reason", finish}};
    Json message = {{"role", "assistant"}, {"content", out.text}};
    if (split_reasoning) {
        ReasoningSplitter splitter;
        auto [reasoning, content] = splitter.feed(out.text);
        auto [r2, c2] = splitter.finish();
        message["content"] = content + c2;
        message["reasoning_content"] = reasoning + r2;
        if ((reasoning + r2).empty()) message["reasoning_content"] = nullptr;
    }
    return {
        {"index", index}, {"message", message}, {"logprobs", logprobs}, {"finish_reason", finish}};
}

void HttpServer::Impl::stream_response(httplib::Response& res, std::shared_ptr<ApiRequest> r,
                                       std::shared_ptr<OutputChannel> channel,
                                       std::vector<std::string> ids, std::string response_id) {
    auto state = std::make_shared<std::vector<Choice>>(ids.size());
    auto index = std::make_shared<std::map<std::string, size_t>>();
    for (size_t i = 0; i < ids.size(); ++i) (*index)[ids[i]] = i;
    auto remaining = std::make_shared<size_t>(ids.size());
    auto usage = std::make_shared<std::array<int64_t, 3>>();  // prompt, completion, cached
    const int64_t created = int64_t(std::time(nullptr));
    auto chunk = [=, this](Json choices) {
        return Json{{"id", response_id},
                    {"object", r->chat ? "chat.completion.chunk" : "text_completion"},
                    {"created", created},
                    {"model", options.served_model_name},
                    {"choices", std::move(choices)}};
    };
    auto send = [](httplib::DataSink& sink, const Json& j) {
        const std::string line = "data: " + dump(j) + "\n\n";
        return sink.write(line.data(), line.size());
    };
    res.set_chunked_content_provider(
        "text/event-stream", [=, this](size_t, httplib::DataSink& sink) {
            auto abort_all = [&] {
                for (const auto& id : ids) engine.abort(id);
                return false;
            };
            if (r->chat)  // the first chunk of each choice carries the role
                for (size_t i = 0; i < state->size(); ++i)
                    if (!(*state)[i].role_sent) {
                        (*state)[i].role_sent = true;
                        Json delta = {{"role", "assistant"}, {"content", ""}};
                        if (!send(sink, chunk(Json::array({{{"index", i},
                                                            {"delta", delta},
                                                            {"logprobs", nullptr},
                                                            {"finish_reason", nullptr}}}))))
                            return abort_all();
                    }
            auto end_with_error = [&](const ApiError& error) {  // an error event, then [DONE]
                for (const auto& id : ids) engine.abort(id);
                send(sink, error.body());
                const std::string done = "data: [DONE]\n\n";
                sink.write(done.data(), done.size());
                sink.done();
                return true;
            };
            while (*remaining > 0) {
                if (server.draining()) return end_with_error(shutdown_error());
                auto out = channel->next(200ms);
                if (!out) {
                    if (!sink.is_writable()) return abort_all();
                    continue;
                }
                const size_t i = index->at(out->request_id);
                Choice& c = (*state)[i];
                if (out->finish_reason ==
                    "error")  // the engine failed it: an error event ends the stream
                    return end_with_error(ApiError{500, out->error, "server_error"});
                Json logprobs = nullptr;
                if (r->params.logprobs && out->logprobs.size() > c.num_logprobs_sent) {
                    std::vector<TokenLogprob> fresh(
                        out->logprobs.begin() + long(c.num_logprobs_sent), out->logprobs.end());
                    c.num_logprobs_sent = out->logprobs.size();
                    logprobs = r->chat ? chat_logprobs(fresh, engine.tokenizer())
                                       : completion_logprobs(fresh, engine.tokenizer());
                }
                const Json finish = out->finished ? Json(out->finish_reason) : Json(nullptr);
                Json choice = {{"index", i}, {"logprobs", logprobs}, {"finish_reason", finish}};
                if (r->chat) {
                    Json delta = Json::object();
                    std::string content = out->delta_text, reasoning;
                    if (split_reasoning) {
                        auto [rd, cd] = c.splitter.feed(out->delta_text);
                        if (out->finished) {
                            auto [r2, c2] = c.splitter.finish();
                            rd += r2;
                            cd += c2;
                        }
                        reasoning = rd;
                        content = cd;
                    }
                    if (!reasoning.empty()) delta["reasoning_content"] = reasoning;
                    if (!content.empty() || reasoning.empty()) delta["content"] = content;
                    choice["delta"] = delta;
                } else {
                    choice["text"] = out->delta_text;
                }
                if (out->finished) {
                    --*remaining;
                    if (i % size_t(r->n) == 0) {
                        (*usage)[0] += out->num_prompt_tokens;
                        (*usage)[2] += out->num_cached_tokens;
                    }
                    (*usage)[1] += int64_t(out->token_ids.size());
                }
                if (!send(sink, chunk(Json::array({choice})))) return abort_all();
            }
            if (r->include_usage) {
                Json last = chunk(Json::array());
                last["usage"] = usage_json((*usage)[0], (*usage)[1], (*usage)[2]);
                if (!send(sink, last)) return false;
            }
            const std::string done = "data: [DONE]\n\n";
            sink.write(done.data(), done.size());
            sink.done();
            return true;
        });
}

}  // namespace miniinfer
