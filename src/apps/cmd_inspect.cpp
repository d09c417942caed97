// miniinfer inspect --model DIR: the config as MiniInfer reads it and a full check of the
// checkpoint (every expected tensor present with the right shape and dtype). For the hybrid
// Gated DeltaNet models also the layer pattern, the state a request keeps, the K/V bytes per
// token (full-attention layers only) and what is not supported.
#include <algorithm>
#include <cstdio>
#include <map>

#include "apps/commands.h"
#include "apps/engine_options.h"
#include "config/generation_config.h"
#include "config/model_config.h"
#include "core/json.h"
#include "loader/checkpoint.h"
#include "loader/hub.h"
#include "models/weights.h"

namespace miniinfer::apps {
namespace {

struct InspectOptions {
    std::string model_dir;
    std::string revision = "main";
    bool json = false;
};

constexpr int64_t kGiB = int64_t(1) << 30;

// The hybrids' part of the summary. State: S in fp32, the conv window in fp32 as the CPU
// reference keeps it (the GPU may keep it in bf16: conv_bytes halves). K/V in bf16.
Json hybrid_summary(const ModelConfig& c, const CheckpointLayout& layout) {
    const LinearAttentionConfig& la = c.linear_attention;
    const int64_t linear_layers = c.num_linear_attention_layers();
    std::vector<std::string> types;
    for (LayerType t : c.layer_types)
        types.push_back(t == LayerType::kFullAttention ? "full_attention" : "linear_attention");
    return {{"layer_pattern", describe_layer_pattern(c.layer_types)},
            {"layer_types", types},
            {"num_linear_attention_layers", linear_layers},
            {"num_full_attention_layers", c.num_kv_layers()},
            {"linear_attention",
             {{"num_key_heads", la.num_key_heads},
              {"num_value_heads", la.num_value_heads},
              {"key_head_dim", la.key_head_dim},
              {"value_head_dim", la.value_head_dim},
              {"conv_kernel_dim", la.conv_kernel_dim}}},
            {"gdn_state_bytes_per_request", c.gdn_state_bytes()},
            {"gdn_recurrent_state_bytes", linear_layers * la.recurrent_state_elements() * 4},
            {"gdn_conv_state_bytes", linear_layers * la.conv_state_elements() * 4},
            {"partial_rotary_factor", c.partial_rotary_factor},
            {"rotary_dim", c.rotary_dim},
            {"mrope_section", c.mrope_section},
            {"attn_output_gate", c.attn_output_gate},
            {"zero_centered_norm", c.zero_centered_norm},
            {"checkpoint_layout",
             {{"prefix", layout.prefix},
              {"experts", c.num_experts == 0     ? "none"
                          : layout.fused_experts ? "fused (experts.gate_up_proj, down_proj)"
                                                 : "per expert"},
              {"linear_attention_projections",
               layout.grouped_gdn ? "in_proj_qkvz + in_proj_ba (grouped per key head, split "
                                    "at load)"
                                  : "in_proj_qkv, in_proj_z, in_proj_b, in_proj_a"}}}};
}

// What the checkpoint holds that is not served, and whether the engine runs the model.
std::vector<std::string> not_supported(const ModelConfig& c, const UnusedTensors& unused) {
    std::vector<std::string> out;
    if (c.has_vision || unused.vision > 0)
        out.push_back(
            fmt::format("vision input ({} model.visual.* tensors not loaded)", unused.vision));
    if (unused.mtp > 0)
        out.push_back(
            fmt::format("multi-token prediction ({} mtp.* tensors not loaded)", unused.mtp));
    try {
        check_engine_support(c, "cuda");
    } catch (const Error& e) {
        out.push_back(fmt::format("serving on CUDA ({})", e.what()));
    }
    return out;
}

Json inspect(const std::string& model_dir) {
    ModelConfig c = ModelConfig::load(model_dir);
    GenerationConfig gen = GenerationConfig::load(model_dir);
    Checkpoint ckpt = Checkpoint::open(model_dir);
    const CheckpointLayout layout = detect_layout(c, ckpt);
    const auto expected = expected_tensors(c, layout);
    std::map<std::string, int> dtypes;
    for (const auto& [name, shape] : expected) {
        Tensor t = ckpt.get(name, shape);
        ++dtypes[std::string(dtype_name(t.dtype()))];
    }
    Json out = {{"model_dir", model_dir},
                {"model_type", c.model_type},
                {"num_layers", c.num_layers},
                {"hidden_size", c.hidden_size},
                {"intermediate_size", c.intermediate_size},
                {"num_heads", c.num_heads},
                {"num_kv_heads", c.num_kv_heads},
                {"head_dim", c.head_dim},
                {"vocab_size", c.vocab_size},
                {"rope_theta", c.rope_theta},
                {"rope_scaling", c.rope_scaling.describe()},
                {"quantization", c.quantization.describe()},
                {"rms_norm_eps", c.rms_norm_eps},
                {"attention_bias", c.attention_bias},
                {"qk_norm", c.qk_norm},
                {"tie_word_embeddings", c.tie_word_embeddings},
                {"max_position_embeddings", c.max_position_embeddings},
                {"eos_token_ids", c.eos_token_ids},
                {"generation_eos_token_ids", gen.eos_token_ids},
                {"num_files", ckpt.files().size()},
                {"num_tensors", ckpt.num_tensors()},
                {"num_params", ckpt.num_params()},
                {"num_bytes", ckpt.num_bytes()},
                {"weight_dtypes", dtypes},
                {"kv_bytes_per_token", 2 * c.num_kv_layers() * c.kv_size() * 2}};
    if (c.is_hybrid()) out["hybrid"] = hybrid_summary(c, layout);
    const UnusedTensors unused = unused_tensors(ckpt, expected);
    out["skipped_tensors"] = {{"vision", unused.vision}, {"mtp", unused.mtp}};
    if (auto missing = not_supported(c, unused); !missing.empty()) out["not_supported"] = missing;
    if (c.num_experts > 0) {
        out["num_experts"] = c.num_experts;
        out["num_experts_per_tok"] = c.num_experts_per_tok;
        out["moe_intermediate_size"] = c.moe_intermediate_size;
        out["norm_topk_prob"] = c.norm_topk_prob;
        out["mlp_only_layers"] = c.mlp_only_layers;
        out["decoder_sparse_step"] = c.decoder_sparse_step;
        out["shared_expert_intermediate_size"] = c.shared_expert_intermediate_size;
    }
    return out;
}

double mib(int64_t bytes) {
    return double(bytes) / double(1 << 20);
}

void print_hybrid(const Json& j) {
    const Json& h = j["hybrid"];
    const Json& la = h["linear_attention"];
    std::printf("layers      %s (%lld Gated DeltaNet, %lld full attention)\n",
                h["layer_pattern"].get<std::string>().c_str(),
                h["num_linear_attention_layers"].get<long long>(),
                h["num_full_attention_layers"].get<long long>());
    std::printf("gdn         %lld key heads x %lld, %lld value heads x %lld, conv kernel %lld\n",
                la["num_key_heads"].get<long long>(), la["key_head_dim"].get<long long>(),
                la["num_value_heads"].get<long long>(), la["value_head_dim"].get<long long>(),
                la["conv_kernel_dim"].get<long long>());
    const auto state = h["gdn_state_bytes_per_request"].get<int64_t>();
    std::printf(
        "state       %.3f MiB per request (S fp32 %.3f MiB, conv window fp32 %.3f MiB); 1 GiB "
        "holds %lld requests' state\n",
        mib(state), mib(h["gdn_recurrent_state_bytes"].get<int64_t>()),
        mib(h["gdn_conv_state_bytes"].get<int64_t>()),
        (long long)(kGiB / std::max<int64_t>(1, state)));
    const auto kv = j["kv_bytes_per_token"].get<int64_t>();
    std::printf(
        "kv cache    %lld bytes per token in bf16 (full-attention layers only: %lld of %lld); "
        "1 GiB holds %lld tokens\n",
        (long long)kv, h["num_full_attention_layers"].get<long long>(),
        j["num_layers"].get<long long>(), (long long)(kGiB / std::max<int64_t>(1, kv)));
    std::printf(
        "rotary      %lld of %lld dims per head (partial_rotary_factor %g)%s\n",
        h["rotary_dim"].get<long long>(), j["head_dim"].get<long long>(),
        h["partial_rotary_factor"].get<double>(),
        h["mrope_section"].empty()
            ? ""
            : fmt::format(", mrope sections {} (text: plain positions)", h["mrope_section"].dump())
                  .c_str());
    std::printf("gates       attention output gate %s, norms zero-centred (x * (1 + w)) %s\n",
                h["attn_output_gate"].get<bool>() ? "yes" : "no",
                h["zero_centered_norm"].get<bool>() ? "yes" : "no");
    const Json& layout = h["checkpoint_layout"];
    std::printf("layout      %s*, experts %s, projections %s\n",
                layout["prefix"].get<std::string>().c_str(),
                layout["experts"].get<std::string>().c_str(),
                layout["linear_attention_projections"].get<std::string>().c_str());
}

void print_text(const Json& j) {
    std::printf("model       %s\n", j["model_dir"].get<std::string>().c_str());
    std::printf("type        %s, %lld layers, hidden %lld, intermediate %lld, vocab %lld\n",
                j["model_type"].get<std::string>().c_str(), j["num_layers"].get<long long>(),
                j["hidden_size"].get<long long>(), j["intermediate_size"].get<long long>(),
                j["vocab_size"].get<long long>());
    std::printf(
        "attention   %lld heads, %lld kv heads, head_dim %lld, rope_theta %g, bias %s, qk_norm "
        "%s\n",
        j["num_heads"].get<long long>(), j["num_kv_heads"].get<long long>(),
        j["head_dim"].get<long long>(), j["rope_theta"].get<double>(),
        j["attention_bias"].get<bool>() ? "yes" : "no", j["qk_norm"].get<bool>() ? "yes" : "no");
    std::printf("rope        scaling %s\n", j["rope_scaling"].get<std::string>().c_str());
    std::printf("quantized   %s\n", j["quantization"].get<std::string>().c_str());
    if (j.contains("hybrid")) print_hybrid(j);
    if (j.contains("num_experts"))
        std::printf("experts     %lld, top-%lld, moe_intermediate %lld, renormalise %s%s\n",
                    j["num_experts"].get<long long>(), j["num_experts_per_tok"].get<long long>(),
                    j["moe_intermediate_size"].get<long long>(),
                    j["norm_topk_prob"].get<bool>() ? "yes" : "no",
                    j["shared_expert_intermediate_size"].get<int64_t>() > 0
                        ? fmt::format(", shared expert {}",
                                      j["shared_expert_intermediate_size"].get<int64_t>())
                              .c_str()
                        : "");
    std::printf("embeddings  %s\n",
                j["tie_word_embeddings"].get<bool>() ? "tied" : "separate lm_head");
    std::printf("checkpoint  %lld tensors in %lld file(s), %lld parameters, %.2f MB, dtypes %s\n",
                j["num_tensors"].get<long long>(), j["num_files"].get<long long>(),
                j["num_params"].get<long long>(), j["num_bytes"].get<double>() / 1e6,
                j["weight_dtypes"].dump().c_str());
    if (j.contains("not_supported"))
        for (const Json& what : j["not_supported"])
            std::printf("unsupported %s\n", what.get<std::string>().c_str());
}

}  // namespace

void add_inspect(CLI::App& app) {
    auto opts = std::make_shared<InspectOptions>();
    CLI::App* cmd =
        app.add_subcommand("inspect", "Summarise a model directory and check its checkpoint");
    cmd->footer("Example: miniinfer inspect --model ~/models/Qwen3-0.6B --json");
    add_model_option(*cmd, opts->model_dir, opts->revision);
    cmd->add_flag("--json", opts->json, "Print JSON");
    cmd->callback([opts] {
        Json j = inspect(hub::resolve_model(opts->model_dir, opts->revision).string());
        if (opts->json)
            std::printf("%s\n", j.dump(2).c_str());
        else
            print_text(j);
    });
}

}  // namespace miniinfer::apps
