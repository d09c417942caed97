#include "config/model_config.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

namespace miniinfer {
namespace {

std::vector<int64_t> int_or_list(const Json& json, const std::string& key,
                                 const std::string& where) {
    auto it = json.find(key);
    if (it == json.end() || it->is_null()) return {};
    if (it->is_number_integer()) return {it->get<int64_t>()};
    return json_get<std::vector<int64_t>>(json, key, where);
}

DType parse_torch_dtype(const std::string& name, const std::string& where) {
    if (name == "bfloat16") return DType::kBF16;
    if (name == "float16") return DType::kF16;
    if (name == "float32") return DType::kF32;
    fail("{}: field 'torch_dtype' is '{}'; supported: bfloat16, float16, float32", where, name);
}

// One rope dictionary ("rope_parameters" or "rope_scaling") as transformers 5 reads it, and the
// rope_theta it names, if any.
struct ParsedRope {
    RopeScaling scaling;
    std::optional<double> theta;
};

ParsedRope parse_rope_dict(const Json& dict, const std::string& field, const ModelConfig& cfg) {
    if (!dict.is_object()) fail("{}: must be an object or null", field);
    ParsedRope out;
    // "type" is the 4.x spelling of "rope_type"; transformers takes rope_type where both are.
    std::string kind = json_get_or<std::string>(dict, "type", "default", field);
    if (dict.contains("rope_type")) {
        const auto rope_type = json_get<std::string>(dict, "rope_type", field);
        if (dict.contains("type") && rope_type != kind)
            fail("{}: 'rope_type' is '{}' but 'type' is '{}'", field, rope_type, kind);
        kind = rope_type;
    }
    std::vector<std::string> known = {"rope_type", "type", "rope_theta", "partial_rotary_factor"};
    RopeScaling& rs = out.scaling;
    if (kind == "default") {
        rs.kind = RopeScaling::Kind::kNone;
    } else if (kind == "linear") {
        rs.kind = RopeScaling::Kind::kLinear;
        rs.factor = json_get<double>(dict, "factor", field);
        known.push_back("factor");
    } else if (kind == "yarn") {
        rs.kind = RopeScaling::Kind::kYarn;
        rs.factor = json_get<double>(dict, "factor", field);
        // transformers fills it in from max_position_embeddings when absent.
        rs.original_max_position_embeddings = json_get_or<int64_t>(
            dict, "original_max_position_embeddings", cfg.max_position_embeddings, field);
        if (rs.original_max_position_embeddings <= 0)
            fail("{}: 'original_max_position_embeddings' must be positive, got {}", field,
                 rs.original_max_position_embeddings);
        // transformers reads these with `or`: 0 means the default, as null does.
        const double beta_fast = json_get_or<double>(dict, "beta_fast", 0.0, field);
        const double beta_slow = json_get_or<double>(dict, "beta_slow", 0.0, field);
        rs.beta_fast = beta_fast != 0.0 ? beta_fast : 32.0;
        rs.beta_slow = beta_slow != 0.0 ? beta_slow : 1.0;
        rs.truncate = json_get_or<bool>(dict, "truncate", true, field);
        auto mscale = [](double scale, double m) {
            return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
        };
        const double m = json_get_or<double>(dict, "mscale", 0.0, field);
        const double m_all = json_get_or<double>(dict, "mscale_all_dim", 0.0, field);
        if (dict.contains("attention_factor") && !dict["attention_factor"].is_null()) {
            rs.attention_factor = json_get<double>(dict, "attention_factor", field);
            if (!(rs.attention_factor > 0.0))
                fail("{}: 'attention_factor' must be > 0, got {}", field, rs.attention_factor);
        } else if (m != 0.0 && m_all != 0.0) {
            rs.attention_factor = mscale(rs.factor, m) / mscale(rs.factor, m_all);
        } else {
            rs.attention_factor = mscale(rs.factor, 1.0);
        }
        for (const char* k :
             {"factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "truncate",
              "mscale", "mscale_all_dim", "attention_factor"})
            known.push_back(k);
    } else {
        fail("{}: rope type '{}' is not implemented (supported: default, linear, yarn)", field,
             kind);
    }
    if (rs.kind != RopeScaling::Kind::kNone && !(rs.factor >= 1.0))
        fail("{}: 'factor' must be >= 1, got {}", field, rs.factor);
    // Rotating only part of each head (partial_rotary_factor < 1) is not implemented.
    const double partial = json_get_or<double>(dict, "partial_rotary_factor", 1.0, field);
    if (partial != 1.0)
        fail("{}: 'partial_rotary_factor' is {}; only 1 (the whole head rotates) is supported",
             field, partial);
    if (dict.contains("rope_theta") && !dict["rope_theta"].is_null())
        out.theta = json_get<double>(dict, "rope_theta", field);
    for (const auto& [key, value] : dict.items())
        if (std::find(known.begin(), known.end(), key) == known.end())
            fail(
                "{}: field '{}' is not read for rope type '{}' (it would change nothing here; "
                "remove it or use a supported rope type)",
                field, key, kind);
    return out;
}

// Newer transformers write "rope_parameters" {rope_type, rope_theta, factor, ...}; older ones
// "rope_theta" and "rope_scaling" {type | rope_type, factor, ...}. Both mean the same; where a
// config has both, they must agree (transformers would take rope_scaling and drop the other).
void parse_rope(const Json& json, const std::string& where, ModelConfig& cfg) {
    auto present = [&](const char* key) { return json.contains(key) && !json[key].is_null(); };
    std::optional<ParsedRope> params, scaling;
    if (present("rope_parameters"))
        params = parse_rope_dict(json["rope_parameters"], where + " rope_parameters", cfg);
    if (present("rope_scaling"))
        scaling = parse_rope_dict(json["rope_scaling"], where + " rope_scaling", cfg);
    if (params && scaling && params->scaling != scaling->scaling)
        fail("{}: 'rope_parameters' ({}) and 'rope_scaling' ({}) disagree", where,
             params->scaling.describe(), scaling->scaling.describe());
    // rope_theta may sit at the top level or in either dictionary; every one given must agree.
    std::vector<std::pair<std::string, double>> thetas;
    if (present("rope_theta"))
        thetas.emplace_back("rope_theta", json_get<double>(json, "rope_theta", where));
    if (params && params->theta) thetas.emplace_back("rope_parameters.rope_theta", *params->theta);
    if (scaling && scaling->theta) thetas.emplace_back("rope_scaling.rope_theta", *scaling->theta);
    for (const auto& [name, theta] : thetas)
        if (theta != thetas.front().second)
            fail("{}: '{}' ({}) and '{}' ({}) disagree", where, thetas.front().first,
                 thetas.front().second, name, theta);
    if (!thetas.empty()) cfg.rope_theta = thetas.front().second;
    if (!(cfg.rope_theta > 1.0)) fail("{}: rope_theta must be > 1, got {}", where, cfg.rope_theta);
    if (params)
        cfg.rope_scaling = params->scaling;
    else if (scaling)
        cfg.rope_scaling = scaling->scaling;
}

// A quantized checkpoint's weights are not the bf16 / f16 / f32 the loader reads: refuse it by
// its method rather than load its packed integers or scales as if they were weights.
void parse_quantization(const Json& json, const std::string& where) {
    if (!json.contains("quantization_config") || json["quantization_config"].is_null()) return;
    const Json& q = json["quantization_config"];
    const std::string field = where + " quantization_config";
    if (!q.is_object()) fail("{}: must be an object or null", field);
    const auto method = json_get<std::string>(q, "quant_method", field);
    if (method == "fp8")
        fail(
            "{}: quantization method 'fp8' is not supported: FP8 block-scaled checkpoints are not "
            "yet supported (supported: none)",
            field);
    fail("{}: quantization method '{}' is not supported (supported: none)", field, method);
}

void require_positive(int64_t value, const char* field, const std::string& where) {
    if (value <= 0) fail("{}: field '{}' must be positive, got {}", where, field, value);
}

}  // namespace

std::string RopeScaling::describe() const {
    switch (kind) {
        case Kind::kNone:
            return "none";
        case Kind::kLinear:
            return fmt::format("linear (factor {})", factor);
        case Kind::kYarn:
            return fmt::format(
                "yarn (factor {}, original_max_position_embeddings {}, beta_fast {}, beta_slow "
                "{}, attention_factor {}, truncate {})",
                factor, original_max_position_embeddings, beta_fast, beta_slow, attention_factor,
                truncate);
    }
    return "?";
}

std::string arch_name(Arch arch) {
    switch (arch) {
        case Arch::kQwen2:
            return "qwen2";
        case Arch::kQwen3:
            return "qwen3";
        case Arch::kQwen3Moe:
            return "qwen3_moe";
    }
    return "?";
}

int64_t ModelConfig::max_context_len() const {
    if (rope_scaling.kind != RopeScaling::Kind::kYarn) return max_position_embeddings;
    const auto yarn =
        int64_t(double(rope_scaling.original_max_position_embeddings) * rope_scaling.factor);
    return std::max(max_position_embeddings, yarn);
}

bool ModelConfig::is_moe_layer(int64_t layer) const {
    if (num_experts == 0) return false;
    if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end())
        return false;
    return (layer + 1) % decoder_sparse_step == 0;
}

ModelConfig ModelConfig::from_json(const Json& json, const std::string& where) {
    if (!json.is_object()) fail("{}: expected a JSON object", where);
    ModelConfig cfg;
    cfg.model_type = json_get<std::string>(json, "model_type", where);
    if (cfg.model_type == "qwen2")
        cfg.arch = Arch::kQwen2;
    else if (cfg.model_type == "qwen3")
        cfg.arch = Arch::kQwen3;
    else if (cfg.model_type == "qwen3_moe")
        cfg.arch = Arch::kQwen3Moe;
    else
        fail("{}: model_type '{}' is not supported (supported: qwen2, qwen3, qwen3_moe)", where,
             cfg.model_type);

    cfg.vocab_size = json_get<int64_t>(json, "vocab_size", where);
    cfg.hidden_size = json_get<int64_t>(json, "hidden_size", where);
    cfg.intermediate_size = json_get<int64_t>(json, "intermediate_size", where);
    cfg.num_layers = json_get<int64_t>(json, "num_hidden_layers", where);
    cfg.num_heads = json_get<int64_t>(json, "num_attention_heads", where);
    cfg.num_kv_heads = json_get_or<int64_t>(json, "num_key_value_heads", cfg.num_heads, where);
    for (auto [v, f] : {std::pair{cfg.vocab_size, "vocab_size"},
                        {cfg.hidden_size, "hidden_size"},
                        {cfg.intermediate_size, "intermediate_size"},
                        {cfg.num_layers, "num_hidden_layers"},
                        {cfg.num_heads, "num_attention_heads"},
                        {cfg.num_kv_heads, "num_key_value_heads"}})
        require_positive(v, f, where);
    if (cfg.num_heads % cfg.num_kv_heads != 0)
        fail("{}: num_attention_heads ({}) is not a multiple of num_key_value_heads ({})", where,
             cfg.num_heads, cfg.num_kv_heads);
    // Qwen2 has no head_dim field: always hidden / heads. Qwen3 may set it apart.
    if (cfg.arch != Arch::kQwen2) cfg.head_dim = json_get_or<int64_t>(json, "head_dim", 0, where);
    if (cfg.head_dim == 0) {
        if (cfg.hidden_size % cfg.num_heads != 0)
            fail(
                "{}: hidden_size ({}) is not a multiple of num_attention_heads ({}) and head_dim "
                "is not set",
                where, cfg.hidden_size, cfg.num_heads);
        cfg.head_dim = cfg.hidden_size / cfg.num_heads;
    }
    require_positive(cfg.head_dim, "head_dim", where);
    if (cfg.head_dim % 2 != 0)
        fail("{}: head_dim must be even for rotary embedding, got {}", where, cfg.head_dim);
    cfg.rms_norm_eps = json_get_or<double>(json, "rms_norm_eps", 1e-6, where);
    cfg.max_position_embeddings =
        json_get_or<int64_t>(json, "max_position_embeddings", 32768, where);
    parse_rope(json, where, cfg);

    std::string act = json_get_or<std::string>(json, "hidden_act", "silu", where);
    if (act != "silu") fail("{}: hidden_act '{}' is not supported (only silu)", where, act);
    if (json_get_or<bool>(json, "use_sliding_window", false, where))
        fail("{}: use_sliding_window is true; sliding-window attention is not supported", where);
    if (json.contains("layer_types") && json["layer_types"].is_array())
        for (const auto& t : json["layer_types"])
            if (t != "full_attention")
                fail("{}: layer_types contains '{}'; only full_attention is supported", where,
                     t.dump());

    cfg.attention_bias =
        cfg.arch == Arch::kQwen2 || json_get_or<bool>(json, "attention_bias", false, where);
    cfg.qk_norm = cfg.arch != Arch::kQwen2;
    cfg.tie_word_embeddings = json_get_or<bool>(json, "tie_word_embeddings", false, where);

    if (cfg.arch == Arch::kQwen3Moe) {
        // transformers 5 writes num_local_experts; the hub's checkpoints num_experts.
        cfg.num_experts = json.contains("num_experts")
                              ? json_get<int64_t>(json, "num_experts", where)
                              : json_get<int64_t>(json, "num_local_experts", where);
        cfg.num_experts_per_tok = json_get<int64_t>(json, "num_experts_per_tok", where);
        cfg.moe_intermediate_size = json_get<int64_t>(json, "moe_intermediate_size", where);
        cfg.norm_topk_prob = json_get_or<bool>(json, "norm_topk_prob", false, where);
        cfg.decoder_sparse_step = json_get_or<int64_t>(json, "decoder_sparse_step", 1, where);
        cfg.mlp_only_layers = json_get_or<std::vector<int64_t>>(json, "mlp_only_layers", {}, where);
        require_positive(cfg.num_experts, "num_experts", where);
        require_positive(cfg.moe_intermediate_size, "moe_intermediate_size", where);
        require_positive(cfg.decoder_sparse_step, "decoder_sparse_step", where);
        if (cfg.num_experts_per_tok <= 0 || cfg.num_experts_per_tok > cfg.num_experts)
            fail("{}: num_experts_per_tok must be in [1, num_experts={}], got {}", where,
                 cfg.num_experts, cfg.num_experts_per_tok);
    }

    parse_quantization(json, where);

    cfg.eos_token_ids = int_or_list(json, "eos_token_id", where);
    cfg.bos_token_id = json_get_or<int64_t>(json, "bos_token_id", -1, where);
    std::string dtype_field = json.contains("torch_dtype") ? "torch_dtype" : "dtype";
    cfg.dtype =
        parse_torch_dtype(json_get_or<std::string>(json, dtype_field, "bfloat16", where), where);
    return cfg;
}

ModelConfig ModelConfig::load(const std::filesystem::path& model_dir) {
    if (!std::filesystem::is_directory(model_dir))
        fail("{}: not a directory (expected a Hugging Face model directory)", model_dir.string());
    auto path = model_dir / "config.json";
    return from_json(read_json_file(path), path.string());
}

}  // namespace miniinfer
