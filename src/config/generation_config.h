// Defaults from generation_config.json (absent file: all unset). The engine uses them as the
// defaults of SamplingParams, as vLLM does; eos_token_ids joins config.json's EOS ids.
#pragma once

#include <filesystem>
#include <optional>
#include <vector>

#include "core/json.h"

namespace miniinfer {

struct GenerationConfig {
    std::vector<int64_t> eos_token_ids;
    std::optional<int64_t> bos_token_id;
    std::optional<bool> do_sample;
    std::optional<double> temperature;
    std::optional<double> top_p;
    std::optional<int64_t> top_k;
    std::optional<double> min_p;
    std::optional<double> repetition_penalty;
    std::optional<int64_t> max_new_tokens;

    static GenerationConfig from_json(const Json& json, const std::string& source);
    // <dir>/generation_config.json if present; a malformed file is an Error.
    static GenerationConfig load(const std::filesystem::path& model_dir);
};

}  // namespace miniinfer
