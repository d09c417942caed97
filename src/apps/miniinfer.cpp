// The `miniinfer` command line. Each subcommand lives in its own file (cmd_*.cpp) and
// registers itself here; errors from user input print one line and exit non-zero.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <string>
#include <vector>

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
    // vLLM's two-letter short option, which CLI11 cannot declare: -tp N is --tensor-parallel-size
    // N.
    std::vector<std::string> args(argv + 1, argv + argc);
    for (std::string& a : args)
        if (a == "-tp")
            a = "--tensor-parallel-size";
        else if (a.rfind("-tp=", 0) == 0)
            a = "--tensor-parallel-size=" + a.substr(4);
    std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last first
    try {
        app.parse(args);
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
