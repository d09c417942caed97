// miniinfer serve MODEL [vLLM-style flags]: the OpenAI-compatible HTTP server.
//
// Shutdown: the first SIGINT/SIGTERM drains (no new connections; every request in flight ends
// at once with an error event / error body; connections left after --drain-timeout are shut
// down), then the engine stops (with --use-multiprocess: its processes are stopped and reaped
// and the socket directory removed) and the exit status is 0. A second signal exits at once
// (children killed, socket directory removed).
#include <netdb.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "apps/commands.h"
#include "apps/engine_options.h"
#include "core/json.h"
#include "core/logging.h"
#include "server/engine_loop.h"
#include "server/http_server.h"
#include "server/pipeline_client.h"

namespace miniinfer::apps {
namespace {

struct ServeOptions {
    EngineOptions engine;
    ServerOptions server;
    int64_t max_queued_requests = 1024;
    double drain_timeout_s = 3;
    std::string chat_template;     // a file overriding the model's template
    std::string tool_call_parser;  // "hermes" or empty
};

// Every connection is a file descriptor: the soft limit (often 1024) is raised to the hard one,
// and --max-connections lowered if even that is too few.
void raise_open_file_limit(ServerOptions& server) {
    constexpr rlim_t kReserve = 256;  // model files, ZeroMQ, logs, the listening socket
    rlimit limit{};
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
    getrlimit(RLIMIT_NOFILE, &limit);
    if (limit.rlim_cur != RLIM_INFINITY &&
        rlim_t(server.max_connections) + kReserve > limit.rlim_cur) {
        const int fit =
            int(limit.rlim_cur > 2 * kReserve ? limit.rlim_cur - kReserve : limit.rlim_cur / 2);
        MI_LOG_WARN("open-file limit {}: --max-connections lowered from {} to {}", limit.rlim_cur,
                    server.max_connections, fit);
        server.max_connections = fit;
    }
}

// Fails (as the server's own bind would, later) when host:port cannot be bound now: another
// server holds it or the address is not this machine's. Checked before the model loads, which
// takes a minute for a large one; the port is free again when this returns (the server binds it
// for good once the engine is ready). Port 0 (any free port) is not checked.
void check_port_is_free(const std::string& host, int port) {
    if (port == 0) return;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo* found = nullptr;
    const std::string service = std::to_string(port);
    if (const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0)
        fail("cannot listen on {}:{}: {}", host, port, gai_strerror(rc));
    std::string why = "no address";
    bool bound = false;
    for (addrinfo* a = found; a != nullptr && !bound; a = a->ai_next) {
        const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) continue;
        const int yes = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);  // as the server's socket
        bound = bind(fd, a->ai_addr, a->ai_addrlen) == 0;
        if (!bound) why = std::strerror(errno);
        close(fd);
    }
    freeaddrinfo(found);
    if (!bound) fail("cannot listen on {}:{}: {}", host, port, why);
}

void run(ServeOptions o) {
    if (o.server.api_key.empty())
        if (const char* key = std::getenv("MINIINFER_API_KEY")) o.server.api_key = key;
    // vLLM's default: clients name the model exactly as the server was started with it (a
    // directory path or org/name), so the path a script started the server with also works in
    // its requests.
    if (o.server.served_model_name.empty()) o.server.served_model_name = o.engine.config.model_dir;
    if (o.server.max_connections < 1) fail("--max-connections must be at least 1");
    if (!(o.server.request_read_timeout_s > 0)) fail("--request-read-timeout must be positive");
    if (!(o.drain_timeout_s >= 0)) fail("--drain-timeout must be >= 0");
    raise_open_file_limit(o.server);
    const EngineConfig config = o.engine.resolve();  // finds or downloads a hub model
    if (run_as_worker_node(config)) return;
    const std::string& model_dir = config.model_dir;

    // SIGINT/SIGTERM are taken by one waiting thread, not by whichever thread they hit.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    std::signal(SIGPIPE, SIG_IGN);  // a client that went away is a failed write, not a crash

    ModelConfig::load(model_dir);  // a wrong directory is the first thing to say, not a warning
    check_port_is_free(o.server.host, o.server.port);
    std::optional<ChatTemplate> chat;
    try {
        chat = o.chat_template.empty() ? ChatTemplate::load(model_dir)
                                       : ChatTemplate::from_string(read_text_file(o.chat_template));
    } catch (const Error& e) {
        if (!o.chat_template.empty()) throw;
        MI_LOG_WARN("no chat template ({}): /v1/chat/completions is unavailable", e.what());
    }
    o.server.custom_chat_template = !o.chat_template.empty();
    Metrics metrics(o.server.served_model_name);
    std::unique_ptr<EngineClient> engine;
    std::vector<pid_t> child_pids;  // for an exit at once (second signal)
    std::filesystem::path socket_dir;
    if (config.use_multiprocess) {  // built here, on the main thread: the children's
                                    // PR_SET_PDEATHSIG follows it
        auto pipeline = std::make_unique<PipelineClient>(config, &metrics, o.max_queued_requests);
        child_pids = pipeline->child_pids();
        socket_dir = pipeline->socket_dir();
        engine = std::move(pipeline);
    } else {
        engine = std::make_unique<EngineLoop>(std::make_unique<LLMEngine>(config), &metrics,
                                              o.max_queued_requests);
    }
    HttpServer server(o.server, *engine, metrics, chat ? &*chat : nullptr);
    std::atomic<bool> finished{false};
    std::thread waiter([&] {
        int sig = 0;
        sigwait(&signals, &sig);
        if (finished) return;
        MI_LOG_INFO(
            "signal {}: shutting down (requests in flight are aborted; a second signal exits at "
            "once)",
            sig);
        server.drain(std::chrono::milliseconds(int64_t(o.drain_timeout_s * 1000)));
        sigwait(&signals, &sig);
        if (finished) return;
        MI_LOG_WARN("signal {} again: exiting now", sig);
        for (pid_t pid : child_pids) kill(pid, SIGKILL);
        for (pid_t pid : child_pids) waitpid(pid, nullptr, 0);  // the child watcher may reap first
        // The main thread may be removing the same directory (the pipeline's destructor runs
        // once its children are gone): an entry it takes first fails our walk, so walk again.
        std::error_code ignored;
        for (int i = 0;
             i < 20 && !socket_dir.empty() && std::filesystem::exists(socket_dir, ignored); ++i)
            std::filesystem::remove_all(socket_dir, ignored);
        std::_Exit(128 + sig);
    });
    server.listen();
    engine.reset();  // stops the engine (and its processes); a second signal still cuts this short
    finished = true;
    pthread_kill(waiter.native_handle(), SIGTERM);  // the waiter may still be in sigwait
    waiter.join();
}

}  // namespace

void add_serve(CLI::App& app) {
    auto o = std::make_shared<ServeOptions>();
    CLI::App* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
    cmd->footer("Example: miniinfer serve Qwen/Qwen3-0.6B --device cuda --port 8000");
    add_engine_options(*cmd, o->engine, /*positional_model=*/true);
    add_multiprocess_option(*cmd, o->engine);
    cmd->add_option("--host", o->server.host, "Address to listen on")->capture_default_str();
    cmd->add_option("--port", o->server.port, "Port (0: any free port)")->capture_default_str();
    cmd->add_option("--api-key", o->server.api_key,
                    "Require 'Authorization: Bearer KEY' (or MINIINFER_API_KEY)");
    cmd->add_option("--served-model-name", o->server.served_model_name,
                    "The model name clients use (default: MODEL exactly as given)");
    cmd->add_option("--max-queued-requests", o->max_queued_requests,
                    "Refuse (429) beyond this many waiting requests")
        ->capture_default_str();
    cmd->add_option("--max-body-bytes", o->server.max_body_bytes,
                    "Refuse (413) larger request bodies, chunked or not")
        ->capture_default_str();
    cmd->add_option("--max-connections", o->server.max_connections,
                    "Open connections at most (one thread each); beyond: 503 and closed")
        ->capture_default_str();
    cmd->add_option("--request-read-timeout", o->server.request_read_timeout_s,
                    "Seconds to receive a request's headers and body (408 after)")
        ->capture_default_str();
    cmd->add_option("--drain-timeout", o->drain_timeout_s,
                    "On SIGINT/SIGTERM: seconds to let aborted requests' responses go out before "
                    "closing their connections")
        ->capture_default_str();
    cmd->add_option(
        "--chat-template", o->chat_template,
        "A Jinja chat template file overriding the model's (message roles are then not checked)");
    cmd->add_flag("--enable-auto-tool-choice", o->server.auto_tool_choice,
                  "Turn the model's tool-call blocks into OpenAI tool_calls (needs "
                  "--tool-call-parser)");
    cmd->add_option("--tool-call-parser", o->tool_call_parser,
                    "The tool-call format: hermes (Qwen's <tool_call> blocks)");
    cmd->callback([o] {
        if (o->server.auto_tool_choice && o->tool_call_parser.empty())
            fail("--enable-auto-tool-choice needs --tool-call-parser (hermes)");
        if (!o->tool_call_parser.empty() && o->tool_call_parser != "hermes")
            fail("--tool-call-parser '{}' is not supported (hermes)", o->tool_call_parser);
        run(*o);
    });
}

}  // namespace miniinfer::apps
