// QwenModel: Qwen2, Qwen3 and Qwen3-MoE, written once: the CPU reference (the GPU model,
// models/qwen_cuda_model.h, mirrors it).
//
//   embed -> N x [ norm -> attention -> add & norm -> MLP or MoE ] -> add & norm -> lm_head
//
// What differs between the three is a config option, not a copy: Qwen2's q/k/v biases
// (attention_bias), Qwen3's per-head q/k RMSNorm (qk_norm), Qwen3-MoE's sparse layers
// (is_moe_layer). The model reads and writes K/V in the paged KvCache the caller owns.
#pragma once

#include <filesystem>
#include <vector>

#include "config/model_config.h"
#include "kvcache/kv_cache.h"
#include "layers/forward_batch.h"
#include "layers/layers.h"
#include "models/weights.h"

namespace miniinfer {

class QwenModel {
  public:
    QwenModel(ModelConfig config, ModelWeights weights);

    // config.json + checkpoint (or dummy weights) from a model directory. Errors name the file.
    static QwenModel load(const std::filesystem::path& model_dir,
                          LoadFormat format = LoadFormat::kSafetensors, uint64_t seed = 0);

    const ModelConfig& config() const { return config_; }

    // One step: writes this step's K/V into `kv` and returns the logits of the rows
    // batch.logits_indices: [num_logits, vocab] f32. Token ids must be < vocab_size (the
    // caller validates user input).
    Tensor forward(const ForwardBatch& batch, KvCache& kv) const;

  private:
    // QwenCudaModel::Layer holds the same blocks (layers/cuda/), minus MoE so far.
    struct Layer {
        RMSNorm input_norm, post_attention_norm;
        Attention attention;  // qkv, q/k norm (Qwen3), rotary, paged attention, o_proj
        DenseMlp mlp;
        FusedMoE moe;
        bool is_moe = false;
    };

    ModelConfig config_;
    ModelWeights weights_;
    std::vector<Layer> layers_;
    RMSNorm final_norm_;
};

}  // namespace miniinfer
