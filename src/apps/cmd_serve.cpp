// miniinfer serve MODEL_DIR [vLLM-style flags]: the OpenAI-compatible HTTP server.
// SIGINT / SIGTERM stop it cleanly (in-flight requests end with finish_reason "abort"; with
// --use-multiprocess the pipeline's processes are stopped and its socket directory removed).
#include <csignal>
#include <cstdlib>
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
    std::string chat_template;  // a file overriding the model's template
};

void run(ServeOptions o) {
    if (o.server.api_key.empty())
        if (const char* key = std::getenv("MINIINFER_API_KEY")) o.server.api_key = key;
    const std::string model_dir = o.engine.config.model_dir;
    if (o.server.served_model_name.empty())
        o.server.served_model_name = std::filesystem::path(model_dir).lexically_normal().filename().string();
    if (o.server.served_model_name.empty()) o.server.served_model_name = model_dir;

    // SIGINT/SIGTERM are taken by one waiting thread, not by whichever thread they hit.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    std::signal(SIGPIPE, SIG_IGN);  // a client that went away is a failed write, not a crash

    std::optional<ChatTemplate> chat;
    try {
        chat = o.chat_template.empty() ? ChatTemplate::load(model_dir)
                                       : ChatTemplate::from_string(read_text_file(o.chat_template));
    } catch (const Error& e) {
        if (!o.chat_template.empty()) throw;
        MI_LOG_WARN("no chat template ({}): /v1/chat/completions is unavailable", e.what());
    }
    Metrics metrics(o.server.served_model_name);
    const EngineConfig config = o.engine.resolve();
    std::unique_ptr<EngineClient> engine;
    if (config.use_multiprocess)  // built here, on the main thread: the children's PR_SET_PDEATHSIG follows it
        engine = std::make_unique<PipelineClient>(config, &metrics, o.max_queued_requests);
    else
        engine = std::make_unique<EngineLoop>(std::make_unique<LLMEngine>(config), &metrics, o.max_queued_requests);
    HttpServer server(o.server, *engine, metrics, chat ? &*chat : nullptr);
    std::thread waiter([&] {
        int sig = 0;
        sigwait(&signals, &sig);
        MI_LOG_INFO("signal {}: shutting down", sig);
        server.stop();
    });
    server.listen();
    pthread_kill(waiter.native_handle(), SIGTERM);  // listen() may have ended on its own
    waiter.join();
}

}  // namespace

void add_serve(CLI::App& app) {
    auto o = std::make_shared<ServeOptions>();
    CLI::App* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
    add_engine_options(*cmd, o->engine, /*positional_model=*/true);
    add_multiprocess_option(*cmd, o->engine);
    cmd->add_option("--host", o->server.host, "Address to listen on")->capture_default_str();
    cmd->add_option("--port", o->server.port, "Port (0: any free port)")->capture_default_str();
    cmd->add_option("--api-key", o->server.api_key, "Require 'Authorization: Bearer KEY' (or MINIINFER_API_KEY)");
    cmd->add_option("--served-model-name", o->server.served_model_name, "The model name clients use");
    cmd->add_option("--max-queued-requests", o->max_queued_requests, "Refuse (429) beyond this many waiting requests")
        ->capture_default_str();
    cmd->add_option("--max-body-bytes", o->server.max_body_bytes, "Refuse (413) larger request bodies")->capture_default_str();
    cmd->add_option("--chat-template", o->chat_template, "A Jinja chat template file overriding the model's");
    cmd->callback([o] { run(*o); });
}

}  // namespace miniinfer::apps
