#include "models/qwen_model.h"

#include <cmath>
#include <cstring>
#include <tuple>

#include "core/check.h"

namespace miniinfer {

QwenModel::QwenModel(ModelConfig config, ModelWeights weights, CpuParallel parallel)
    : config_(std::move(config)), weights_(std::move(weights)), parallel_(parallel) {
    check_engine_support(config_);
    MI_CHECK(parallel_.world == 1 || parallel_.comm, "tensor parallelism needs a communicator");
    const int64_t world = parallel_.world;
    std::tie(vocab_begin_, vocab_end_) = vocab_range(config_.vocab_size, parallel_.rank, world);
    const float eps = float(config_.rms_norm_eps);
    const Rotary rotary(config_.head_dim, config_.rope_theta, config_.rope_scaling);
    for (int64_t l = 0; l < config_.num_layers; ++l) {
        const LayerWeights& w = weights_.layers[size_t(l)];
        Layer layer;
        layer.input_norm = {w.input_norm, eps};
        layer.post_attention_norm = {w.post_attention_norm, eps};
        layer.attention = {
            .qkv = {w.qkv, w.qkv_bias},
            // A row-parallel layer's bias joins one rank's partial sum only.
            .o_proj = {w.o_proj, parallel_.rank == 0 ? w.o_bias : Tensor()},
            .q_norm = {w.q_norm, eps},
            .k_norm = {w.k_norm, eps},
            .rotary = rotary,
            .attention = {.num_heads = config_.num_heads / world,
                          .num_kv_heads = num_local_kv_heads(),
                          .head_dim = config_.head_dim,
                          .scale = float(1.0 / std::sqrt(double(config_.head_dim)))}};
        layer.is_moe = config_.is_moe_layer(l);
        if (layer.is_moe) {
            layer.moe = {.router = {w.router, Tensor()},
                         .gate_up = w.experts_gate_up,
                         .down = w.experts_down,
                         .top_k = config_.num_experts_per_tok,
                         .renormalize = config_.norm_topk_prob};
            if (parallel_.expert_parallel)
                std::tie(layer.moe.expert_begin, layer.moe.expert_end) =
                    expert_range(config_.num_experts, parallel_.rank, world);
        } else {
            layer.mlp = {{w.gate_up, Tensor()}, {w.down, Tensor()}};
        }
        layers_.push_back(std::move(layer));
    }
    final_norm_ = {weights_.norm, eps};
}

QwenModel QwenModel::load(const std::filesystem::path& model_dir, LoadFormat format, uint64_t seed,
                          CpuParallel parallel) {
    ModelConfig config = ModelConfig::load(model_dir);
    check_engine_support(config);  // before the weights are read
    const WeightTarget target{.dtype = DType::kF32,
                              .rank = parallel.rank,
                              .world = parallel.world,
                              .expert_parallel = parallel.expert_parallel};
    ModelWeights weights = format == LoadFormat::kDummy ? dummy_weights(config, seed, target)
                                                        : load_weights(config, model_dir, target);
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

Tensor QwenModel::forward(const ForwardBatch& batch, KvCache& kv) const {
    MI_CHECK(batch.num_tokens() > 0 && batch.positions.size() == batch.input_ids.size(),
             "forward: {} tokens, {} positions", batch.num_tokens(), batch.positions.size());
    Tensor residual = embed_tokens(batch.input_ids);
    Tensor h = layers_[0].input_norm.forward(residual);
    for (size_t l = 0; l < layers_.size(); ++l) {
        const Layer& layer = layers_[l];
        if (l > 0) h = layer.input_norm.forward_add(h, residual);
        Tensor attn =
            layer.attention.forward(h, batch, kv.k(int64_t(l)), kv.v(int64_t(l)), kv.page_size());
        if (parallel_.comm) parallel_.comm->all_reduce_sum(attn);  // o_proj is row-parallel
        h = layer.post_attention_norm.forward_add(attn, residual);
        h = layer.is_moe ? layer.moe.forward(h) : layer.mlp.forward(h);
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
