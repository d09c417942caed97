#include "config/model_config.h"

#include "config/config_parsing.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <regex>

#include <fmt/format.h>
#include <fmt/ranges.h>

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

// Block-scaled FP8 is read (QuantizationConfig); any other method, format, activation scheme or
// block shape is refused by its field rather than loaded as if its bytes meant something else.
QuantizationConfig parse_quantization(const Json& json, const std::string& where) {
    QuantizationConfig quant;
    if (!json.contains("quantization_config") || json["quantization_config"].is_null())
        return quant;
    const Json& q = json["quantization_config"];
    const std::string field = where + " quantization_config";
    if (!q.is_object()) fail("{}: must be an object or null", field);
    const auto method = json_get<std::string>(q, "quant_method", field);
    if (method != "fp8")
        fail("{}: quantization method '{}' is not supported (supported: fp8)", field, method);
    quant.method = QuantizationConfig::Method::kFp8;
    const auto format = json_get_or<std::string>(q, "fmt", "e4m3", field);
    if (format != "e4m3")
        fail("{}: field 'fmt' is '{}'; FP8 weights are read as e4m3 only", field, format);
    const auto activations = json_get_or<std::string>(q, "activation_scheme", "dynamic", field);
    if (activations != "dynamic")
        fail(
            "{}: field 'activation_scheme' is '{}'; only 'dynamic' (per-token scales computed at "
            "run time) is supported",
            field, activations);
    if (!q.contains("weight_block_size") || q["weight_block_size"].is_null())
        fail(
            "{}: field 'weight_block_size' is missing; only block-scaled FP8 ([128, 128]) is "
            "supported, not per-tensor scales",
            field);
    const auto block = json_get<std::vector<int64_t>>(q, "weight_block_size", field);
    if (block != std::vector<int64_t>{128, 128})
        fail("{}: field 'weight_block_size' is [{}]; only [128, 128] is supported", field,
             fmt::join(block, ", "));
    quant.block_out = block[0];
    quant.block_in = block[1];
    if (q.contains("modules_to_not_convert") && !q["modules_to_not_convert"].is_null())
        quant.modules_to_not_convert =
            json_get<std::vector<std::string>>(q, "modules_to_not_convert", field);
    for (const std::string& module : quant.modules_to_not_convert) {
        try {
            std::regex pattern(module);
        } catch (const std::regex_error&) {
            fail("{}: modules_to_not_convert entry '{}' is not a regular expression", field,
                 module);
        }
    }
    return quant;
}

}  // namespace

void config_parsing::require_positive(int64_t value, const char* field, const std::string& where) {
    if (value <= 0) fail("{}: field '{}' must be positive, got {}", where, field, value);
}

bool QuantizationConfig::quantizes(const std::string& module) const {
    if (!is_fp8()) return false;
    for (const std::string& entry : modules_to_not_convert)
        if (module.ends_with(entry) ||
            std::regex_search(module, std::regex(entry), std::regex_constants::match_continuous))
            return false;
    return true;
}

std::string QuantizationConfig::describe() const {
    if (!is_fp8()) return "none";
    std::string out =
        fmt::format("fp8 e4m3, dynamic activations, blocks {}x{}", block_out, block_in);
    if (!modules_to_not_convert.empty())
        out += fmt::format(" (not converted: {})", fmt::join(modules_to_not_convert, ", "));
    return out;
}

std::string arch_name(Arch arch) {
    switch (arch) {
        case Arch::kQwen2:
            return "qwen2";
        case Arch::kQwen3:
            return "qwen3";
        case Arch::kQwen3Moe:
            return "qwen3_moe";
        case Arch::kQwen35:
            return "qwen3_5";
        case Arch::kQwen35Moe:
            return "qwen3_5_moe";
        case Arch::kQwen3Next:
            return "qwen3_next";
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

namespace {
using config_parsing::require_positive;

Arch parse_arch(const std::string& model_type, const std::string& where) {
    static const std::pair<const char*, Arch> kArchs[] = {{"qwen2", Arch::kQwen2},
                                                          {"qwen3", Arch::kQwen3},
                                                          {"qwen3_moe", Arch::kQwen3Moe},
                                                          {"qwen3_5", Arch::kQwen35},
                                                          {"qwen3_5_text", Arch::kQwen35},
                                                          {"qwen3_5_moe", Arch::kQwen35Moe},
                                                          {"qwen3_5_moe_text", Arch::kQwen35Moe},
                                                          {"qwen3_next", Arch::kQwen3Next}};
    std::string names;
    for (const auto& [name, arch] : kArchs) {
        if (model_type == name) return arch;
        names += (names.empty() ? "" : ", ") + std::string(name);
    }
    fail("{}: model_type '{}' is not supported (supported: {})", where, model_type, names);
}

// The multimodal forms keep the language model's fields in "text_config", whose own model_type
// (where it says one) must be the text model of the wrapper's.
const Json& text_config(const Json& json, const std::string& model_type, const std::string& where) {
    if (!json.contains("text_config") || !json["text_config"].is_object())
        fail(
            "{}: missing field 'text_config' (model_type '{}' nests the language model's config "
            "there)",
            where, model_type);
    const Json& text = json["text_config"];
    const std::string want = model_type + "_text";
    const auto text_type =
        json_get_or<std::string>(text, "model_type", want, where + " text_config");
    if (text_type != want)
        fail("{} text_config: model_type '{}' does not belong in a '{}' config (expected '{}')",
             where, text_type, model_type, want);
    return text;
}

// The experts. Qwen3-MoE and Qwen3-Next place them by mlp_only_layers and decoder_sparse_step;
// a qwen3_5_moe has them in every layer, top-k always renormalised.
void parse_moe(const Json& json, const std::string& where, ModelConfig& cfg) {
    // transformers 5 writes num_local_experts; the hub's checkpoints num_experts.
    cfg.num_experts = json.contains("num_experts")
                          ? json_get<int64_t>(json, "num_experts", where)
                          : json_get<int64_t>(json, "num_local_experts", where);
    cfg.num_experts_per_tok = json_get<int64_t>(json, "num_experts_per_tok", where);
    cfg.moe_intermediate_size = json_get<int64_t>(json, "moe_intermediate_size", where);
    if (cfg.arch == Arch::kQwen35Moe) {
        cfg.norm_topk_prob = true;
    } else {
        cfg.norm_topk_prob =
            json_get_or<bool>(json, "norm_topk_prob", cfg.arch == Arch::kQwen3Next, where);
        cfg.decoder_sparse_step = json_get_or<int64_t>(json, "decoder_sparse_step", 1, where);
        cfg.mlp_only_layers = json_get_or<std::vector<int64_t>>(json, "mlp_only_layers", {}, where);
    }
    require_positive(cfg.num_experts, "num_experts", where);
    require_positive(cfg.moe_intermediate_size, "moe_intermediate_size", where);
    require_positive(cfg.decoder_sparse_step, "decoder_sparse_step", where);
    if (cfg.num_experts_per_tok <= 0 || cfg.num_experts_per_tok > cfg.num_experts)
        fail("{}: num_experts_per_tok must be in [1, num_experts={}], got {}", where,
             cfg.num_experts, cfg.num_experts_per_tok);
    if (!cfg.is_hybrid()) return;
    cfg.shared_expert_intermediate_size =
        json_get<int64_t>(json, "shared_expert_intermediate_size", where);
    require_positive(cfg.shared_expert_intermediate_size, "shared_expert_intermediate_size", where);
    for (int64_t l = 0; l < cfg.num_layers; ++l)
        if (!cfg.is_moe_layer(l)) {  // a dense layer: the MLP of intermediate_size
            cfg.intermediate_size = json_get<int64_t>(json, "intermediate_size", where);
            require_positive(cfg.intermediate_size, "intermediate_size", where);
            break;
        }
}

}  // namespace

ModelConfig ModelConfig::from_json(const Json& top, const std::string& top_where) {
    if (!top.is_object()) fail("{}: expected a JSON object", top_where);
    ModelConfig cfg;
    cfg.model_type = json_get<std::string>(top, "model_type", top_where);
    cfg.arch = parse_arch(cfg.model_type, top_where);
    cfg.has_vision = cfg.model_type == "qwen3_5" || cfg.model_type == "qwen3_5_moe";
    const Json& json = cfg.has_vision ? text_config(top, cfg.model_type, top_where) : top;
    const std::string where = cfg.has_vision ? top_where + " text_config" : top_where;
    const bool hybrid = cfg.is_hybrid();
    // A hybrid MoE model may have no dense layer, and then no intermediate_size.
    const bool moe_hybrid = cfg.arch == Arch::kQwen35Moe || cfg.arch == Arch::kQwen3Next;

    cfg.vocab_size = json_get<int64_t>(json, "vocab_size", where);
    cfg.hidden_size = json_get<int64_t>(json, "hidden_size", where);
    cfg.intermediate_size = moe_hybrid ? json_get_or<int64_t>(json, "intermediate_size", 0, where)
                                       : json_get<int64_t>(json, "intermediate_size", where);
    cfg.num_layers = json_get<int64_t>(json, "num_hidden_layers", where);
    cfg.num_heads = json_get<int64_t>(json, "num_attention_heads", where);
    cfg.num_kv_heads = json_get_or<int64_t>(json, "num_key_value_heads", cfg.num_heads, where);
    // (A hybrid MoE's intermediate_size is checked in parse_moe: only dense layers need it.)
    for (auto [v, f] : {std::pair{cfg.vocab_size, "vocab_size"},
                        {cfg.hidden_size, "hidden_size"},
                        {moe_hybrid ? 1 : cfg.intermediate_size, "intermediate_size"},
                        {cfg.num_layers, "num_hidden_layers"},
                        {cfg.num_heads, "num_attention_heads"},
                        {cfg.num_kv_heads, "num_key_value_heads"}})
        require_positive(v, f, where);
    if (cfg.num_heads % cfg.num_kv_heads != 0)
        fail("{}: num_attention_heads ({}) is not a multiple of num_key_value_heads ({})", where,
             cfg.num_heads, cfg.num_kv_heads);
    // Qwen2 has no head_dim field: always hidden / heads. Qwen3 may set it apart; the hybrids'
    // (256 in the releases) is never hidden / heads, so they must say it.
    if (hybrid)
        cfg.head_dim = json_get<int64_t>(json, "head_dim", where);
    else if (cfg.arch != Arch::kQwen2)
        cfg.head_dim = json_get_or<int64_t>(json, "head_dim", 0, where);
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
    config_parsing::parse_rope(json, where, cfg);

    std::string act = json_get_or<std::string>(json, "hidden_act", "silu", where);
    if (act != "silu") fail("{}: hidden_act '{}' is not supported (only silu)", where, act);
    if (json_get_or<bool>(json, "use_sliding_window", false, where))
        fail("{}: use_sliding_window is true; sliding-window attention is not supported", where);
    if (hybrid) {
        config_parsing::parse_hybrid(json, where, cfg);
    } else {
        if (json.contains("layer_types") && json["layer_types"].is_array())
            for (const auto& t : json["layer_types"])
                if (t != "full_attention")
                    fail("{}: layer_types contains '{}'; only full_attention is supported", where,
                         t.dump());
        cfg.layer_types.assign(size_t(cfg.num_layers), LayerType::kFullAttention);
    }

    cfg.attention_bias =
        cfg.arch == Arch::kQwen2 || json_get_or<bool>(json, "attention_bias", false, where);
    cfg.qk_norm = cfg.arch != Arch::kQwen2;
    // The multimodal wrapper's own flag decides (transformers ties by the outer config).
    cfg.tie_word_embeddings = json_get_or<bool>(top, "tie_word_embeddings", false, top_where);

    if (cfg.arch == Arch::kQwen3Moe || moe_hybrid) parse_moe(json, where, cfg);

    cfg.quantization = parse_quantization(top, top_where);
    if (cfg.has_vision && !cfg.quantization.is_fp8())
        cfg.quantization = parse_quantization(json, where);
    if (cfg.quantization.is_fp8() && cfg.is_hybrid())
        fail(
            "{} quantization_config: quantization method 'fp8' is not supported for model_type "
            "{} yet (FP8 checkpoints: qwen2, qwen3, qwen3_moe)",
            cfg.has_vision && json.contains("quantization_config") ? where : top_where,
            cfg.model_type);

    // Token ids and dtype: the text config's, else the wrapper's.
    cfg.eos_token_ids = int_or_list(json, "eos_token_id", where);
    if (cfg.eos_token_ids.empty() && cfg.has_vision)
        cfg.eos_token_ids = int_or_list(top, "eos_token_id", top_where);
    cfg.bos_token_id = json_get_or<int64_t>(json, "bos_token_id", -1, where);
    if (cfg.bos_token_id < 0 && cfg.has_vision)
        cfg.bos_token_id = json_get_or<int64_t>(top, "bos_token_id", -1, top_where);
    const bool own_dtype = json.contains("torch_dtype") || json.contains("dtype");
    const Json& dtype_json = own_dtype || !cfg.has_vision ? json : top;
    std::string dtype_field = dtype_json.contains("torch_dtype") ? "torch_dtype" : "dtype";
    cfg.dtype = parse_torch_dtype(
        json_get_or<std::string>(dtype_json, dtype_field, "bfloat16", where), where);
    return cfg;
}

ModelConfig ModelConfig::load(const std::filesystem::path& model_dir) {
    if (!std::filesystem::is_directory(model_dir))
        fail("{}: not a directory (expected a Hugging Face model directory)", model_dir.string());
    auto path = model_dir / "config.json";
    return from_json(read_json_file(path), path.string());
}

}  // namespace miniinfer
