// The `miniinfer` command line. Each subcommand lives in its own file (cmd_*.cpp) and
// registers itself here; errors from user input print one line and exit non-zero.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "apps/commands.h"
#include "core/check.h"
#include "core/logging.h"

int main(int argc, char** argv) {
    miniinfer::init_logging();
    CLI::App app{"MiniInfer: a small, fast LLM inference engine for Qwen2, Qwen3 and Qwen3-MoE"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "miniinfer 0.1.0");
    miniinfer::apps::add_inspect(app);
    miniinfer::apps::add_logits(app);
    miniinfer::apps::add_generate(app);
    miniinfer::apps::add_chat(app);
    miniinfer::apps::add_bench(app);
    miniinfer::apps::add_bench_serve(app);
    miniinfer::apps::add_serve(app);
    miniinfer::apps::add_pipeline_worker(app);
    miniinfer::apps::add_tokenizer_commands(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const miniinfer::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
