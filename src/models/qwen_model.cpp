#include "models/qwen_model.h"

#include <cmath>
#include <cstring>
#include <tuple>

#include "core/check.h"

namespace miniinfer {

QwenModel::QwenModel(ModelConfig config, ModelWeights weights, CpuParallel parallel)
    : config_(std::move(config)), weights_(std::move(weights)), parallel_(parallel) {
    MI_CHECK(parallel_.world == 1 || parallel_.comm, "tensor parallelism needs a communicator");
    const int64_t world = parallel_.world;
    std::tie(vocab_begin_, vocab_end_) = vocab_range(config_.vocab_size, parallel_.rank, world);
    const float eps = float(config_.rms_norm_eps);
    const float offset = config_.zero_centered_norm ? 1.f : 0.f;
    const Rotary rotary(config_.head_dim, config_.rope_theta, config_.rope_scaling,
                        config_.rotary_dim);
    const LinearAttentionConfig& la = config_.linear_attention;
    int64_t kv_layers = 0, state_layers = 0;
    for (int64_t l = 0; l < config_.num_layers; ++l) {
        const LayerWeights& w = weights_.layers[size_t(l)];
        Layer layer;
        layer.input_norm = {w.input_norm, eps, offset};
        layer.post_attention_norm = {w.post_attention_norm, eps, offset};
        layer.is_linear = config_.is_linear_attention_layer(l);
        layer.cache_layer = layer.is_linear ? state_layers++ : kv_layers++;
        if (layer.is_linear) {
            const LinearAttentionWeights& g = w.linear_attn;
            layer.linear_attn = {.in_proj_qkv = {g.in_proj_qkv, Tensor()},
                                 .in_proj_z = {g.in_proj_z, Tensor()},
                                 .in_proj_b = {g.in_proj_b, Tensor()},
                                 .in_proj_a = {g.in_proj_a, Tensor()},
                                 .out_proj = {g.out_proj, Tensor()},
                                 .conv1d = g.conv1d,
                                 .A_log = g.A_log,
                                 .dt_bias = g.dt_bias,
                                 .norm = g.norm,
                                 .num_k_heads = la.num_key_heads,
                                 .num_v_heads = la.num_value_heads,
                                 .head_k_dim = la.key_head_dim,
                                 .head_v_dim = la.value_head_dim,
                                 .eps = eps};
        } else {
            layer.attention = {
                .qkv = {w.qkv, w.qkv_bias, w.qkv_scale},
                // A row-parallel layer's bias joins one rank's partial sum only.
                .o_proj = {w.o_proj, parallel_.rank == 0 ? w.o_bias : Tensor(), w.o_proj_scale},
                .q_norm = {w.q_norm, eps, offset},
                .k_norm = {w.k_norm, eps, offset},
                .rotary = rotary,
                .attention = {.num_heads = config_.num_heads / world,
                              .num_kv_heads = num_local_kv_heads(),
                              .head_dim = config_.head_dim,
                              .scale = float(1.0 / std::sqrt(double(config_.head_dim)))},
                .output_gate = config_.attn_output_gate};
        }
        layer.is_moe = config_.is_moe_layer(l);
        if (layer.is_moe) {
            layer.moe = {.router = {w.router, Tensor()},
                         .gate_up = w.experts_gate_up,
                         .down = w.experts_down,
                         .gate_up_scale = w.experts_gate_up_scale,
                         .down_scale = w.experts_down_scale,
                         .top_k = config_.num_experts_per_tok,
                         .renormalize = config_.norm_topk_prob,
                         .shared = {{w.shared_gate_up, Tensor()}, {w.shared_down, Tensor()}},
                         .shared_gate = {w.shared_expert_gate, Tensor()}};
            if (parallel_.expert_parallel)
                std::tie(layer.moe.expert_begin, layer.moe.expert_end) =
                    expert_range(config_.num_experts, parallel_.rank, world);
        } else {
            layer.mlp = {{w.gate_up, Tensor(), w.gate_up_scale}, {w.down, Tensor(), w.down_scale}};
        }
        layers_.push_back(std::move(layer));
    }
    final_norm_ = {weights_.norm, eps, offset};
}

QwenModel QwenModel::load(const std::filesystem::path& model_dir, LoadFormat format, uint64_t seed,
                          CpuParallel parallel, Fp8Compute fp8) {
    ModelConfig config = ModelConfig::load(model_dir);
    const WeightTarget target{.dtype = DType::kF32,
                              .rank = parallel.rank,
                              .world = parallel.world,
                              .expert_parallel = parallel.expert_parallel};
    ModelWeights weights = format == LoadFormat::kDummy ? dummy_weights(config, seed, target)
                                                        : load_weights(config, model_dir, target);
    if (fp8 == Fp8Compute::kDequantizedWeights) dequantize_fp8_weights(weights);
    return QwenModel(std::move(config), std::move(weights), parallel);
}

void QwenModel::use_fp8_kv_cache(float k_scale, float v_scale) {
    MI_CHECK(k_scale > 0.f && v_scale > 0.f, "fp8 KV scales must be positive");
    for (size_t l = 0; l < layers_.size(); ++l) {
        const LayerWeights& w = weights_.layers[l];  // the checkpoint's scales win
        layers_[l].attention.attention.fp8_k_scale = w.k_scale > 0.f ? w.k_scale : k_scale;
        layers_[l].attention.attention.fp8_v_scale = w.v_scale > 0.f ? w.v_scale : v_scale;
    }
}

int64_t QwenModel::num_local_kv_heads() const {
    return kv_heads_per_rank(config_.num_kv_heads, parallel_.world);
}

void QwenModel::prepare_states(const ForwardBatch& batch, StateCache* state) const {
    if (config_.num_linear_attention_layers() == 0) return;
    MI_CHECK(state && int64_t(batch.state_slots.size()) == batch.num_seqs(),
             "forward: a hybrid model needs a state slot for each of its {} sequences",
             batch.num_seqs());
    for (const StateRestore& r : batch.state_restores) state->copy(r.from, r.to);
    for (int64_t s = 0; s < batch.num_seqs(); ++s)
        if (batch.positions[size_t(batch.query_start[size_t(s)])] == 0)
            state->reset(batch.state_slots[size_t(s)]);
}

Tensor QwenModel::forward(const ForwardBatch& batch, KvCache& kv, StateCache* state) const {
    MI_CHECK(batch.num_tokens() > 0 && batch.positions.size() == batch.input_ids.size(),
             "forward: {} tokens, {} positions", batch.num_tokens(), batch.positions.size());
    prepare_states(batch, state);
    Tensor residual = embed_tokens(batch.input_ids);
    Tensor h = layers_[0].input_norm.forward(residual);
    size_t moe_layer = 0;
    for (size_t l = 0; l < layers_.size(); ++l) {
        const Layer& layer = layers_[l];
        if (l > 0) h = layer.input_norm.forward_add(h, residual);
        const int64_t c = layer.cache_layer;
        Tensor attn = layer.is_linear
                          ? layer.linear_attn.forward(h, batch, state->conv(c), state->recurrent(c))
                          : layer.attention.forward(h, batch, kv.k(c), kv.v(c), kv.page_size());
        if (parallel_.comm) parallel_.comm->all_reduce_sum(attn);  // o_proj is row-parallel
        h = layer.post_attention_norm.forward_add(attn, residual);
        if (layer.is_moe) {
            const size_t m = moe_layer++;
            h = layer.moe.forward(h, m < forced_routing_.size() ? std::span(forced_routing_[m])
                                                                : std::span<const int32_t>());
        } else {
            h = layer.mlp.forward(h);
        }
        if (parallel_.comm) parallel_.comm->all_reduce_sum(h);  // down: row-parallel or experts
    }
    // Only the rows that sample need the final norm and the (large) lm_head.
    const int64_t hidden = config_.hidden_size, num_logits = int64_t(batch.logits_indices.size());
    Tensor last_h = Tensor::zeros({num_logits, hidden}, DType::kF32);
    Tensor last_r = Tensor::zeros({num_logits, hidden}, DType::kF32);
    for (int64_t i = 0; i < num_logits; ++i) {
        const int64_t row = batch.logits_indices[size_t(i)];
        MI_CHECK(row >= 0 && row < batch.num_tokens(), "logits index {} of {} tokens", row,
                 batch.num_tokens());
        std::memcpy(last_h.data<float>() + i * hidden, h.data<float>() + row * hidden,
                    size_t(hidden) * sizeof(float));
        std::memcpy(last_r.data<float>() + i * hidden, residual.data<float>() + row * hidden,
                    size_t(hidden) * sizeof(float));
    }
    return lm_head(final_norm_.forward_add(last_h, last_r));
}

Tensor QwenModel::embed_tokens(std::span<const int32_t> ids) const {
    if (!parallel_.comm) return embed(weights_.embed, ids);
    const int64_t hidden = config_.hidden_size, n = int64_t(ids.size());
    Tensor out = Tensor::zeros({n, hidden}, DType::kF32);
    for (int64_t i = 0; i < n; ++i) {
        const int64_t id = ids[size_t(i)];
        if (id >= vocab_begin_ && id < vocab_end_)
            std::memcpy(out.data<float>() + i * hidden,
                        weights_.embed.data<float>() + (id - vocab_begin_) * hidden,
                        size_t(hidden) * sizeof(float));
    }
    parallel_.comm->all_reduce_sum(out);  // one rank's row plus zeros: exact
    return out;
}

Tensor QwenModel::lm_head(const Tensor& normed) const {
    Tensor local = Linear{weights_.lm_head, Tensor()}.forward(normed);  // [n, this rank's range]
    if (!parallel_.comm) return local;
    const int64_t n = normed.size(0), vocab = config_.vocab_size;
    Tensor gathered = Tensor::zeros({n * vocab}, DType::kF32);  // rank r's [n, its range] blocks
    parallel_.comm->all_gather(local, gathered);
    Tensor logits = Tensor::zeros({n, vocab}, DType::kF32);
    const float* block = gathered.data<float>();
    for (int64_t r = 0; r < parallel_.world; ++r) {  // the blocks side by side
        const auto [begin, end] = vocab_range(vocab, r, parallel_.world);
        for (int64_t i = 0; i < n; ++i)
            std::memcpy(logits.data<float>() + i * vocab + begin, block + i * (end - begin),
                        size_t(end - begin) * sizeof(float));
        block += n * (end - begin);
    }
    return logits;
}

}  // namespace miniinfer
