// Command-line options shared by the commands that run the engine (generate, chat): the
// engine's settings, and the sampling flags, which are collected as a JSON object with vLLM's
// field names so SamplingParams::from_json applies them (flags not given are left out).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>

#include "config/engine_config.h"
#include "core/json.h"

namespace miniinfer::apps {

struct EngineOptions {
    EngineConfig config;  // config.model_dir: as given (a directory or a hub name, org/name)
    std::string revision = "main";
    int64_t kv_cache_mb = 0;
    bool no_prefix_caching = false;
    // config with the flags folded in and model_dir a directory: a hub name is found in the
    // Hugging Face cache or downloaded (loader/hub.h; throws Error).
    EngineConfig resolve() const;
};

// --model (or the positional MODEL) and --revision: a model directory or a Hugging Face name.
void add_model_option(CLI::App& cmd, std::string& model, std::string& revision,
                      bool positional = false);

// positional_model: the model directory is the first positional argument (serve, as vLLM).
void add_engine_options(CLI::App& cmd, EngineOptions& options, bool positional_model = false);
// --use-multiprocess (serve, generate: the commands that run the engine through an EngineClient).
void add_multiprocess_option(CLI::App& cmd, EngineOptions& options);

// With --nnodes > 1 and --node-rank > 0 this process only runs its node's tensor-parallel ranks
// for node 0 (engine/llm_engine.h run_worker_node) and returns true when node 0 ends them;
// otherwise returns false at once and the command goes on.
bool run_as_worker_node(const EngineConfig& config);

// Returns the object the sampling flags fill in when the command line is parsed. It always holds
// max_tokens: --max-tokens, else `max_tokens` (the default its --help states).
std::shared_ptr<Json> add_sampling_options(CLI::App& cmd, int64_t max_tokens);

}  // namespace miniinfer::apps
