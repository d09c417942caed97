#include "config/model_config.h"

#include <algorithm>

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

// Newer transformers write "rope_parameters" {rope_type, rope_theta, factor, ...}; older ones
// "rope_theta" and "rope_scaling" {type | rope_type, factor, ...}. Both mean the same.
void parse_rope(const Json& json, const std::string& where, ModelConfig& cfg) {
    Json scaling = json.value("rope_scaling", Json());
    if (json.contains("rope_parameters") && !json["rope_parameters"].is_null()) {
        scaling = json["rope_parameters"];
        if (!scaling.is_object()) fail("{}: field 'rope_parameters' must be an object", where);
        cfg.rope_theta =
            json_get_or<double>(scaling, "rope_theta", cfg.rope_theta, where + " rope_parameters");
    }
    cfg.rope_theta = json_get_or<double>(json, "rope_theta", cfg.rope_theta, where);
    if (scaling.is_null()) return;
    if (!scaling.is_object()) fail("{}: field 'rope_scaling' must be an object or null", where);
    const std::string field = where + " rope_scaling";
    std::string kind = scaling.contains("rope_type")
                           ? json_get<std::string>(scaling, "rope_type", field)
                           : json_get_or<std::string>(scaling, "type", "default", field);
    RopeScaling& rs = cfg.rope_scaling;
    if (kind == "default") {
        rs.kind = RopeScaling::Kind::kNone;
    } else if (kind == "linear") {
        rs.kind = RopeScaling::Kind::kLinear;
        rs.factor = json_get<double>(scaling, "factor", field);
    } else {
        fail("{}: rope_scaling type '{}' is not implemented (supported: default, linear)", where,
             kind);
    }
    if (rs.kind != RopeScaling::Kind::kNone && !(rs.factor >= 1.0))
        fail("{}: rope_scaling factor must be >= 1, got {}", where, rs.factor);
}

void require_positive(int64_t value, const char* field, const std::string& where) {
    if (value <= 0) fail("{}: field '{}' must be positive, got {}", where, field, value);
}

}  // namespace

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
