// Subcommands of the `miniinfer` CLI. Each add_* registers its options and a callback that
// throws miniinfer::Error on bad input.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace miniinfer::apps {

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
