#include "layers/layers.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "kernels/cpu/fp8_linear.h"
#include "kernels/cpu/gated_delta_net.h"
#include "kernels/cpu/ops.h"

namespace miniinfer {
namespace {

// The block scales of an FP8 weight [out, in]: [ceil(out / 128), ceil(in / 128)].
int64_t fp8_scale_count(int64_t out, int64_t in) {
    const int64_t b = cpu::kFp8Block;
    return ((out + b - 1) / b) * ((in + b - 1) / b);
}

}  // namespace

Tensor Linear::forward(const Tensor& x) const {
    const int64_t in = weight.size(1), out = weight.size(0), n = x.numel() / in;
    MI_CHECK(x.numel() == n * in, "Linear {}: input {}", weight.describe(), x.describe());
    Tensor y = Tensor::zeros({n, out}, DType::kF32);
    const float* b = bias.defined() ? bias.data<float>() : nullptr;
    if (weight.dtype() == DType::kF8E4M3) {
        MI_CHECK(weight_scale.defined() && weight_scale.numel() == fp8_scale_count(out, in),
                 "Linear {}: FP8 weight with scales {}", weight.describe(),
                 weight_scale.defined() ? weight_scale.describe() : "undefined");
        cpu::fp8_block_linear(x.data<float>(), n, in, weight.data<uint8_t>(),
                              weight_scale.data<float>(), b, out, y.data<float>());
    } else {
        cpu::linear(x.data<float>(), n, in, weight.data<float>(), b, out, y.data<float>());
    }
    return y;
}

Tensor RMSNorm::forward(const Tensor& x) const {
    const int64_t dim = weight.size(0);
    MI_CHECK(x.size(-1) == dim, "RMSNorm [{}]: input {}", dim, x.describe());
    Tensor y = Tensor::zeros(x.shape(), DType::kF32);
    cpu::rms_norm(x.data<float>(), weight.data<float>(), x.numel() / dim, dim, eps, y.data<float>(),
                  weight_offset);
    return y;
}

Tensor RMSNorm::forward_add(const Tensor& x, Tensor& residual) const {
    const int64_t dim = weight.size(0);
    MI_CHECK(x.shape() == residual.shape() && x.size(-1) == dim, "RMSNorm add: {} + {}",
             x.describe(), residual.describe());
    Tensor y = Tensor::zeros(x.shape(), DType::kF32);
    cpu::add_rms_norm(residual.data<float>(), x.data<float>(), weight.data<float>(),
                      x.numel() / dim, dim, eps, y.data<float>(), weight_offset);
    return y;
}

// Every value rounded to f32 where transformers' modeling_rope_utils.py rounds it (its tensors
// are f32, its scalars Python doubles), so the frequencies match it bit for bit:
//   default: inv_freq[i] = 1 / theta^(2i / dim); linear: that / factor;
//   yarn: a blend of that (extrapolation) and 1 / (factor theta^(2i / dim))
//   (interpolation), by a linear ramp between the beta_fast and beta_slow correction dims;
// dim is rotary_dim, the rotating part of a head.
Rotary::Rotary(int64_t head_dim, double theta, const RopeScaling& scaling, int64_t rotary_dim)
    : head_dim_(head_dim), rotary_dim_(rotary_dim > 0 ? rotary_dim : head_dim) {
    const int64_t dim = rotary_dim_, half = dim / 2;
    // YaRN's correction range: the dimensions that turn beta times over the original context.
    double low = 0, high = 0;
    if (scaling.kind == RopeScaling::Kind::kYarn) {
        auto correction_dim = [&](double rotations) {
            return (double(dim) * std::log(double(scaling.original_max_position_embeddings) /
                                           (rotations * 2 * M_PI))) /
                   (2 * std::log(theta));
        };
        low = correction_dim(scaling.beta_fast);
        high = correction_dim(scaling.beta_slow);
        if (scaling.truncate) low = std::floor(low), high = std::ceil(high);
        low = std::max(low, 0.0);
        high = std::min(high, double(dim - 1));
        if (low == high) high += 0.001;  // as transformers: no division by zero
        attention_scale_ = float(scaling.attention_factor);
    }
    for (int64_t i = 0; i < half; ++i) {
        const float exponent = float(2 * i) / float(dim);
        const float pos_freq = std::pow(float(theta), exponent);
        const float freq = 1.0f / pos_freq;
        switch (scaling.kind) {
            case RopeScaling::Kind::kNone:
                inv_freq_.push_back(freq);
                break;
            case RopeScaling::Kind::kLinear:
                inv_freq_.push_back(freq / float(scaling.factor));
                break;
            case RopeScaling::Kind::kYarn: {
                const float interpolation = 1.0f / (float(scaling.factor) * pos_freq);
                const float ramp =
                    std::clamp((float(i) - float(low)) / float(high - low), 0.f, 1.f);
                const float extrapolation_factor = 1.0f - ramp;
                const float a = interpolation * (1.0f - extrapolation_factor);
                const float b = freq * extrapolation_factor;
                inv_freq_.push_back(a + b);
                break;
            }
        }
    }
}

void Rotary::apply(Tensor& x, std::span<const int32_t> positions) const {
    MI_CHECK(x.ndim() == 3 && x.size(2) == head_dim_ && x.size(0) == int64_t(positions.size()),
             "Rotary: {} with {} positions", x.describe(), positions.size());
    cpu::rope_neox(x.data<float>(), x.size(0), x.size(1), head_dim_, positions.data(),
                   inv_freq_.data(), attention_scale_, rotary_dim_);
}

Tensor PagedAttention::forward(const Tensor& q, const Tensor& k, const Tensor& v,
                               const ForwardBatch& batch, const Tensor& k_cache,
                               const Tensor& v_cache, int64_t page_size) const {
    const int64_t n = batch.num_tokens();
    MI_CHECK(q.numel() == n * num_heads * head_dim && k.numel() == n * num_kv_heads * head_dim &&
                 v.numel() == k.numel(),
             "PagedAttention: q {} k {} v {} for {} tokens", q.describe(), k.describe(),
             v.describe(), n);
    MI_CHECK(int64_t(batch.slot_mapping.size()) == n &&
                 int64_t(batch.query_start.size()) == batch.num_seqs() + 1,
             "PagedAttention: inconsistent batch");
    const float fp8_scales[2] = {fp8_k_scale, fp8_v_scale};
    cpu::store_kv(k.data<float>(), v.data<float>(), batch.slot_mapping.data(), n, num_kv_heads,
                  head_dim, k_cache.data<float>(), v_cache.data<float>(),
                  fp8_k_scale > 0.f ? fp8_scales : nullptr);
    Tensor out = Tensor::zeros({n, num_heads * head_dim}, DType::kF32);
    cpu::paged_attention({.q = q.data<float>(),
                          .k_cache = k_cache.data<float>(),
                          .v_cache = v_cache.data<float>(),
                          .query_start = batch.query_start.data(),
                          .seq_lens = batch.seq_lens.data(),
                          .block_table = batch.block_table.data(),
                          .num_seqs = batch.num_seqs(),
                          .max_pages = batch.max_pages,
                          .page_size = page_size,
                          .num_heads = num_heads,
                          .num_kv_heads = num_kv_heads,
                          .head_dim = head_dim,
                          .scale = scale,
                          .out = out.data<float>()});
    return out;
}

Tensor DenseMlp::forward(const Tensor& x) const {
    Tensor h = gate_up.forward(x);
    const int64_t n = h.size(0), inter = h.size(1) / 2;
    Tensor act = Tensor::zeros({n, inter}, DType::kF32);
    cpu::silu_mul(h.data<float>(), n, inter, act.data<float>());
    return down.forward(act);
}

Tensor FusedMoE::forward(const Tensor& x, std::span<const int32_t> forced_ids) const {
    const int64_t n = x.size(0), hidden = x.size(1);
    const int64_t num_experts = gate_up.size(0), inter = gate_up.size(1) / 2;
    Tensor logits = router.forward(x);
    std::vector<int32_t> expert_ids(size_t(n * top_k));
    std::vector<float> weights(size_t(n * top_k));
    MI_CHECK(forced_ids.empty() || int64_t(forced_ids.size()) == n * top_k,
             "forced routing of {} ids for {} tokens", forced_ids.size(), n);
    cpu::moe_route(logits.data<float>(), n, num_experts, top_k, renormalize, expert_ids.data(),
                   weights.data(), forced_ids.empty() ? nullptr : forced_ids.data());
    if (expert_end >= 0)  // another rank's expert: no row here (its output stays 0)
        for (int32_t& e : expert_ids)
            if (e < expert_begin || e >= expert_end) e = -1;
    Tensor out = Tensor::zeros({n, hidden}, DType::kF32);
    if (gate_up.dtype() == DType::kF8E4M3) {
        MI_CHECK(gate_up_scale.numel() == num_experts * fp8_scale_count(2 * inter, hidden) &&
                     down_scale.numel() == num_experts * fp8_scale_count(hidden, inter),
                 "FusedMoE: FP8 experts {} {} with scales {} {}", gate_up.describe(),
                 down.describe(), gate_up_scale.describe(), down_scale.describe());
        std::vector<float> h2, h;
        const cpu::ExpertMlp mlp = [&](int64_t e, const float* xs, int64_t m, float* ys) {
            h2.resize(size_t(m * 2 * inter));
            h.resize(size_t(m * inter));
            cpu::fp8_block_linear(
                xs, m, hidden, gate_up.data<uint8_t>() + e * 2 * inter * hidden,
                gate_up_scale.data<float>() + e * fp8_scale_count(2 * inter, hidden), nullptr,
                2 * inter, h2.data());
            cpu::silu_mul(h2.data(), m, inter, h.data());
            cpu::fp8_block_linear(h.data(), m, inter, down.data<uint8_t>() + e * hidden * inter,
                                  down_scale.data<float>() + e * fp8_scale_count(hidden, inter),
                                  nullptr, hidden, ys);
        };
        cpu::moe_experts(x.data<float>(), n, hidden, expert_ids.data(), weights.data(), top_k,
                         num_experts, mlp, out.data<float>());
    } else {
        cpu::moe_experts(x.data<float>(), n, hidden, expert_ids.data(), weights.data(), top_k,
                         gate_up.data<float>(), down.data<float>(), num_experts, inter,
                         out.data<float>());
    }
    if (shared.gate_up.weight.defined()) {
        const Tensor y = shared.forward(x), gate = shared_gate.forward(x);  // [n, hidden], [n, 1]
        cpu::add_sigmoid_scaled(out.data<float>(), y.data<float>(), gate.data<float>(), n, hidden);
    }
    return out;
}

Tensor embed(const Tensor& table, std::span<const int32_t> ids) {
    const int64_t hidden = table.size(1);
    Tensor out = Tensor::zeros({int64_t(ids.size()), hidden}, DType::kF32);
    cpu::embedding(ids.data(), int64_t(ids.size()), table.data<float>(), hidden, out.data<float>());
    return out;
}

Tensor Attention::forward(const Tensor& x, const ForwardBatch& batch, const Tensor& k_cache,
                          const Tensor& v_cache, int64_t page_size) const {
    const int64_t n = x.size(0), D = attention.head_dim;
    const int64_t q_size = attention.num_heads * D, kv_size = attention.num_kv_heads * D;
    Tensor qkv_out = qkv.forward(x);  // [n, q + 2 kv]
    // Split into contiguous per-head tensors: q [n, heads, D], k and v [n, kv_heads, D].
    Tensor q = Tensor::zeros({n, attention.num_heads, D}, DType::kF32);
    Tensor k = Tensor::zeros({n, attention.num_kv_heads, D}, DType::kF32);
    Tensor v = Tensor::zeros({n, attention.num_kv_heads, D}, DType::kF32);
    const int64_t row = q_size + 2 * kv_size + (output_gate ? q_size : 0);
    MI_CHECK(qkv_out.size(1) == row, "Attention: qkv gives {} columns, {} expected",
             qkv_out.size(1), row);
    for (int64_t t = 0; t < n; ++t) {
        const float* src = qkv_out.data<float>() + t * row;
        std::memcpy(q.data<float>() + t * q_size, src, size_t(q_size) * sizeof(float));
        std::memcpy(k.data<float>() + t * kv_size, src + q_size, size_t(kv_size) * sizeof(float));
        std::memcpy(v.data<float>() + t * kv_size, src + q_size + kv_size,
                    size_t(kv_size) * sizeof(float));
    }
    if (q_norm.weight.defined()) {
        q = q_norm.forward(q);
        k = k_norm.forward(k);
    }
    rotary.apply(q, batch.positions);
    rotary.apply(k, batch.positions);
    Tensor o = attention.forward(q, k, v, batch, k_cache, v_cache, page_size);
    if (output_gate)  // the gates follow v in each row
        cpu::mul_sigmoid(o.data<float>(), qkv_out.data<float>() + q_size + 2 * kv_size, n, q_size,
                         row);
    return o_proj.forward(o);
}

Tensor GatedDeltaNet::forward(const Tensor& x, const ForwardBatch& batch, Tensor& conv_state,
                              Tensor& recurrent_state) const {
    const int64_t n = x.size(0), conv_dim = conv1d.size(0), value_dim = num_v_heads * head_v_dim;
    MI_CHECK(int64_t(batch.state_slots.size()) == batch.num_seqs(),
             "GatedDeltaNet: {} state slots for {} sequences", batch.state_slots.size(),
             batch.num_seqs());
    MI_CHECK(batch.snapshot_rows.size() == batch.snapshot_slots.size() &&
                 (batch.snapshot_rows.empty() ||
                  int64_t(batch.snapshot_rows.size()) == batch.num_seqs()),
             "GatedDeltaNet: {} snapshot rows for {} sequences", batch.snapshot_rows.size(),
             batch.num_seqs());
    const int32_t* rows = batch.snapshot_rows.empty() ? nullptr : batch.snapshot_rows.data();
    const int32_t* slots = batch.snapshot_slots.empty() ? nullptr : batch.snapshot_slots.data();
    Tensor qkv = in_proj_qkv.forward(x);  // [n, conv_dim]
    cpu::causal_conv1d_silu({.x = qkv.data<float>(),
                             .weight = conv1d.data<float>(),
                             .query_start = batch.query_start.data(),
                             .state_slots = batch.state_slots.data(),
                             .num_seqs = batch.num_seqs(),
                             .channels = conv_dim,
                             .kernel_len = conv1d.size(1),
                             .conv_state = conv_state.data<float>(),
                             .out = qkv.data<float>(),
                             .snapshot_rows = rows,
                             .snapshot_slots = slots});
    const Tensor a = in_proj_a.forward(x), b = in_proj_b.forward(x);  // [n, num_v_heads]
    Tensor g = Tensor::zeros({n, num_v_heads}, DType::kF32);
    Tensor beta = Tensor::zeros({n, num_v_heads}, DType::kF32);
    cpu::gdn_gates(a.data<float>(), b.data<float>(), A_log.data<float>(), dt_bias.data<float>(), n,
                   num_v_heads, g.data<float>(), beta.data<float>());
    Tensor o = Tensor::zeros({n, value_dim}, DType::kF32);
    cpu::gated_delta_rule_chunked({.qkv = qkv.data<float>(),
                                   .g = g.data<float>(),
                                   .beta = beta.data<float>(),
                                   .query_start = batch.query_start.data(),
                                   .state_slots = batch.state_slots.data(),
                                   .num_seqs = batch.num_seqs(),
                                   .num_k_heads = num_k_heads,
                                   .num_v_heads = num_v_heads,
                                   .head_k_dim = head_k_dim,
                                   .head_v_dim = head_v_dim,
                                   .state = recurrent_state.data<float>(),
                                   .out = o.data<float>(),
                                   .snapshot_rows = rows,
                                   .snapshot_slots = slots});
    const Tensor z = in_proj_z.forward(x);  // [n, value_dim]
    cpu::rms_norm_gated(o.data<float>(), z.data<float>(), norm.data<float>(), n * num_v_heads,
                        head_v_dim, eps, o.data<float>());
    return out_proj.forward(o);
}

}  // namespace miniinfer
