// miniinfer inspect --model DIR: the config as MiniInfer reads it and a full check of the
// checkpoint (every expected tensor present with the right shape and dtype).
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

Json inspect(const std::string& model_dir) {
    ModelConfig c = ModelConfig::load(model_dir);
    GenerationConfig gen = GenerationConfig::load(model_dir);
    Checkpoint ckpt = Checkpoint::open(model_dir);
    std::map<std::string, int> dtypes;
    for (const auto& [name, shape] : expected_tensors(c)) {
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
                {"weight_dtypes", dtypes}};
    if (c.num_experts > 0) {
        out["num_experts"] = c.num_experts;
        out["num_experts_per_tok"] = c.num_experts_per_tok;
        out["moe_intermediate_size"] = c.moe_intermediate_size;
        out["norm_topk_prob"] = c.norm_topk_prob;
        out["mlp_only_layers"] = c.mlp_only_layers;
        out["decoder_sparse_step"] = c.decoder_sparse_step;
    }
    return out;
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
    if (j.contains("num_experts"))
        std::printf("experts     %lld, top-%lld, moe_intermediate %lld, renormalise %s\n",
                    j["num_experts"].get<long long>(), j["num_experts_per_tok"].get<long long>(),
                    j["moe_intermediate_size"].get<long long>(),
                    j["norm_topk_prob"].get<bool>() ? "yes" : "no");
    std::printf("embeddings  %s\n",
                j["tie_word_embeddings"].get<bool>() ? "tied" : "separate lm_head");
    std::printf("checkpoint  %lld tensors in %lld file(s), %lld parameters, %.2f MB, dtypes %s\n",
                j["num_tensors"].get<long long>(), j["num_files"].get<long long>(),
                j["num_params"].get<long long>(), j["num_bytes"].get<double>() / 1e6,
                j["weight_dtypes"].dump().c_str());
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
