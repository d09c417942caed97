// The hybrid Gated DeltaNet models' fields of ModelConfig (config_parsing.h).
#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "config/config_parsing.h"

namespace miniinfer {

bool ModelConfig::is_hybrid() const {
    return arch == Arch::kQwen35 || arch == Arch::kQwen35Moe || arch == Arch::kQwen3Next;
}

int64_t ModelConfig::num_linear_attention_layers() const {
    return std::count(layer_types.begin(), layer_types.end(), LayerType::kLinearAttention);
}

int64_t ModelConfig::gdn_state_bytes(int64_t conv_element_bytes) const {
    const LinearAttentionConfig& la = linear_attention;
    return num_linear_attention_layers() * (la.recurrent_state_elements() * int64_t(sizeof(float)) +
                                            la.conv_state_elements() * conv_element_bytes);
}

std::string describe_layer_pattern(const std::vector<LayerType>& types) {
    const size_t n = types.size();
    if (n == 0) return "no layers";
    size_t period = 1;
    for (; period < n; ++period) {
        if (n % period != 0) continue;
        bool repeats = true;
        for (size_t i = period; i < n && repeats; ++i) repeats = types[i] == types[i % period];
        if (repeats) break;
    }
    auto name = [](LayerType t) { return t == LayerType::kFullAttention ? "full" : "linear"; };
    if (period == 1) return fmt::format("{} x{}", name(types[0]), n);
    std::string out;
    for (size_t i = 0; i < period;) {
        size_t run = 1;
        while (i + run < period && types[i + run] == types[i]) ++run;
        out += fmt::format("{}{} x{}", out.empty() ? "" : ", ", name(types[i]), run);
        i += run;
    }
    if (n / period > 1) out += fmt::format(", repeated x{}", n / period);
    return out;
}

void check_engine_support(const ModelConfig& config, const std::string& device,
                          int64_t tensor_parallel_size) {
    if (!config.is_hybrid()) return;
    if (tensor_parallel_size > 1)
        fail(
            "model_type {}: tensor parallelism is not supported for the hybrid Gated DeltaNet "
            "models yet (tensor_parallel_size {})",
            config.model_type, tensor_parallel_size);
    if (device != "cuda") return;
    const auto refuse = [&](const std::string& what) {
        fail("model_type {}: {} does not run on --device cuda yet (--device cpu runs it)",
             config.model_type, what);
    };
    const LinearAttentionConfig& la = config.linear_attention;
    if (config.head_dim != 64 && config.head_dim != 128 && config.head_dim != 256)
        refuse(fmt::format("head_dim {} (the GPU's attention kernels take 64, 128 and 256)",
                           config.head_dim));
    if (la.key_head_dim != la.value_head_dim || (la.key_head_dim != 64 && la.key_head_dim != 128))
        refuse(fmt::format(
            "linear_key_head_dim {} with linear_value_head_dim {} (the GPU's Gated DeltaNet "
            "kernel takes both 64 or both 128)",
            la.key_head_dim, la.value_head_dim));
    if (la.conv_kernel_dim != 4)
        refuse(fmt::format("linear_conv_kernel_dim {} (the GPU's conv kernel is 4 wide)",
                           la.conv_kernel_dim));
    if (config.num_experts > 512)  // kMoeMaxExperts (kernels/cuda/moe/moe_routing.h)
        refuse(
            fmt::format("num_experts {} (the GPU's routing takes up to 512)", config.num_experts));
}

namespace config_parsing {
namespace {

// layer_types (each "linear_attention" or "full_attention"), or without it every
// full_attention_interval-th layer full attention (transformers' rule); both given must agree.
void parse_layer_types(const Json& json, const std::string& where, ModelConfig& cfg) {
    std::optional<int64_t> interval;
    if (json.contains("full_attention_interval") && !json["full_attention_interval"].is_null()) {
        interval = json_get<int64_t>(json, "full_attention_interval", where);
        require_positive(*interval, "full_attention_interval", where);
    }
    std::vector<LayerType> from_interval;
    for (int64_t l = 0; l < cfg.num_layers; ++l)
        from_interval.push_back((l + 1) % interval.value_or(4) == 0 ? LayerType::kFullAttention
                                                                    : LayerType::kLinearAttention);
    if (!json.contains("layer_types") || json["layer_types"].is_null()) {
        cfg.layer_types = from_interval;
        return;
    }
    const auto names = json_get<std::vector<std::string>>(json, "layer_types", where);
    if (int64_t(names.size()) != cfg.num_layers)
        fail("{}: 'layer_types' has {} entries for num_hidden_layers {}", where, names.size(),
             cfg.num_layers);
    for (size_t l = 0; l < names.size(); ++l) {
        if (names[l] == "linear_attention")
            cfg.layer_types.push_back(LayerType::kLinearAttention);
        else if (names[l] == "full_attention")
            cfg.layer_types.push_back(LayerType::kFullAttention);
        else
            fail("{}: 'layer_types'[{}] is '{}' (supported: linear_attention, full_attention)",
                 where, l, names[l]);
    }
    if (interval && cfg.layer_types != from_interval)
        fail("{}: 'layer_types' ({}) and 'full_attention_interval' {} disagree", where,
             describe_layer_pattern(cfg.layer_types), *interval);
}

// The Gated DeltaNet layers' sizes, all required.
void parse_linear_attention(const Json& json, const std::string& where, ModelConfig& cfg) {
    LinearAttentionConfig& la = cfg.linear_attention;
    for (auto [field, key] : {std::pair{&la.num_key_heads, "linear_num_key_heads"},
                              {&la.num_value_heads, "linear_num_value_heads"},
                              {&la.key_head_dim, "linear_key_head_dim"},
                              {&la.value_head_dim, "linear_value_head_dim"},
                              {&la.conv_kernel_dim, "linear_conv_kernel_dim"}}) {
        *field = json_get<int64_t>(json, key, where);
        require_positive(*field, key, where);
    }
    if (la.num_value_heads % la.num_key_heads != 0)
        fail("{}: linear_num_value_heads ({}) is not a multiple of linear_num_key_heads ({})",
             where, la.num_value_heads, la.num_key_heads);
}

}  // namespace

// What the hybrids add or fix: the layer pattern, the Gated DeltaNet sizes, the gated and
// bias-free full attention, zero-centred norms.
void parse_hybrid(const Json& json, const std::string& where, ModelConfig& cfg) {
    parse_layer_types(json, where, cfg);
    parse_linear_attention(json, where, cfg);
    if (json_get_or<bool>(json, "attention_bias", false, where))
        fail("{}: attention_bias is true; the hybrid models' attention has no biases here", where);
    // transformers' attention always gates; the released configs say so.
    if (!json_get_or<bool>(json, "attn_output_gate", true, where))
        fail("{}: attn_output_gate is false; only the gated attention is supported", where);
    cfg.attn_output_gate = true;
    cfg.zero_centered_norm = true;
}

}  // namespace config_parsing
}  // namespace miniinfer
