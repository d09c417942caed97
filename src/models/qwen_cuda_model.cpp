#include "models/qwen_cuda_model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/check.h"
#include "core/cuda/device_buffer.h"
#include "kernels/cuda/elementwise/embedding.h"
#include "kernels/cuda/elementwise/gather_rows.h"
#include "kernels/cuda/elementwise/vocab_parallel.h"
#include "layers/layers.h"

namespace miniinfer {
namespace {

// A host bf16 weight to the device; the host copy is released (its last reference dropped).
// A weight already on the device (dummy_cuda_weights) is taken as it is.
Tensor upload(Tensor& host) {
    if (!host.defined() || host.device() == Device::kCUDA) return std::exchange(host, Tensor());
    MI_CHECK(host.dtype() == DType::kBF16, "the CUDA model takes bf16 weights, got {}",
             host.describe());
    Tensor device = cuda::to_device(host);
    host = Tensor();
    return device;
}

cuda::Linear linear(Tensor& weight, Tensor& bias, Shard shard, Communicator* comm) {
    return {.weight = upload(weight), .bias = upload(bias), .shard = shard, .comm = comm};
}

cuda::RmsNorm norm(Tensor& weight, double eps) {
    return {.weight = upload(weight), .eps = float(eps)};
}

}  // namespace

QwenCudaModel::QwenCudaModel(ModelConfig config, ModelWeights w, Communicator* comm,
                             const Tuning& tuning)
    : config_(std::move(config)) {
    const ModelConfig& c = config_;
    const int64_t world = comm ? comm->world() : 1;
    comm_ = comm;
    if (comm) {
        if (c.vocab_size % world != 0)
            fail(
                "vocab_size {} is not divisible by tensor_parallel_size {} (the LM head's logits "
                "are gathered in equal blocks)",
                c.vocab_size, world);
        vocab_begin_ = vocab_range(c.vocab_size, comm->rank(), world).first;
    }
    embed_ = upload(w.embed);
    lm_head_ = c.tie_word_embeddings ? embed_ : upload(w.lm_head);
    final_norm_ = norm(w.norm, c.rms_norm_eps);

    const Rotary rotary(c.head_dim, c.rope_theta, c.rope_scaling);
    Tensor freq = Tensor::zeros({c.head_dim / 2}, DType::kF32);
    std::copy(rotary.inv_freq().begin(), rotary.inv_freq().end(), freq.data<float>());
    const Tensor inv_freq = cuda::to_device(freq);

    Tensor none;
    for (LayerWeights& lw : w.layers) {
        Layer layer;
        layer.input_norm = norm(lw.input_norm, c.rms_norm_eps);
        layer.post_attention_norm = norm(lw.post_attention_norm, c.rms_norm_eps);
        cuda::Attention& a = layer.attention;
        a.qkv = linear(lw.qkv, lw.qkv_bias, Shard::kColumn, comm);
        a.o_proj = linear(lw.o_proj, lw.o_bias, Shard::kRow, comm);
        a.q_norm = upload(lw.q_norm);
        a.k_norm = upload(lw.k_norm);
        a.inv_freq = inv_freq;
        a.rope_scale = rotary.attention_scale();
        a.num_heads = c.num_heads / world;
        a.num_kv_heads = kv_heads_per_rank(c.num_kv_heads, world);
        a.head_dim = c.head_dim;
        a.eps = float(c.rms_norm_eps);
        a.scale = float(1.0 / std::sqrt(double(c.head_dim)));
        layer.is_moe = c.is_moe_layer(int64_t(layers_.size()));
        if (layer.is_moe) {
            layer.moe = {.router = linear(lw.router, none, Shard::kReplicated, comm),
                         .experts_gate_up = upload(lw.experts_gate_up),
                         .experts_down = upload(lw.experts_down),
                         .top_k = c.num_experts_per_tok,
                         .renormalize = c.norm_topk_prob,
                         .comm = comm,
                         .silu_tile = tuning.moe_silu_tile};
        } else {
            layer.mlp.gate_up = linear(lw.gate_up, none, Shard::kColumn, comm);
            layer.mlp.down = linear(lw.down, none, Shard::kRow, comm);
        }
        layers_.push_back(std::move(layer));
        kv_scales_.emplace_back(lw.k_scale, lw.v_scale);
    }
}

CudaModel::AttentionDims QwenCudaModel::attention_dims() const {
    const cuda::Attention& a = layers_.at(0).attention;
    return {int64_t(layers_.size()), a.num_heads, a.num_kv_heads, a.head_dim};
}

size_t QwenCudaModel::weight_bytes() const {
    size_t bytes = embed_.nbytes() + final_norm_.weight.nbytes();
    if (!config_.tie_word_embeddings) bytes += lm_head_.nbytes();
    auto linear = [](const cuda::Linear& l) {
        return l.weight.nbytes() + (l.bias.defined() ? l.bias.nbytes() : 0);
    };
    for (const Layer& l : layers_) {
        const cuda::Attention& a = l.attention;
        bytes += l.input_norm.weight.nbytes() + l.post_attention_norm.weight.nbytes();
        bytes += linear(a.qkv) + linear(a.o_proj);
        if (l.is_moe)
            bytes +=
                linear(l.moe.router) + l.moe.experts_gate_up.nbytes() + l.moe.experts_down.nbytes();
        else
            bytes += linear(l.mlp.gate_up) + linear(l.mlp.down);
        if (a.q_norm.defined()) bytes += a.q_norm.nbytes() + a.k_norm.nbytes();
    }
    return bytes;
}

void QwenCudaModel::allocate_activations(int64_t max_tokens, int64_t max_logits) {
    const int64_t H = config_.hidden_size, V = config_.vocab_size;
    for (Tensor* t : {&hidden_, &residual_[0], &residual_[1], &normed_, &attn_out_})
        *t = cuda::device_tensor({max_tokens, H}, DType::kBF16);
    attention_buffers_ = layers_.at(0).attention.allocate_buffers(max_tokens);
    // One set of scratch per block kind, shared by the layers of that kind.
    for (const Layer& layer : layers_) {
        if (layer.is_moe && !moe_buffers_.logits.defined())
            moe_buffers_ = layer.moe.allocate_buffers(max_tokens);
        if (!layer.is_moe && !mlp_buffers_.act.defined())
            mlp_buffers_ = layer.mlp.allocate_buffers(max_tokens);
    }
    for (Tensor* t : {&last_hidden_, &last_residual_, &last_normed_})
        *t = cuda::device_tensor({max_logits, H}, DType::kBF16);
    logits_ = cuda::device_tensor({max_logits, V}, DType::kF32);
    if (comm_) {
        const int64_t world = comm_->world();
        logits_local_ = cuda::device_tensor({max_logits, V / world}, DType::kF32);
        logits_gathered_ = cuda::device_tensor({world * max_logits * (V / world)}, DType::kF32);
    }
}

void QwenCudaModel::forward(const cuda::StepInputs& in, std::span<cuda::KvLayer> kv,
                            cuda::AttentionBackend& attention, cudaStream_t stream) {
    using cuda::rows;
    const cuda::Step step{.in = in, .stream = stream, .gemm = gemm_, .attention = attention};
    const int64_t n = in.num_tokens;
    Tensor x = rows(hidden_, n), h = rows(normed_, n), attn_out = rows(attn_out_, n);
    Tensor residual[2] = {rows(residual_[0], n), rows(residual_[1], n)};
    int cur = 0;  // residual[cur] is the stream
    // The next norm's input: the stream plus `delta` (into the other buffer, which becomes the
    // stream), or without delta the stream as it is.
    const auto add_and_norm = [&](const cuda::RmsNorm& norm, const Tensor* delta) {
        const cuda::AddRmsNorm a = norm.before(delta, residual[cur], &residual[1 - cur], h);
        if (delta) cur = 1 - cur;
        return a;
    };
    if (comm_) {  // vocab-parallel: this rank's rows, zeros elsewhere, summed over the ranks
        cuda::embedding_shard(in.token_ids, embed_, vocab_begin_, residual[cur], stream);
        comm_->all_reduce_sum(residual[cur], stream);
    } else {
        cuda::embedding(in.token_ids, embed_, residual[cur], stream);
    }
    for (size_t l = 0; l < layers_.size(); ++l) {
        const Layer& layer = layers_[l];
        // The residual stream: layer 0 normalises the embedding; later layers add the MLP
        // output first.
        layer.attention.forward(add_and_norm(layer.input_norm, l == 0 ? nullptr : &x), attn_out,
                                kv[l], step, attention_buffers_);
        const cuda::AddRmsNorm post = add_and_norm(layer.post_attention_norm, &attn_out);
        if (layer.is_moe)
            layer.moe.forward(post, x, step, moe_buffers_);
        else
            layer.mlp.forward(post, x, step, mlp_buffers_);
    }
    const int64_t m = in.num_logits;
    if (m == 0) return;
    // Only the sampled rows: gather, add & norm, lm_head (fp32 logits).
    Tensor last_x = rows(last_hidden_, m), last_res = rows(last_residual_, m);
    Tensor last_h = rows(last_normed_, m), logits = rows(logits_, m);
    cuda::gather_rows(x, in.logits_indices, last_x, stream);
    cuda::gather_rows(residual[cur], in.logits_indices, last_res, stream);
    final_norm_.forward(last_x, &last_res, last_h, stream);
    if (comm_) {  // vocab-parallel: this rank's columns, gathered from every rank, in order
        const int64_t world = comm_->world(), cols = config_.vocab_size / world;
        Tensor local = rows(logits_local_, m);
        gemm_.run(last_h, lm_head_, nullptr, local, stream);
        Tensor gathered(logits_gathered_.raw(), DType::kF32, {world * m * cols}, Device::kCUDA);
        comm_->all_gather(local, gathered, stream);
        cuda::interleave_rank_blocks(gathered, world, logits, stream);
    } else {
        gemm_.run(last_h, lm_head_, nullptr, logits, stream);  // fp32 out: no bf16 rounding
    }
}

}  // namespace miniinfer
