// miniinfer pipeline-worker --role ROLE --ipc-dir DIR --parent-pid PID --config JSON
// [--max-queued N] (hidden):
// one process of the multi-process pipeline, started by `serve --use-multiprocess` or
// `generate --use-multiprocess` re-executing this binary (see server/pipeline_worker.h).
#include "apps/commands.h"
#include "server/pipeline_worker.h"

namespace miniinfer::apps {

void add_pipeline_worker(CLI::App& app) {
    auto o = std::make_shared<pipeline::WorkerOptions>();
    auto config = std::make_shared<std::string>();
    CLI::App* cmd =
        app.add_subcommand("pipeline-worker", "A process of the multi-process pipeline (internal)");
    cmd->group("");  // not listed in --help: only MiniInfer starts it
    cmd->add_option("--role", o->role, "tokenizer | engine | detokenizer")->required();
    cmd->add_option("--ipc-dir", o->ipc_dir, "The frontend's socket directory")->required();
    cmd->add_option("--parent-pid", o->parent_pid, "The frontend's pid")->required();
    cmd->add_option("--config", *config, "EngineConfig as JSON")->required();
    cmd->add_option("--max-queued", o->max_queued, "Engine: refuse requests while this many wait");
    cmd->callback([o, config] {
        o->config = EngineConfig::from_json(Json::parse(*config));
        pipeline::run_worker(*o);
    });
}

}  // namespace miniinfer::apps
