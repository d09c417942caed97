// ScriptedRunner: a ModelRunner that answers with given texts instead of running a model, for
// testing what the engine and the server do with known outputs (tool calls, reasoning, ...)
// which random test weights cannot be asked for (`--scripted-outputs FILE`, testing only).
//
// FILE is a JSON list of {"when": "...", "text": "..."}: a request whose prompt (decoded) holds
// `when` generates the tokens of `text` (the model's tokenizer), then the model's first EOS id;
// the first matching entry wins, and a request no entry matches generates EOS at once.
// Sampling parameters are ignored; logprobs are 0.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "engine/model_runner.h"
#include "tokenizer/tokenizer.h"

namespace miniinfer {

class ScriptedRunner : public ModelRunner {
  public:
    // Reads config.json and the tokenizer of model_dir, and the scripts. Throws Error naming the
    // file when either is unusable.
    ScriptedRunner(const std::filesystem::path& model_dir, const std::filesystem::path& scripts);
    const ModelConfig& config() const override { return config_; }
    std::vector<SampledToken> run(const Batch& batch,
                                  std::span<const SamplerInput> sampling) override;

  private:
    struct Script {
        std::string when;
        std::vector<int32_t> ids;  // the text's tokens, then EOS
    };
    ModelConfig config_;
    Tokenizer tokenizer_;
    std::vector<Script> scripts_;
    int32_t eos_ = 0;
};

}  // namespace miniinfer
