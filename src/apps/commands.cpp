#include "apps/commands.h"

namespace miniinfer::apps {

void add_all_commands(CLI::App& app) {
    app.require_subcommand(1);
    app.set_version_flag("--version", "miniinfer 0.1.0");
    add_inspect(app);
    add_logits(app);
    add_generate(app);
    add_chat(app);
    add_bench(app);
    add_bench_serve(app);
    add_serve(app);
    add_pipeline_worker(app);
    add_tokenizer_commands(app);
}

}  // namespace miniinfer::apps
