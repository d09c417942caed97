// Loading a Qwen2 / Qwen3 / Qwen3-MoE / Qwen3.5 / Qwen3-Next checkpoint into the fused layout
// the model runs on.
//
// Fusion at load time: q/k/v projections (and biases) become one [q + 2 kv, hidden] matrix,
// gate/up one [2 inter, hidden] matrix (gate rows first), and a MoE layer's experts two stacked
// tensors. Every tensor config.json implies is checked for presence, shape and dtype before any
// data is read; a tied model reuses the embedding as lm_head.
//
// The hybrid models (Qwen3.5, Qwen3.5-MoE, Qwen3-Next), whatever form their checkpoint takes
// (CheckpointLayout), load into one layout:
//   full attention  q_proj holds per head [q_h; gate_h] (head_dim rows each); it is
//                   de-interleaved at load time, the gates going after v: qkv is
//                   [q; k; v; gate], [2 q + 2 kv, hidden]. The first q + 2 kv outputs are then
//                   exactly Qwen3's qkv and the gate one contiguous [tokens, q] block (one GEMM,
//                   no strided gate reads).
//   linear attention (Gated DeltaNet) LinearAttentionWeights: Qwen3.5's in_proj_qkv / z / b / a
//                   as they are; Qwen3-Next's in_proj_qkvz and in_proj_ba, which hold per key
//                   head g [q_g; k_g; v_g; z_g] and [b_g; a_g] (g's num_value_heads /
//                   num_key_heads value heads in v, z, b and a), are split into the same parts in
//                   Qwen3.5's order at load time.
//   MoE             per-expert experts.<e>.{gate,up,down}_proj or Qwen3.5's fused
//                   experts.gate_up_proj [E, 2 I, hidden] and experts.down_proj [E, hidden, I]:
//                   both become experts_gate_up / experts_down; the shared expert's gate/up is
//                   fused like a dense MLP's.
// Norm weights are kept as stored (zero-centred ones are not turned into 1 + w: in bf16 that
// sum would round). The vision tower (model.visual.*) and the multi-token-prediction layers
// (mtp.*) are skipped, and the load logs how many tensors of each. A 1-D weight may be F32
// among bf16 ones (A_log, the gated norm, as the released Qwen3.5 files have them): each
// source tensor is converted from its own dtype. Tensor parallelism (world > 1) is refused for
// the hybrids for now.
//
// The target: the loader writes host tensors of target.dtype straight from the memory-mapped
// checkpoint (bf16 -> bf16 is a copy; f16 / f32 sources are converted element by element, never
// through a whole f32 tensor), in parallel on the global pool, and gives each source tensor's
// pages back once copied, so the peak host memory of a load is about what it writes.
//
// The shard (Megatron-style, rank r of world w), by the rule each weight is given (Shard):
//   kColumn     qkv: [q_r; k_r; v_r], rank r's q heads then its kv heads of k and of v (the
//               bias likewise); gate_up: [gate_r; up_r]; a MoE expert's gate_up likewise.
//   kRow        o_proj: the columns of rank r's q heads; down and a MoE expert's down: the
//               columns of rank r's slice of the intermediate size.
//   kReplicated embed, lm_head, every norm, the router, and o_proj's bias (the model adds it
//               once, after the row-parallel sum).
// Each rank reads only its slice of a source tensor: rows are one contiguous range, columns a
// strided copy of row pieces. world must divide num_heads and the intermediate size(s) the
// model uses, and num_kv_heads or be a multiple of it (KV heads then replicated); with world 1
// every rule is the whole tensor. With target.expert_parallel the experts are not split.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "config/model_config.h"
#include "core/tensor.h"
#include "layers/shard.h"
#include "loader/checkpoint.h"

namespace miniinfer {

// What the loader writes: the element type and the tensor-parallel shard (rank of world).
struct WeightTarget {
    DType dtype = DType::kF32;  // kF32 (the CPU reference) or kBF16 (the CUDA model)
    int64_t rank = 0, world = 1;
    // MoE experts whole on every rank (expert parallelism: each rank computes only its range of
    // experts, see expert_range) instead of split along their intermediate size.
    bool expert_parallel = false;
};

// Rank r's share when world ranks split n things in order: [n r / w, n (r + 1) / w).
std::pair<int64_t, int64_t> expert_range(int64_t num_experts, int64_t rank, int64_t world);

// The token ids whose embedding and LM-head rows rank r holds (vocab-parallel): the same split,
// [V r / w, V (r + 1) / w), uneven when w does not divide V.
std::pair<int64_t, int64_t> vocab_range(int64_t vocab_size, int64_t rank, int64_t world);

// The KV heads a rank holds: num_kv_heads / world, or 1 when there are fewer KV heads than
// ranks (each then replicated on world / num_kv_heads ranks: rank r holds head
// r / (world / num_kv_heads)).
int64_t kv_heads_per_rank(int64_t num_kv_heads, int64_t world);

// What a load did, for the log line and for tests (dummy weights fill it too).
struct LoadStats {
    int64_t num_tensors = 0;      // source tensors read (or generated)
    int64_t bytes_written = 0;    // bytes of the tensors in ModelWeights (a tied head once)
    double seconds = 0;           // wall time of the whole call
    int64_t peak_host_bytes = 0;  // the process's VmHWM when it returned
};

// A Gated DeltaNet layer (config.linear_attention: kd = key_dim, vd = value_dim, nv =
// num_value_heads, C = conv_dim = 2 kd + vd, K = conv_kernel_dim).
struct LinearAttentionWeights {
    Tensor in_proj_qkv;     // [C, hidden]: q (kd rows), k (kd), v (vd); heads in order
    Tensor in_proj_z;       // [vd, hidden]: the output gate, per value head
    Tensor in_proj_b;       // [nv, hidden]: beta = sigmoid(b)
    Tensor in_proj_a;       // [nv, hidden]: g = -exp(A_log) * softplus(a + dt_bias)
    Tensor conv1d;          // [C, K]: channel c's causal taps, oldest input first
    Tensor A_log, dt_bias;  // [nv]
    Tensor norm;            // [value_head_dim]: the gated RMSNorm's weight (x * w, not 1 + w)
    Tensor out_proj;        // [hidden, vd]
    bool defined() const { return in_proj_qkv.defined(); }
};

struct LayerWeights {
    // Shapes are world 1's; a shard divides q, kv, inter and moe_inter by world (and
    // ModelWeights' embed and lm_head rows into vocab_range).
    Tensor input_norm, post_attention_norm;  // [hidden]
    Tensor qkv, qkv_bias;   // [q + 2 kv, hidden], [q + 2 kv] (Qwen2 / attention_bias)
    Tensor q_norm, k_norm;  // [head_dim] (Qwen3)
    Tensor o_proj, o_bias;  // [hidden, q], [hidden] (Qwen3 with attention_bias)
    Tensor gate_up, down;   // dense: [2 inter, hidden], [hidden, inter]
    Tensor router;          // MoE: [num_experts, hidden]
    Tensor experts_gate_up, experts_down;  // MoE: [E, 2 moe_inter, hidden], [E, hidden, moe_inter]
    // Hybrids. A linear-attention layer has linear_attn and no qkv / q_norm / k_norm / o_proj;
    // a full-attention one's qkv carries the output gate ([2 q + 2 kv, hidden], see above).
    LinearAttentionWeights linear_attn;
    // MoE hybrids: the shared expert, scaled by sigmoid(shared_expert_gate . x).
    Tensor shared_gate_up, shared_down;  // [2 shared_inter, hidden], [hidden, shared_inter]
    Tensor shared_expert_gate;           // [1, hidden]
    // A block-scaled FP8 checkpoint (config.quantization): each quantized projection above is
    // e4m3 (world 1's shapes) and these are its f32 block scales, weight_scale_inv fused and
    // sharded as the weight (QKV's row blocks stacked; a shard on block boundaries):
    // [ceil(rows / 128), ceil(cols / 128)] of the weight's rows and cols, per expert for the
    // experts. Undefined where the weight is not quantized.
    Tensor qkv_scale, o_proj_scale, gate_up_scale, down_scale;
    Tensor experts_gate_up_scale, experts_down_scale;
    // An FP8-quantised checkpoint's KV cache scales (self_attn.k_scale / v_scale, vLLM's names),
    // used with --kv-cache-dtype fp8; 0 where the checkpoint has none (then 1.0, as vLLM).
    float k_scale = 0.f, v_scale = 0.f;
};

// Host tensors of the target's dtype and shard (an FP8 checkpoint's quantized projections:
// e4m3 with f32 scales, whatever the target).
struct ModelWeights {
    Tensor embed;  // [vocab, hidden]
    std::vector<LayerWeights> layers;
    Tensor norm;     // [hidden]
    Tensor lm_head;  // [vocab, hidden]; the same tensor as embed when tied
    LoadStats stats;
};

// How a checkpoint names and packs a model's tensors. default_layout is what transformers
// writes for the config's model_type; load_weights and detect_layout take the checkpoint's own
// (a multimodal checkpoint's files loaded with a text-only config, say).
struct CheckpointLayout {
    // The language model's tensors: "model." or, in a multimodal checkpoint,
    // "model.language_model." (lm_head.weight is at the top level in both).
    std::string prefix = "model.";
    bool fused_experts = false;  // experts.gate_up_proj + experts.down_proj (Qwen3.5)
    bool grouped_gdn = false;    // in_proj_qkvz + in_proj_ba (Qwen3-Next)
    bool operator==(const CheckpointLayout&) const = default;
};
CheckpointLayout default_layout(const ModelConfig& config);
// The hybrids: the layout the checkpoint's names show (an unknown form keeps the default, and
// the load then names the first missing tensor). Others: default_layout.
CheckpointLayout detect_layout(const ModelConfig& config, const Checkpoint& ckpt);

// The tensors a Hugging Face checkpoint of this config holds: (name, shape), whole (unsharded),
// each once.
std::vector<std::pair<std::string, Shape>> expected_tensors(const ModelConfig& config);
std::vector<std::pair<std::string, Shape>> expected_tensors(const ModelConfig& config,
                                                            const CheckpointLayout& layout);

// The checkpoint's tensors outside `expected`, by kind.
struct UnusedTensors {
    int64_t vision = 0;  // model.visual.*: the vision tower (image input is not supported)
    int64_t mtp = 0;     // mtp.*: multi-token prediction (not supported)
    int64_t other = 0;   // anything else (KV cache scales are not counted here)
};
UnusedTensors unused_tensors(const Checkpoint& ckpt,
                             const std::vector<std::pair<std::string, Shape>>& expected);

enum class LoadFormat { kSafetensors, kDummy };
LoadFormat parse_load_format(const std::string& name);  // "auto" | "safetensors" | "dummy"

// Reads <model_dir>'s checkpoint for `target` and logs one line of LoadStats. Errors (before any
// data is read) name the file and tensor, or the numbers a bad target does not divide.
ModelWeights load_weights(const ModelConfig& config, const std::filesystem::path& model_dir,
                          const WeightTarget& target = {});
// Seeded random weights with unit-scale activations, for benchmarks without a checkpoint. The
// values are the f32 target's whatever the target: bf16 is their rounding, a shard their slice.
ModelWeights dummy_weights(const ModelConfig& config, uint64_t seed,
                           const WeightTarget& target = {});

// How --load-format dummy fills a tensor (host and GPU alike): norms are `constant` 1, biases
// `constant` 0 (scale 0 for both), matrices N(0, scale²) with scale 1 / sqrt(in_features) (the
// last dim; fused experts and conv1d too), the embedding and other tensors N(0, 1). Unit-scale
// activations whatever the depth. An FP8 checkpoint's e4m3 weights are N(0, 1) rounded to e4m3
// (their scale is 1 whatever this says) and their weight_scale_inv N(c, (c / 10)²) with
// c = 1 / sqrt(128 x its columns), about 1 / sqrt(in_features).
struct DummyInit {
    float scale = 1.f;  // 0: every element is `constant`; else constant + N(0, scale²)
    float constant = 0.f;
};
DummyInit dummy_init(const std::string& name, const Shape& shape);

// The part of a source tensor one rank holds (by the tensor's Shard rule). The tensor is seen
// as [rows, cols]: a 1-D tensor as [rows, 1], an N-D one as [all dims but the last, the last]
// (fused experts [E, 2 I, hidden] as [E 2 I, hidden], conv1d [C, 1, K] as [C, K]). A part of
// a source tensor (Qwen3-Next's q rows of one key head, say) is a block of some of its rows.
struct WeightBlock {
    int64_t rows = 0, cols = 0;
    int64_t row_begin = 0, row_end = 0, col_begin = 0, col_end = 0;
};

// Where the assembled tensors live and what goes in them, for weights made elsewhere than the
// two functions above (the GPU's dummy weights, models/cuda_model.h).
struct WeightWriter {
    // A destination tensor (null: a host tensor of the target's dtype).
    std::function<Tensor(const Shape& shape, DType dtype)> allocate;
    // Writes `block` of source tensor `name` (whole shape `shape`) to dst as `dtype` (the
    // target's; an FP8 weight's e4m3 and its scales' f32), row after row. Once per source
    // tensor, or once per part of one that is split (a hybrid's q_proj or in_proj_qkvz: blocks
    // of some of its rows).
    std::function<void(const std::string& name, const Shape& shape, const WeightBlock& block,
                       DType dtype, void* dst)>
        write;
    bool parallel = true;  // write may run on several threads at once
};
// The fused, sharded layout of load_weights, filled by `writer` (stats: tensors and bytes).
ModelWeights assemble_weights(const ModelConfig& config, const WeightTarget& target,
                              WeightWriter writer);

// How the CPU model computes an FP8 checkpoint's projections.
enum class Fp8Compute {
    kBlockScaled,         // W8A8: activations quantized per token group, as the GPU will
    kDequantizedWeights,  // weights widened once to f32 (e4m3 x scale), activations exact
};
// fn(weight, scale) for each projection an FP8 checkpoint quantizes (qkv, o_proj, gate_up, down,
// the experts'), whether or not this model has it (an absent one is undefined).
template <class Fn>
void for_each_fp8_projection(LayerWeights& l, Fn&& fn) {
    fn(l.qkv, l.qkv_scale);
    fn(l.o_proj, l.o_proj_scale);
    fn(l.gate_up, l.gate_up_scale);
    fn(l.down, l.down_scale);
    fn(l.experts_gate_up, l.experts_gate_up_scale);
    fn(l.experts_down, l.experts_down_scale);
}

// kDequantizedWeights: every e4m3 projection of `weights` replaced by its f32 dequantization
// (and its scales dropped), so the two error sources can be told apart.
void dequantize_fp8_weights(ModelWeights& weights);

}  // namespace miniinfer
