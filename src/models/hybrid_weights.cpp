#include "models/hybrid_weights.h"

#include <set>

#include <fmt/format.h>

namespace miniinfer {
namespace {

using Parts = std::vector<WeightAssembler::Part>;

// Rows [offset, offset + len) of each of `groups` consecutive groups of `stride` rows: one part
// per group, in group order.
Parts group_rows(const std::string& name, const Shape& shape, int64_t groups, int64_t stride,
                 int64_t offset, int64_t len) {
    Parts parts;
    for (int64_t g = 0; g < groups; ++g)
        parts.push_back({name,
                         shape,
                         Shard::kReplicated,
                         {},
                         RowRange{g * stride + offset, g * stride + offset + len}});
    return parts;
}

Parts concat(std::initializer_list<Parts> lists) {
    Parts out;
    for (const Parts& l : lists) out.insert(out.end(), l.begin(), l.end());
    return out;
}

}  // namespace

Tensor assemble_gated_qkv(const ModelConfig& c, const std::string& attn, WeightAssembler& a) {
    const int64_t H = c.hidden_size, D = c.head_dim, q = c.q_size(), kv = c.kv_size();
    const std::string q_proj = attn + "q_proj.weight";
    const Shape q_shape = {2 * q, H};  // per head: D query rows, then D gate rows
    return a.fused(concat({group_rows(q_proj, q_shape, c.num_heads, 2 * D, 0, D),
                           {{attn + "k_proj.weight", {kv, H}}, {attn + "v_proj.weight", {kv, H}}},
                           group_rows(q_proj, q_shape, c.num_heads, 2 * D, D, D)}));
}

LinearAttentionWeights assemble_linear_attention(const ModelConfig& c,
                                                 const CheckpointLayout& layout,
                                                 const std::string& p, WeightAssembler& a) {
    const LinearAttentionConfig& g = c.linear_attention;
    const int64_t H = c.hidden_size, nk = g.num_key_heads, nv = g.num_value_heads,
                  dk = g.key_head_dim, dv = g.value_head_dim;
    LinearAttentionWeights w;
    if (layout.grouped_gdn) {
        // Per key head: [q (dk); k (dk); v (r dv); z (r dv)] and [b (r); a (r)], r value heads
        // per key head. Taking each part from every group in turn gives Qwen3.5's order.
        const int64_t r = nv / nk, stride = 2 * dk + 2 * r * dv;
        const std::string qkvz = p + "in_proj_qkvz.weight", ba = p + "in_proj_ba.weight";
        const Shape qkvz_shape = {nk * stride, H}, ba_shape = {nk * 2 * r, H};
        w.in_proj_qkv = a.fused(concat({group_rows(qkvz, qkvz_shape, nk, stride, 0, dk),
                                        group_rows(qkvz, qkvz_shape, nk, stride, dk, dk),
                                        group_rows(qkvz, qkvz_shape, nk, stride, 2 * dk, r * dv)}));
        w.in_proj_z = a.fused(group_rows(qkvz, qkvz_shape, nk, stride, 2 * dk + r * dv, r * dv));
        w.in_proj_b = a.fused(group_rows(ba, ba_shape, nk, 2 * r, 0, r));
        w.in_proj_a = a.fused(group_rows(ba, ba_shape, nk, 2 * r, r, r));
    } else {
        w.in_proj_qkv = a.single(p + "in_proj_qkv.weight", {g.conv_dim(), H});
        w.in_proj_z = a.single(p + "in_proj_z.weight", {g.value_dim(), H});
        w.in_proj_b = a.single(p + "in_proj_b.weight", {nv, H});
        w.in_proj_a = a.single(p + "in_proj_a.weight", {nv, H});
    }
    // nn.Conv1d's [out_channels, in_channels / groups = 1, kernel]: [C, K] once loaded.
    w.conv1d = a.single(p + "conv1d.weight", {g.conv_dim(), 1, g.conv_kernel_dim});
    w.A_log = a.single(p + "A_log", {nv});
    w.dt_bias = a.single(p + "dt_bias", {nv});
    w.norm = a.single(p + "norm.weight", {dv});
    w.out_proj = a.single(p + "out_proj.weight", {H, g.value_dim()});
    return w;
}

void assemble_fused_experts(const ModelConfig& c, const std::string& mlp, WeightAssembler& a,
                            LayerWeights& lw) {
    const int64_t E = c.num_experts, I = c.moe_intermediate_size, H = c.hidden_size;
    // Already our layout: gate rows then up rows per expert; down [hidden, I] per expert.
    lw.experts_gate_up =
        a.single(mlp + "experts.gate_up_proj", {E, 2 * I, H}, Shard::kReplicated, {E, 2 * I, H});
    lw.experts_down = a.single(mlp + "experts.down_proj", {E, H, I}, Shard::kReplicated, {E, H, I});
}

void assemble_shared_expert(const ModelConfig& c, const std::string& mlp, WeightAssembler& a,
                            LayerWeights& lw) {
    const int64_t S = c.shared_expert_intermediate_size, H = c.hidden_size;
    const std::string se = mlp + "shared_expert.";
    lw.shared_gate_up =
        a.fused({{se + "gate_proj.weight", {S, H}}, {se + "up_proj.weight", {S, H}}});
    lw.shared_down = a.single(se + "down_proj.weight", {H, S});
    lw.shared_expert_gate = a.single(mlp + "shared_expert_gate.weight", {1, H});
}

CheckpointLayout default_layout(const ModelConfig& config) {
    CheckpointLayout layout;
    if (config.has_vision) layout.prefix = "model.language_model.";
    layout.fused_experts = config.arch == Arch::kQwen35Moe;
    layout.grouped_gdn = config.arch == Arch::kQwen3Next;
    return layout;
}

CheckpointLayout detect_layout(const ModelConfig& config, const Checkpoint& ckpt) {
    CheckpointLayout layout = default_layout(config);
    if (!config.is_hybrid()) return layout;
    for (const char* prefix : {"model.", "model.language_model."})
        if (!ckpt.contains(layout.prefix + "embed_tokens.weight") &&
            ckpt.contains(prefix + std::string("embed_tokens.weight")))
            layout.prefix = prefix;
    for (int64_t l = 0; l < config.num_layers; ++l) {
        if (!config.is_moe_layer(l)) continue;
        const std::string experts = fmt::format("{}layers.{}.mlp.experts.", layout.prefix, l);
        if (ckpt.contains(experts + "gate_up_proj")) layout.fused_experts = true;
        if (ckpt.contains(experts + "0.gate_proj.weight")) layout.fused_experts = false;
        break;
    }
    for (int64_t l = 0; l < config.num_layers; ++l) {
        if (!config.is_linear_attention_layer(l)) continue;
        const std::string p = fmt::format("{}layers.{}.linear_attn.", layout.prefix, l);
        if (ckpt.contains(p + "in_proj_qkvz.weight")) layout.grouped_gdn = true;
        if (ckpt.contains(p + "in_proj_qkv.weight")) layout.grouped_gdn = false;
        break;
    }
    return layout;
}

UnusedTensors unused_tensors(const Checkpoint& ckpt,
                             const std::vector<std::pair<std::string, Shape>>& expected) {
    std::set<std::string> used;
    for (const auto& [name, shape] : expected) used.insert(name);
    UnusedTensors out;
    for (const std::string& name : ckpt.names()) {
        if (used.count(name) || name.ends_with("self_attn.k_scale") ||
            name.ends_with("self_attn.v_scale"))
            continue;
        if (name.starts_with("model.visual."))
            ++out.vision;
        else if (name.starts_with("mtp."))
            ++out.mtp;
        else
            ++out.other;
    }
    return out;
}

}  // namespace miniinfer
