// Loading a Qwen2 / Qwen3 / Qwen3-MoE checkpoint into the fused layout the model runs on.
//
// Fusion at load time: q/k/v projections (and biases) become one [q + 2 kv, hidden] matrix,
// gate/up one [2 inter, hidden] matrix (gate rows first), and a MoE layer's experts two stacked
// tensors. Every tensor config.json implies is checked for presence, shape and dtype; a tied
// model reuses the embedding as lm_head. Tensors are converted in parallel on the global pool.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "config/model_config.h"
#include "core/tensor.h"

namespace miniinfer {

struct LayerWeights {
    Tensor input_norm, post_attention_norm;  // [hidden]
    Tensor qkv, qkv_bias;   // [q + 2 kv, hidden], [q + 2 kv] (Qwen2 / attention_bias)
    Tensor q_norm, k_norm;  // [head_dim] (Qwen3)
    Tensor o_proj, o_bias;  // [hidden, q], [hidden] (Qwen3 with attention_bias)
    Tensor gate_up, down;   // dense: [2 inter, hidden], [hidden, inter]
    Tensor router;          // MoE: [num_experts, hidden]
    Tensor experts_gate_up, experts_down;  // MoE: [E, 2 moe_inter, hidden], [E, hidden, moe_inter]
};

struct ModelWeights {
    Tensor embed;  // [vocab, hidden]
    std::vector<LayerWeights> layers;
    Tensor norm;     // [hidden]
    Tensor lm_head;  // [vocab, hidden]; the same tensor as embed when tied
};

// The tensors a Hugging Face checkpoint of this config holds: (name, shape).
std::vector<std::pair<std::string, Shape>> expected_tensors(const ModelConfig& config);

enum class LoadFormat { kSafetensors, kDummy };
LoadFormat parse_load_format(const std::string& name);  // "auto" | "safetensors" | "dummy"

// Reads <model_dir>'s checkpoint (Errors name the file and tensor).
ModelWeights load_weights(const ModelConfig& config, const std::filesystem::path& model_dir);
// Seeded random weights with unit-scale activations, for benchmarks without a checkpoint.
ModelWeights dummy_weights(const ModelConfig& config, uint64_t seed);

}  // namespace miniinfer
