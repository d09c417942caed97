// QwenCudaModel: Qwen2, Qwen3, Qwen3-MoE and the hybrids (Qwen3.5, Qwen3.5-MoE, Qwen3-Next) on
// the GPU, written once (the CPU reference is QwenModel, models/qwen_model.h; read the two side
// by side).
//
//   embed -> N x [ add & norm -> attention or Gated DeltaNet -> add & norm -> MLP or MoE ]
//   -> gather the sampled rows -> add & norm -> lm_head -> f32 logits
//
// What differs between them is a config option, as on the CPU: Qwen2's q/k/v biases
// (attention_bias), Qwen3's per-head q/k RMSNorm (qk_norm), Qwen3-MoE's sparse layers
// (is_moe_layer), the hybrids' linear-attention layers, gated attention with partial rotary,
// zero-centred norms (their weights uploaded as 1 + w) and shared experts. The residual stream is
// carried in its own buffer and added inside the next norm (add_rms_norm), so each layer reads: x
// (the last block's output) and the residual; the norm adds them. Each norm writes the sum into the
// other of two residual buffers (residual_[0], residual_[1]): a block's first linear layer may
// run the norm inside its GEMV (Linear::forward with an AddRmsNorm), where every thread block
// reads the old stream while one of them writes the new.
//
// A decode step runs as one batch on one stream. Two halves on two streams (two-batch overlap:
// one half's GEMMs beside the other's attention) measured slower on the H200 at every threshold:
// the memory-bound decode attention reaches its read rate only with the whole GPU, so the GEMMs'
// SMs cost it more than their time (bench/RESULTS.md#decode-one-batch).
#pragma once

#include <vector>

#include "kernels/cuda/gemm/gemm.h"
#include "layers/cuda/attention.h"
#include "layers/cuda/gated_delta_net.h"
#include "layers/cuda/mlp.h"
#include "layers/cuda/moe.h"
#include "models/cuda_model.h"

namespace miniinfer {

class QwenCudaModel final : public CudaModel {
  public:
    QwenCudaModel(ModelConfig config, ModelWeights weights, Communicator* comm,
                  const Tuning& tuning = {});

    const ModelConfig& config() const override { return config_; }
    AttentionDims attention_dims() const override;
    StateDims state_dims() const override;
    size_t weight_bytes() const override;
    std::vector<std::pair<float, float>> checkpoint_kv_scales() const override {
        return kv_scales_;
    }
    void allocate_activations(int64_t max_tokens, int64_t max_logits) override;
    void forward(const cuda::StepInputs& in, std::span<cuda::KvLayer> kv,
                 std::span<cuda::StateLayer> states, cuda::AttentionBackend& attention,
                 cudaStream_t stream) override;
    Tensor logits(int64_t rows) const override { return cuda::rows(logits_, rows); }
    void trace_routing(Tensor* trace) override { routing_trace_ = trace; }

  private:
    // QwenModel::Layer field for field.
    struct Layer {
        cuda::RmsNorm input_norm, post_attention_norm;
        cuda::Attention attention;
        cuda::GatedDeltaNet linear_attn;  // the hybrids' linear-attention layers
        cuda::Mlp mlp;
        cuda::Moe moe;  // Qwen3-MoE's sparse layers (config.is_moe_layer)
        bool is_moe = false, is_linear = false;
        // The layer's index among the KV pool's layers (attention) or the state pool's (GDN).
        int64_t cache_layer = 0;
    };

    ModelConfig config_;
    cuda::Gemm gemm_;
    Tensor embed_, lm_head_;  // [vocab, hidden]; the same tensor when tied
    // Tensor parallelism: null, or the collectives; embed_ and lm_head_ then hold the rows
    // [vocab_begin_, vocab_begin_ + vocab / world) (vocab-parallel, models/weights.h).
    Communicator* comm_ = nullptr;
    int64_t vocab_begin_ = 0;
    std::vector<Layer> layers_;
    std::vector<std::pair<float, float>> kv_scales_;  // LayerWeights' k_scale, v_scale
    cuda::RmsNorm final_norm_;

    // Activations for the largest step (allocate_activations).
    Tensor hidden_, residual_[2], normed_, attn_out_;  // [max_tokens, hidden]
    cuda::Attention::Buffers attention_buffers_;
    cuda::GatedDeltaNet::Buffers gdn_buffers_;
    cuda::Mlp::Buffers mlp_buffers_;
    cuda::Moe::Buffers moe_buffers_;
    Tensor last_hidden_, last_residual_, last_normed_;  // [max_logits, hidden]: sampled rows
    Tensor logits_;                                     // [max_logits, vocab] f32
    // Vocab-parallel LM head: this rank's logits [max_logits, vocab / world], and every rank's
    // after the all-gather ([world, max_logits, vocab / world], rank-major).
    Tensor logits_local_, logits_gathered_;
    Tensor* routing_trace_ = nullptr;  // trace_routing
};

}  // namespace miniinfer
