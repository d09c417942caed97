// ModelConfig: every field of a Hugging Face config.json that changes the math, for Qwen2,
// Qwen3 and Qwen3-MoE. Reading is strict: an unknown model_type, a rope_scaling kind we do
// not implement, rope_scaling and rope_parameters that disagree, a quantization_config,
// sliding-window attention turned on, or an activation other than SiLU is an Error naming the
// field — never a silently different model.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/json.h"

namespace miniinfer {

enum class Arch { kQwen2, kQwen3, kQwen3Moe };

// Rotary position embedding scaling ("rope_scaling" / "rope_parameters"), resolved as
// transformers resolves it (modeling_rope_utils.py): every default filled in, so two configs
// that mean the same compare equal.
struct RopeScaling {
    enum class Kind { kNone, kLinear, kYarn } kind = Kind::kNone;
    double factor = 1.0;  // linear: positions are divided by factor; yarn: the context extension
    // YaRN: frequencies below the beta_slow / beta_fast correction range are interpolated by
    // factor, those above kept, a linear ramp between; cos and sin are multiplied by
    // attention_factor (given, or 0.1 ln(factor) + 1, or the mscale / mscale_all_dim ratio).
    int64_t original_max_position_embeddings = 0;
    double beta_fast = 32.0, beta_slow = 1.0;
    double attention_factor = 1.0;
    bool truncate = true;  // the correction range rounded outwards to whole dimensions

    bool operator==(const RopeScaling&) const = default;
    // "none", "linear (factor 4)", "yarn (factor 4, original_max_position_embeddings 32768, ...)"
    std::string describe() const;
};

struct ModelConfig {
    Arch arch = Arch::kQwen3;
    std::string model_type;
    int64_t vocab_size = 0;
    int64_t hidden_size = 0;
    int64_t intermediate_size = 0;  // dense MLP
    int64_t num_layers = 0;
    int64_t num_heads = 0;
    int64_t num_kv_heads = 0;
    int64_t head_dim = 0;  // default hidden_size / num_heads
    double rms_norm_eps = 1e-6;
    double rope_theta = 10000.0;
    RopeScaling rope_scaling;
    int64_t max_position_embeddings = 0;
    bool attention_bias = false;  // q/k/v biases (Qwen2 always has them)
    bool qk_norm = false;         // per-head RMSNorm on q and k (Qwen3)
    bool tie_word_embeddings = false;
    // Mixture of experts (Qwen3-MoE); num_experts == 0 means dense.
    int64_t num_experts = 0;
    int64_t num_experts_per_tok = 0;
    int64_t moe_intermediate_size = 0;
    bool norm_topk_prob = true;
    int64_t decoder_sparse_step = 1;
    std::vector<int64_t> mlp_only_layers;
    std::vector<int64_t> eos_token_ids;
    int64_t bos_token_id = -1;
    DType dtype = DType::kBF16;  // torch_dtype / dtype: the checkpoint's weights

    int64_t q_size() const { return num_heads * head_dim; }
    // The longest context the positions are meant for: max_position_embeddings, or with YaRN
    // original_max_position_embeddings x factor where that is larger (Qwen's cards extend a
    // 40,960-position config this way to 131,072; vLLM derives the same).
    int64_t max_context_len() const;
    int64_t kv_size() const { return num_kv_heads * head_dim; }
    // Qwen3-MoE: layer i uses experts unless listed in mlp_only_layers or off the sparse step.
    bool is_moe_layer(int64_t layer) const;

    // Throws Error naming `source` and the field.
    static ModelConfig from_json(const Json& json, const std::string& source);
    static ModelConfig load(const std::filesystem::path& model_dir);  // <dir>/config.json
};

std::string arch_name(Arch arch);

}  // namespace miniinfer
