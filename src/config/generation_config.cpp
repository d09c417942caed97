#include "config/generation_config.h"

namespace miniinfer {
namespace {
template <typename T>
std::optional<T> optional_field(const Json& json, const char* key, const std::string& where) {
    if (!json.contains(key) || json[key].is_null()) return std::nullopt;
    return json_get<T>(json, key, where);
}
}  // namespace

GenerationConfig GenerationConfig::from_json(const Json& json, const std::string& where) {
    if (!json.is_object()) fail("{}: expected a JSON object", where);
    GenerationConfig g;
    if (json.contains("eos_token_id") && !json["eos_token_id"].is_null()) {
        if (json["eos_token_id"].is_number_integer())
            g.eos_token_ids = {json["eos_token_id"].get<int64_t>()};
        else
            g.eos_token_ids = json_get<std::vector<int64_t>>(json, "eos_token_id", where);
    }
    g.bos_token_id = optional_field<int64_t>(json, "bos_token_id", where);
    g.do_sample = optional_field<bool>(json, "do_sample", where);
    g.temperature = optional_field<double>(json, "temperature", where);
    g.top_p = optional_field<double>(json, "top_p", where);
    g.top_k = optional_field<int64_t>(json, "top_k", where);
    g.min_p = optional_field<double>(json, "min_p", where);
    g.repetition_penalty = optional_field<double>(json, "repetition_penalty", where);
    g.max_new_tokens = optional_field<int64_t>(json, "max_new_tokens", where);
    return g;
}

GenerationConfig GenerationConfig::load(const std::filesystem::path& model_dir) {
    auto path = model_dir / "generation_config.json";
    if (!std::filesystem::exists(path)) return {};
    return from_json(read_json_file(path), path.string());
}

}  // namespace miniinfer
