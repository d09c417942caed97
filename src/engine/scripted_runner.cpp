#include "engine/scripted_runner.h"

#include "core/check.h"
#include "core/json.h"

namespace miniinfer {

ScriptedRunner::ScriptedRunner(const std::filesystem::path& model_dir,
                               const std::filesystem::path& scripts)
    : config_(ModelConfig::load(model_dir)), tokenizer_([&] {
          std::optional<Tokenizer> t = load_tokenizer(model_dir);
          if (!t) fail("{}: --scripted-outputs needs the model's tokenizer", model_dir.string());
          return std::move(*t);
      }()) {
    if (config_.eos_token_ids.empty())
        fail("{}: --scripted-outputs needs an eos_token_id in config.json", model_dir.string());
    eos_ = int32_t(config_.eos_token_ids.front());
    const Json json = read_json_file(scripts);
    if (!json.is_array()) fail("{}: expected a list of {{\"when\", \"text\"}}", scripts.string());
    for (const Json& entry : json) {
        Script s{json_get<std::string>(entry, "when", scripts.string()),
                 tokenizer_.encode(json_get<std::string>(entry, "text", scripts.string()))};
        s.ids.push_back(eos_);
        scripts_.push_back(std::move(s));
    }
}

std::vector<SampledToken> ScriptedRunner::run(const Batch&,
                                              std::span<const SamplerInput> sampling) {
    std::vector<SampledToken> out;
    for (const SamplerInput& in : sampling) {
        const std::string prompt = tokenizer_.decode(
            std::vector<int32_t>(in.prompt_ids.begin(), in.prompt_ids.end()), false);
        int32_t token = eos_;
        for (const Script& s : scripts_)
            if (prompt.find(s.when) != std::string::npos) {
                if (in.output_ids.size() < s.ids.size()) token = s.ids[in.output_ids.size()];
                break;
            }
        out.push_back({token, 0.f, {}});
    }
    return out;
}

}  // namespace miniinfer
