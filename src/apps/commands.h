// Subcommands of the `miniinfer` CLI. Each add_* registers its options and a callback that
// throws miniinfer::Error on bad input.
#pragma once

#include <CLI/CLI.hpp>

#include <fstream>
#include <string>

#include "core/check.h"

namespace miniinfer::apps {

// An output file (--output, --json) opened for writing when the command starts: a path that
// cannot be written fails before the command loads a model or does its work, not after. An empty
// path gives a closed stream (nothing to write).
inline std::ofstream open_output_file(const std::string& path) {
    std::ofstream file;
    if (path.empty()) return file;
    file.open(path);
    if (!file) fail("{}: cannot write", path);
    return file;
}

// Every command below and --version on `app` (the whole `miniinfer` CLI).
void add_all_commands(CLI::App& app);

// `chat` replies with up to this many tokens unless --max-tokens says otherwise: a chat answer
// runs longer than generate's (and vLLM's) 16.
inline constexpr int64_t kChatMaxTokens = 1024;

void add_inspect(CLI::App& app);  // miniinfer inspect --model DIR [--json]
void add_logits(CLI::App& app);   // miniinfer logits --model DIR --ids 1,2,3 [--top 5]
void add_tokenizer_commands(
    CLI::App& app);  // miniinfer tokenize | detokenize | chat-template --model DIR
void add_generate(
    CLI::App& app);  // miniinfer generate --model DIR --prompt TEXT ... | --input FILE.jsonl
void add_chat(CLI::App& app);   // miniinfer chat --model DIR
void add_bench(CLI::App& app);  // miniinfer bench --model DIR --workload NAME
// miniinfer bench serve | bench-serve --port 8000 --workload NAME (against a running server)
void add_bench_serve(CLI::App& app, const std::string& name = "bench-serve");
void add_serve(CLI::App& app);            // miniinfer serve MODEL [--port 8000 ...]
void add_pipeline_worker(CLI::App& app);  // miniinfer pipeline-worker --role ROLE ... (internal)

}  // namespace miniinfer::apps
