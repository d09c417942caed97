// QwenModel: Qwen2, Qwen3, Qwen3-MoE and the hybrids (Qwen3.5, Qwen3.5-MoE, Qwen3-Next),
// written once: the CPU reference (the GPU model, models/qwen_cuda_model.h, mirrors the first
// three).
//
//   embed -> N x [ norm -> attention or Gated DeltaNet -> add & norm -> MLP or MoE ]
//         -> add & norm -> lm_head
//
// What differs between them is a config option, not a copy: Qwen2's q/k/v biases
// (attention_bias), Qwen3's per-head q/k RMSNorm (qk_norm), Qwen3-MoE's sparse layers
// (is_moe_layer); the hybrids' linear-attention layers (layer_types), gated attention with
// partial rotary (attn_output_gate, rotary_dim), zero-centred norms and shared experts. The
// model reads and writes K/V in the paged KvCache the caller owns (one layer of it per
// full-attention layer) and a hybrid's Gated DeltaNet state in the caller's StateCache.
#pragma once

#include <filesystem>
#include <vector>

#include "config/model_config.h"
#include "distributed/communicator.h"
#include "kvcache/kv_cache.h"
#include "kvcache/state_cache.h"
#include "layers/forward_batch.h"
#include "layers/layers.h"
#include "models/weights.h"

namespace miniinfer {

// Tensor parallelism on the CPU: this model is rank `rank` of `world`, its weights the shards
// the loader wrote for that target, comm the group's collective (null when world is 1). The
// blocks' row-parallel outputs (o_proj, down, the experts' down or, with expert_parallel, the
// rank's experts) are partial sums that comm adds. Embedding and LM head are vocab-parallel:
// a rank embeds only the ids of its vocab_range (the others' rows stay zero, and comm adds the
// ranks' rows) and computes the logits of its range (comm gathers them), so every rank returns
// the same, whole logits.
struct CpuParallel {
    int64_t rank = 0, world = 1;
    bool expert_parallel = false;
    Communicator* comm = nullptr;
};

class QwenModel {
  public:
    QwenModel(ModelConfig config, ModelWeights weights, CpuParallel parallel = {});

    // config.json + checkpoint (or dummy weights) from a model directory. Errors name the file.
    // An FP8 checkpoint's projections run as `fp8` says (the block-scaled W8A8 product, or
    // weights dequantized to f32 at load).
    static QwenModel load(const std::filesystem::path& model_dir,
                          LoadFormat format = LoadFormat::kSafetensors, uint64_t seed = 0,
                          CpuParallel parallel = {}, Fp8Compute fp8 = Fp8Compute::kBlockScaled);

    const ModelConfig& config() const { return config_; }
    // KV heads in this rank's cache (the config's, divided among or replicated over ranks).
    int64_t num_local_kv_heads() const;

    // One step: writes this step's K/V into `kv` and returns the logits of the rows
    // batch.logits_indices: [num_logits, vocab] f32. Token ids must be < vocab_size (the
    // caller validates user input). A hybrid also advances each sequence's state in slot
    // batch.state_slots[s] of `state`: first the batch's restores are copied and the slots of
    // sequences whose rows start at position 0 zeroed; its snapshots are taken on the way.
    Tensor forward(const ForwardBatch& batch, KvCache& kv, StateCache* state = nullptr) const;

    // Stores K/V rounded to FP8 e4m3 from now on (EngineConfig::kv_cache_dtype fp8): each layer
    // at the scales its checkpoint gives (LayerWeights::k_scale, v_scale), else at these
    // (vLLM's default scales are 1.0).
    void use_fp8_kv_cache(float k_scale = 1.f, float v_scale = 1.f);

    // Tests: the MoE layers take these experts ([MoE layer][token * top_k], a forward's tokens
    // in order) in place of their routers' top-k, each weighted by its router probability as
    // usual, in every forward until cleared (empty). So a GPU's logits can be compared with the
    // same routing, where its bf16 activations flipped a near-tied expert.
    void force_routing(std::vector<std::vector<int32_t>> expert_ids) {
        forced_routing_ = std::move(expert_ids);
    }

  private:
    Tensor embed_tokens(std::span<const int32_t> ids) const;  // [n, hidden], whole on every rank
    Tensor lm_head(const Tensor& normed) const;               // [n, vocab], whole on every rank
    // Restores cached snapshots, then zeroes the slots of sequences starting at position 0.
    void prepare_states(const ForwardBatch& batch, StateCache* state) const;

    // QwenCudaModel::Layer holds the same blocks (layers/cuda/), minus MoE so far.
    struct Layer {
        RMSNorm input_norm, post_attention_norm;
        Attention attention;  // qkv, q/k norm (Qwen3), rotary, paged attention, o_proj
        GatedDeltaNet linear_attn;
        DenseMlp mlp;
        FusedMoE moe;
        bool is_moe = false, is_linear = false;
        // The layer's index among the KvCache's layers (attention) or the StateCache's
        // (Gated DeltaNet).
        int64_t cache_layer = 0;
    };

    ModelConfig config_;
    ModelWeights weights_;
    CpuParallel parallel_;
    int64_t vocab_begin_ = 0, vocab_end_ = 0;  // this rank's rows of embed and lm_head
    std::vector<Layer> layers_;
    RMSNorm final_norm_;
    std::vector<std::vector<int32_t>> forced_routing_;  // force_routing
};

}  // namespace miniinfer
