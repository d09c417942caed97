// Command-line options shared by the commands that run the engine (generate, chat): the
// engine's settings, and the sampling flags, which are collected as a JSON object with vLLM's
// field names so SamplingParams::from_json applies them (flags not given are left out).
#pragma once

#include <CLI/CLI.hpp>

#include <memory>

#include "config/engine_config.h"
#include "core/json.h"

namespace miniinfer::apps {

struct EngineOptions {
    EngineConfig config;
    int64_t kv_cache_mb = 0;
    bool no_prefix_caching = false;
    EngineConfig resolve() const;  // config with the flags folded in
};

// positional_model: the model directory is the first positional argument (serve, as vLLM).
void add_engine_options(CLI::App& cmd, EngineOptions& options, bool positional_model = false);
// --use-multiprocess (serve, generate: the commands that run the engine through an EngineClient).
void add_multiprocess_option(CLI::App& cmd, EngineOptions& options);

// Returns the object the sampling flags fill in when the command line is parsed.
std::shared_ptr<Json> add_sampling_options(CLI::App& cmd);

}  // namespace miniinfer::apps
