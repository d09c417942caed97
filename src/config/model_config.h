// ModelConfig: every field of a Hugging Face config.json that changes the math, for Qwen2,
// Qwen3, Qwen3-MoE and the hybrid Gated DeltaNet models (Qwen3.5 dense and MoE, Qwen3-Next).
// Reading is strict: an unknown model_type, a rope_scaling kind we do not implement,
// rope_scaling and rope_parameters that disagree, a quantization_config other than block-scaled
// FP8, sliding-window attention turned on, or an activation other than SiLU is an Error naming
// the field — never a silently different model.
//
// The hybrid models come in every form transformers writes: the multimodal checkpoints
// (model_type qwen3_5 / qwen3_5_moe, the language model's fields nested in "text_config", whose
// own model_type is qwen3_5_text / qwen3_5_moe_text), the text-only classes' flat saves
// (qwen3_5_text, qwen3_5_moe_text) and qwen3_next. They are read as transformers reads them:
// layer_types, or full_attention_interval when it is absent; partial_rotary_factor at the top
// level or in the rope dictionary (0.25 when neither says); every layer of a qwen3_5_moe is
// MoE with renormalised top-k (its config has no mlp_only_layers, decoder_sparse_step or
// norm_topk_prob for transformers to read).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/json.h"

namespace miniinfer {

enum class Arch { kQwen2, kQwen3, kQwen3Moe, kQwen35, kQwen35Moe, kQwen3Next };

// A layer's token mixer. Qwen2/3/3-MoE: every layer is full attention. The hybrids interleave
// Gated DeltaNet layers (linear attention: a fixed-size state per request, no K/V cache) with
// full-attention ones (K/V pages), three to one in the published models.
enum class LayerType { kFullAttention, kLinearAttention };

// The Gated DeltaNet layers' sizes (config.json's linear_* fields). Per layer and token:
// in_proj_qkv gives q and k (num_key_heads x key_head_dim each) and v (num_value_heads x
// value_head_dim), the conv1d runs over those conv_dim channels, and each value head keeps a
// state S of key_head_dim x value_head_dim; q and k heads are repeated to the value heads
// (value head h reads key head h / (num_value_heads / num_key_heads)).
struct LinearAttentionConfig {
    int64_t num_key_heads = 0;    // linear_num_key_heads
    int64_t num_value_heads = 0;  // linear_num_value_heads, a multiple of num_key_heads
    int64_t key_head_dim = 0;     // linear_key_head_dim
    int64_t value_head_dim = 0;   // linear_value_head_dim
    int64_t conv_kernel_dim = 0;  // linear_conv_kernel_dim: the causal depthwise conv's width

    int64_t key_dim() const { return num_key_heads * key_head_dim; }
    int64_t value_dim() const { return num_value_heads * value_head_dim; }
    int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }  // q, k, v channels
    // One request's state in one layer: the conv window (the last conv_kernel_dim - 1 inputs of
    // every channel) and the recurrent S of every value head.
    int64_t conv_state_elements() const { return (conv_kernel_dim - 1) * conv_dim(); }
    int64_t recurrent_state_elements() const {
        return num_value_heads * key_head_dim * value_head_dim;
    }
    bool operator==(const LinearAttentionConfig&) const = default;
};

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

// A checkpoint's quantization_config. The one method read is Qwen's block-scaled FP8 (as
// DeepSeek-V3's): {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
// "weight_block_size": [128, 128]}. Each quantized linear stores an e4m3 `weight` [out, in] and
// an f32 `weight_scale_inv` [ceil(out / 128), ceil(in / 128)], the dequantized weight being the
// e4m3 value times its block's scale; activations are quantized at run time, per token in groups
// of 128 along the inner dimension. The projections of attention and of the (dense, expert)
// MLPs are quantized; embeddings, norms, routers and lm_head never are, nor a module that
// modules_to_not_convert names.
struct QuantizationConfig {
    enum class Method { kNone, kFp8 } method = Method::kNone;
    int64_t block_out = 0, block_in = 0;  // weight_block_size: rows and columns per weight scale
    std::vector<std::string> modules_to_not_convert;

    bool is_fp8() const { return method == Method::kFp8; }
    // Whether the projection `module` ("model.layers.3.mlp.down_proj": its weight's name without
    // ".weight") is stored in FP8: under a quantizing method, unless an entry of
    // modules_to_not_convert names it as transformers' should_convert_module matches one (the
    // name starts with the entry, a regular expression, or ends with it).
    bool quantizes(const std::string& module) const;
    // "none"; "fp8 e4m3, dynamic activations, blocks 128x128 (not converted: lm_head)"
    std::string describe() const;
    bool operator==(const QuantizationConfig&) const = default;
};

struct ModelConfig {
    Arch arch = Arch::kQwen3;
    std::string model_type;
    int64_t vocab_size = 0;
    int64_t hidden_size = 0;
    int64_t intermediate_size = 0;  // dense MLP (0: a hybrid MoE without dense layers)
    int64_t num_layers = 0;
    int64_t num_heads = 0;
    int64_t num_kv_heads = 0;
    int64_t head_dim = 0;  // default hidden_size / num_heads; the hybrids must state it
    double rms_norm_eps = 1e-6;
    double rope_theta = 10000.0;
    RopeScaling rope_scaling;
    // Rotary on the first rotary_dim = int(head_dim x partial_rotary_factor) dims of each head,
    // the rest passed through (the hybrids: a quarter); head_dim for Qwen2/3/3-MoE.
    double partial_rotary_factor = 1.0;
    int64_t rotary_dim = 0;
    // Qwen3.5's multimodal rotary: the rotary_dim / 2 frequencies split into temporal, height
    // and width sections (interleaved or in runs). A text token's three positions are equal, so
    // for text this is plain rotary; recorded, not used. Empty when the config has none.
    std::vector<int64_t> mrope_section;
    bool mrope_interleaved = false;
    int64_t max_position_embeddings = 0;
    bool attention_bias = false;  // q/k/v biases (Qwen2 always has them)
    bool qk_norm = false;         // per-head RMSNorm on q and k (Qwen3)
    // Full attention's output gate (the hybrids): q_proj emits each head's queries and a gate,
    // and attention's output is multiplied by sigmoid(gate) before o_proj.
    bool attn_output_gate = false;
    // RMSNorm weights stored zero-centred: x * (1 + w) (the hybrids: the layer norms, the final
    // norm and q/k norms; not the Gated DeltaNet's gated norm, which is x * w).
    bool zero_centered_norm = false;
    bool tie_word_embeddings = false;
    // One per layer (num_layers of them).
    std::vector<LayerType> layer_types;
    LinearAttentionConfig linear_attention;  // the hybrids' Gated DeltaNet layers; zeros otherwise
    // Mixture of experts (Qwen3-MoE); num_experts == 0 means dense.
    int64_t num_experts = 0;
    int64_t num_experts_per_tok = 0;
    int64_t moe_intermediate_size = 0;
    bool norm_topk_prob = true;
    int64_t decoder_sparse_step = 1;
    std::vector<int64_t> mlp_only_layers;
    // The hybrids' MoE layers also run a shared expert (a dense MLP of this width) on every
    // token, scaled by sigmoid(shared_expert_gate . x); 0: none.
    int64_t shared_expert_intermediate_size = 0;
    // A multimodal checkpoint (text_config nested): it also holds a vision tower, which is not
    // served (image input is not supported).
    bool has_vision = false;
    std::vector<int64_t> eos_token_ids;
    int64_t bos_token_id = -1;
    DType dtype = DType::kBF16;  // torch_dtype / dtype: the checkpoint's weights
    // quantization_config (Qwen2, Qwen3, Qwen3-MoE only; the hybrids' is refused).
    QuantizationConfig quantization;

    int64_t q_size() const { return num_heads * head_dim; }
    // The longest context the positions are meant for: max_position_embeddings, or with YaRN
    // original_max_position_embeddings x factor where that is larger (Qwen's cards extend a
    // 40,960-position config this way to 131,072; vLLM derives the same).
    int64_t max_context_len() const;
    int64_t kv_size() const { return num_kv_heads * head_dim; }
    // Qwen3-MoE: layer i uses experts unless listed in mlp_only_layers or off the sparse step.
    bool is_moe_layer(int64_t layer) const;

    // Qwen3.5, Qwen3.5-MoE, Qwen3-Next: Gated DeltaNet and full-attention layers.
    bool is_hybrid() const;
    bool is_linear_attention_layer(int64_t layer) const {
        return layer_types.at(size_t(layer)) == LayerType::kLinearAttention;
    }
    int64_t num_linear_attention_layers() const;
    // The layers that keep K/V in the cache: every layer but the Gated DeltaNet ones.
    int64_t num_kv_layers() const { return num_layers - num_linear_attention_layers(); }
    // One request's Gated DeltaNet state over all its layers, in bytes: S in fp32 and the conv
    // window in elements of conv_element_bytes (4: fp32, 2: bf16). 0 for a model without them.
    int64_t gdn_state_bytes(int64_t conv_element_bytes = 4) const;

    // Throws Error naming `source` and the field.
    static ModelConfig from_json(const Json& json, const std::string& source);
    static ModelConfig load(const std::filesystem::path& model_dir);  // <dir>/config.json
};

std::string arch_name(Arch arch);

// The layer pattern in words: "full x28"; "linear x3, full x1, repeated x10" (the shortest
// period of layer_types, as runs of one type, and how often it repeats).
std::string describe_layer_pattern(const std::vector<LayerType>& layer_types);

// Throws Error where the engine cannot run this model on `device` (cpu | cuda): the hybrid
// Gated DeltaNet models run without tensor parallelism, and on the GPU only at the dimensions
// its kernels take so far (head_dim 64 or 128, ...), naming the one that does not fit. The one
// place that decides it: EngineConfig::resolve (every way of serving) and make_cuda_model call it.
void check_engine_support(const ModelConfig& config, const std::string& device,
                          int64_t tensor_parallel_size = 1);

}  // namespace miniinfer
