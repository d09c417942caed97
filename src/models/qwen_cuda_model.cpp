#include "models/qwen_cuda_model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/check.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "kernels/cuda/elementwise/embedding.h"
#include "kernels/cuda/elementwise/gather_rows.h"
#include "kernels/cuda/elementwise/vocab_parallel.h"
#include "layers/layers.h"

namespace miniinfer {
namespace {

// A host weight of `dtype` to the device; the host copy is released (its last reference
// dropped). A weight already on the device (dummy_cuda_weights) is taken as it is.
Tensor upload_as(Tensor& host, DType dtype) {
    if (!host.defined() || host.device() == Device::kCUDA) return std::exchange(host, Tensor());
    MI_CHECK(host.dtype() == dtype, "the CUDA model takes {} here, got {}", dtype_name(dtype),
             host.describe());
    Tensor device = cuda::to_device(host);
    host = Tensor();
    return device;
}

// bf16 weights (an FP8 checkpoint's projections: e4m3, with f32 scales).
Tensor upload(Tensor& host) {
    return upload_as(
        host, host.defined() && host.dtype() == DType::kF8E4M3 ? DType::kF8E4M3 : DType::kBF16);
}
Tensor upload_scale(Tensor& host) {
    return upload_as(host, DType::kF32);
}

// scale: the weight's FP8 block scales (undefined for a bf16 weight).
cuda::Linear linear(Tensor& weight, Tensor& bias, Shard shard, Communicator* comm,
                    Tensor* scale = nullptr) {
    cuda::Linear l{.weight = upload(weight),
                   .bias = upload(bias),
                   .shard = shard,
                   .comm = comm,
                   .weight_scale = scale ? upload_scale(*scale) : Tensor()};
    MI_CHECK((l.weight.dtype() == DType::kF8E4M3) == l.weight_scale.defined(),
             "an FP8 weight needs its scales and only an FP8 weight has them ({})",
             l.weight.describe());
    return l;
}

// A zero-centred norm's weight as the kernels take it: 1 + w, rounded to bf16 once.
Tensor upload_norm(Tensor& weight, bool zero_centered) {
    if (!weight.defined() || !zero_centered) return upload(weight);
    Tensor host = weight.device() == Device::kCUDA ? cuda::to_host(weight) : weight;
    weight = Tensor();
    Tensor f32 = host.to_f32();
    for (int64_t i = 0; i < f32.numel(); ++i) f32.data<float>()[i] += 1.f;
    Tensor bf16 = Tensor::zeros(f32.shape(), DType::kBF16);
    convert_elements(f32.raw(), DType::kF32, bf16.raw(), DType::kBF16, f32.numel());
    return cuda::to_device(bf16);
}

cuda::RmsNorm norm(Tensor& weight, double eps, bool zero_centered) {
    return {.weight = upload_norm(weight, zero_centered), .eps = float(eps)};
}

// The parts' rows one under the other on the device, zero rows after them up to a multiple of
// `align` rows (so that a GEMM's output rows stay 16-byte aligned); the parts are released.
Tensor stack_rows(std::initializer_list<Tensor*> parts, int64_t align) {
    std::vector<Tensor> device;
    int64_t rows = 0;
    for (Tensor* p : parts) {
        device.push_back(upload(*p));
        rows += device.back().size(0);
    }
    const int64_t cols = device.front().size(1);
    Tensor out = cuda::device_tensor({(rows + align - 1) / align * align, cols}, DType::kBF16);
    MI_CUDA_CHECK(cudaMemset(out.raw(), 0, out.nbytes()));
    size_t offset = 0;
    for (const Tensor& d : device) {
        MI_CHECK(d.size(1) == cols, "stack_rows: {} columns, {} expected", d.size(1), cols);
        MI_CUDA_CHECK(cudaMemcpy(static_cast<char*>(out.raw()) + offset, d.raw(), d.nbytes(),
                                 cudaMemcpyDeviceToDevice));
        offset += d.nbytes();
    }
    return out;
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
    const bool zc = c.zero_centered_norm;
    final_norm_ = norm(w.norm, c.rms_norm_eps, zc);

    const Rotary rotary(c.head_dim, c.rope_theta, c.rope_scaling, c.rotary_dim);
    Tensor freq = Tensor::zeros({int64_t(rotary.inv_freq().size())}, DType::kF32);
    std::copy(rotary.inv_freq().begin(), rotary.inv_freq().end(), freq.data<float>());
    const Tensor inv_freq = cuda::to_device(freq);

    Tensor none;
    int64_t kv_layers = 0, state_layers = 0;
    for (LayerWeights& lw : w.layers) {
        const int64_t l = int64_t(layers_.size());
        Layer layer;
        layer.input_norm = norm(lw.input_norm, c.rms_norm_eps, zc);
        layer.post_attention_norm = norm(lw.post_attention_norm, c.rms_norm_eps, zc);
        layer.is_linear = c.is_linear_attention_layer(l);
        layer.cache_layer = layer.is_linear ? state_layers++ : kv_layers++;
        if (layer.is_linear) {
            LinearAttentionWeights& g = lw.linear_attn;
            const LinearAttentionConfig& la = c.linear_attention;
            layer.linear_attn = {
                .in_proj = {.weight = stack_rows(
                                {&g.in_proj_qkv, &g.in_proj_z, &g.in_proj_b, &g.in_proj_a}, 8),
                            .bias = {},
                            .shard = Shard::kReplicated,
                            .comm = nullptr,
                            .weight_scale = {}},
                .out_proj = linear(g.out_proj, none, Shard::kRow, comm),
                .conv1d = upload(g.conv1d),
                .A_log = upload(g.A_log),
                .dt_bias = upload(g.dt_bias),
                .norm = upload(g.norm),
                .num_k_heads = la.num_key_heads,
                .num_v_heads = la.num_value_heads,
                .head_k_dim = la.key_head_dim,
                .head_v_dim = la.value_head_dim,
                .eps = float(c.rms_norm_eps)};
        } else {
            cuda::Attention& a = layer.attention;
            a.qkv = linear(lw.qkv, lw.qkv_bias, Shard::kColumn, comm, &lw.qkv_scale);
            a.o_proj = linear(lw.o_proj, lw.o_bias, Shard::kRow, comm, &lw.o_proj_scale);
            a.q_norm = upload_norm(lw.q_norm, zc);
            a.k_norm = upload_norm(lw.k_norm, zc);
            a.inv_freq = inv_freq;
            a.rope_scale = rotary.attention_scale();
            a.num_heads = c.num_heads / world;
            a.num_kv_heads = kv_heads_per_rank(c.num_kv_heads, world);
            a.head_dim = c.head_dim;
            a.rotary_dim = c.rotary_dim;
            a.output_gate = c.attn_output_gate;
            a.eps = float(c.rms_norm_eps);
            a.scale = float(1.0 / std::sqrt(double(c.head_dim)));
        }
        layer.is_moe = c.is_moe_layer(l);
        if (layer.is_moe) {
            layer.moe = {.router = linear(lw.router, none, Shard::kReplicated, comm),
                         .experts_gate_up = upload(lw.experts_gate_up),
                         .experts_down = upload(lw.experts_down),
                         .experts_gate_up_scale = upload_scale(lw.experts_gate_up_scale),
                         .experts_down_scale = upload_scale(lw.experts_down_scale),
                         .top_k = c.num_experts_per_tok,
                         .renormalize = c.norm_topk_prob,
                         .comm = comm,
                         .silu_tile = tuning.moe_silu_tile,
                         .shared = {},
                         .shared_gate = {}};
            if (lw.shared_gate_up.defined()) {
                layer.moe.shared = {
                    .gate_up = linear(lw.shared_gate_up, none, Shard::kColumn, comm),
                    .down = linear(lw.shared_down, none, Shard::kRow, comm)};
                Tensor gate = upload(lw.shared_expert_gate);  // [1, hidden]
                layer.moe.shared_gate = gate.view({gate.numel()});
            }
        } else {
            layer.mlp.gate_up = linear(lw.gate_up, none, Shard::kColumn, comm, &lw.gate_up_scale);
            layer.mlp.down = linear(lw.down, none, Shard::kRow, comm, &lw.down_scale);
        }
        if (!layer.is_linear) kv_scales_.emplace_back(lw.k_scale, lw.v_scale);
        layers_.push_back(std::move(layer));
    }
}

CudaModel::AttentionDims QwenCudaModel::attention_dims() const {
    const auto a =
        std::find_if(layers_.begin(), layers_.end(), [](const Layer& l) { return !l.is_linear; });
    MI_CHECK(a != layers_.end(), "the model has no attention layer");
    return {config_.num_kv_layers(), a->attention.num_heads, a->attention.num_kv_heads,
            a->attention.head_dim};
}

CudaModel::StateDims QwenCudaModel::state_dims() const {
    const auto g =
        std::find_if(layers_.begin(), layers_.end(), [](const Layer& l) { return l.is_linear; });
    if (g == layers_.end()) return {};
    const cuda::GatedDeltaNet& d = g->linear_attn;
    return {config_.num_linear_attention_layers(),
            d.conv1d.size(1) - 1,
            d.conv_dim(),
            d.num_v_heads,
            d.head_k_dim,
            d.head_v_dim};
}

size_t QwenCudaModel::weight_bytes() const {
    size_t bytes = embed_.nbytes() + final_norm_.weight.nbytes();
    if (!config_.tie_word_embeddings) bytes += lm_head_.nbytes();
    auto linear = [](const cuda::Linear& l) {
        return l.weight.nbytes() + (l.bias.defined() ? l.bias.nbytes() : 0) +
               (l.weight_scale.defined() ? l.weight_scale.nbytes() : 0);
    };
    for (const Layer& l : layers_) {
        bytes += l.input_norm.weight.nbytes() + l.post_attention_norm.weight.nbytes();
        if (l.is_linear) {
            const cuda::GatedDeltaNet& g = l.linear_attn;
            bytes += linear(g.in_proj) + linear(g.out_proj) + g.conv1d.nbytes() + g.A_log.nbytes() +
                     g.dt_bias.nbytes() + g.norm.nbytes();
        } else {
            const cuda::Attention& a = l.attention;
            bytes += linear(a.qkv) + linear(a.o_proj);
            if (a.q_norm.defined()) bytes += a.q_norm.nbytes() + a.k_norm.nbytes();
        }
        if (l.is_moe) {
            bytes +=
                linear(l.moe.router) + l.moe.experts_gate_up.nbytes() + l.moe.experts_down.nbytes();
            if (l.moe.fp8())
                bytes += l.moe.experts_gate_up_scale.nbytes() + l.moe.experts_down_scale.nbytes();
            if (l.moe.shared_gate.defined())
                bytes += linear(l.moe.shared.gate_up) + linear(l.moe.shared.down) +
                         l.moe.shared_gate.nbytes();
        } else {
            bytes += linear(l.mlp.gate_up) + linear(l.mlp.down);
        }
    }
    return bytes;
}

void QwenCudaModel::allocate_activations(int64_t max_tokens, int64_t max_logits) {
    const int64_t H = config_.hidden_size, V = config_.vocab_size;
    for (Tensor* t : {&hidden_, &residual_[0], &residual_[1], &normed_, &attn_out_})
        *t = cuda::device_tensor({max_tokens, H}, DType::kBF16);
    // One set of scratch per block kind, shared by the layers of that kind.
    for (const Layer& layer : layers_) {
        if (layer.is_linear && !gdn_buffers_.proj.defined())
            gdn_buffers_ = layer.linear_attn.allocate_buffers(max_tokens);
        if (!layer.is_linear && !attention_buffers_.qkv.defined())
            attention_buffers_ = layer.attention.allocate_buffers(max_tokens);
        if (layer.is_moe && !moe_buffers_.logits.defined())
            moe_buffers_ = layer.moe.allocate_buffers(max_tokens);
        if (!layer.is_moe && !mlp_buffers_.act.defined())
            mlp_buffers_ = layer.mlp.allocate_buffers(max_tokens);
    }
    // FP8 projections quantize their activations into the GEMM's scratch: the widest input.
    int64_t fp8_k = 0;
    for (const Layer& layer : layers_) {
        const cuda::Linear* fp8_linears[] = {&layer.attention.qkv, &layer.attention.o_proj,
                                             &layer.mlp.gate_up, &layer.mlp.down};
        for (const cuda::Linear* l : fp8_linears)
            if (l->weight_scale.defined()) fp8_k = std::max(fp8_k, l->weight.size(1));
    }
    if (fp8_k > 0) gemm_.reserve_fp8(max_tokens, fp8_k);
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
                            std::span<cuda::StateLayer> states, cuda::AttentionBackend& attention,
                            cudaStream_t stream) {
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
    int64_t moe_layer = 0;
    for (size_t l = 0; l < layers_.size(); ++l) {
        const Layer& layer = layers_[l];
        // The residual stream: layer 0 normalises the embedding; later layers add the MLP
        // output first.
        const cuda::AddRmsNorm input = add_and_norm(layer.input_norm, l == 0 ? nullptr : &x);
        const size_t c = size_t(layer.cache_layer);
        if (layer.is_linear)
            layer.linear_attn.forward(input, attn_out, states[c], step, gdn_buffers_);
        else
            layer.attention.forward(input, attn_out, kv[c], step, attention_buffers_);
        const cuda::AddRmsNorm post = add_and_norm(layer.post_attention_norm, &attn_out);
        if (layer.is_moe) {
            layer.moe.forward(post, x, step, moe_buffers_);
            if (routing_trace_) {
                const int64_t n = in.num_tokens, k = layer.moe.top_k;
                MI_CHECK(routing_trace_->size(0) > moe_layer && routing_trace_->size(1) >= n &&
                             routing_trace_->size(2) == k,
                         "routing trace {} for {} tokens", routing_trace_->describe(), n);
                MI_CUDA_CHECK(cudaMemcpyAsync(
                    routing_trace_->data<int32_t>() + moe_layer * routing_trace_->size(1) * k,
                    moe_buffers_.topk_ids.raw(), size_t(n * k) * 4, cudaMemcpyDeviceToDevice,
                    stream));
            }
            ++moe_layer;
        } else
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
