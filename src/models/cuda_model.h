// CudaModel: a model's forward pass on one GPU, as the CUDA runner sees it. The runner owns the
// memory sizing, the KV pool, the staged step inputs, the CUDA graphs and sampling; the model
// owns its weights (bf16 on the device, this rank's shard), its activations and its GEMM, and
// launches its blocks (layers/cuda/). make_cuda_model is the one place that picks a model class
// by architecture.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "config/model_config.h"
#include "config/tuning.h"
#include "distributed/communicator.h"
#include "layers/cuda/attention_backend.h"
#include "layers/cuda/step.h"
#include "models/weights.h"

namespace miniinfer {

class CudaModel {
  public:
    virtual ~CudaModel() = default;
    virtual const ModelConfig& config() const = 0;
    // This rank's attention: layers, heads, KV heads, head_dim (the KV pool's shape).
    struct AttentionDims {
        int64_t num_layers, num_heads, num_kv_heads, head_dim;
    };
    virtual AttentionDims attention_dims() const = 0;
    // The hybrids' Gated DeltaNet layers (num_layers 0 for the others): one state slot's
    // conv window [conv_window, conv_dim] and recurrent state [num_v_heads, head_k_dim,
    // head_v_dim] per layer, f32 (cuda::StateLayer).
    struct StateDims {
        int64_t num_layers = 0, conv_window = 0, conv_dim = 0, num_v_heads = 0, head_k_dim = 0,
                head_v_dim = 0;
    };
    virtual StateDims state_dims() const = 0;
    virtual size_t weight_bytes() const = 0;  // this rank's weights on the device
    // Per layer, the FP8 KV cache scales (k, v) the checkpoint gives; 0 where it gives none.
    virtual std::vector<std::pair<float, float>> checkpoint_kv_scales() const = 0;
    // Allocates every activation for steps of up to max_tokens tokens and max_logits sampled
    // rows. Call once, before forward().
    virtual void allocate_activations(int64_t max_tokens, int64_t max_logits) = 0;
    // One step's kernels on `stream`: no host work, no allocation, no sync (capturable). Writes
    // this step's K/V into kv (one KvLayer per attention layer), advances a hybrid's states
    // (one StateLayer per Gated DeltaNet layer) and writes the logits of in.logits_indices' rows.
    virtual void forward(const cuda::StepInputs& in, std::span<cuda::KvLayer> kv,
                         std::span<cuda::StateLayer> states, cuda::AttentionBackend& attention,
                         cudaStream_t stream) = 0;
    // The last forward's logits: [rows, vocab] f32 (the LM head's fp32 sums, never rounded to
    // bf16: near-ties resolve as in Hugging Face's fp32 model).
    virtual Tensor logits(int64_t rows) const = 0;
    // Tests: each eager forward then copies its MoE layers' expert choices into *trace
    // ([MoE layers, tokens, top_k] i32 CUDA, on the stream; QwenModel::force_routing takes them);
    // null: none. Not captured into CUDA graphs.
    virtual void trace_routing(Tensor* trace) = 0;
};

// Uploads `weights` (bf16 host tensors, as load_weights(WeightTarget{kBF16, rank, world})
// writes them, released as they go up; or dummy_cuda_weights' device tensors, kept) and builds the
// model for config.arch. comm: null without tensor parallelism. Throws Error for an architecture
// the GPU does not run yet.
// `--load-format dummy` on the GPU: load_weights' layout for `target` (bf16; its shard),
// allocated on the device and filled there at HBM speed (kernels/cuda/elementwise/fill_random.h) by
// the host dummy_weights' rule (dummy_init, models/weights.h). The numbers are not the host's
// (those come from mt19937 on the CPU). Logs one line (tensors, GB, seconds). make_cuda_model
// takes these tensors as they are.
ModelWeights dummy_cuda_weights(const ModelConfig& config, uint64_t seed,
                                const WeightTarget& target);

// tuning: the fields the layers read (moe_silu_tile).
std::unique_ptr<CudaModel> make_cuda_model(const ModelConfig& config, ModelWeights weights,
                                           Communicator* comm = nullptr, const Tuning& tuning = {});

}  // namespace miniinfer
