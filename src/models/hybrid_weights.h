// The hybrid models' parts of the weight assembly (weights.cpp's assemble calls them; not a
// public header). The layouts they write are documented in models/weights.h. World 1 only:
// check_target refuses tensor parallelism for the hybrids.
#pragma once

#include <string>

#include "models/weight_assembler.h"

namespace miniinfer {

// A gated full-attention layer's [q; k; v; gate] from q_proj's per-head [q_h; gate_h] rows and
// k_proj, v_proj. attn: "<prefix>layers.<l>.self_attn.".
Tensor assemble_gated_qkv(const ModelConfig& c, const std::string& attn, WeightAssembler& a);

// A Gated DeltaNet layer from either projection layout. p: "<prefix>layers.<l>.linear_attn.".
LinearAttentionWeights assemble_linear_attention(const ModelConfig& c,
                                                 const CheckpointLayout& layout,
                                                 const std::string& p, WeightAssembler& a);

// Qwen3.5's fused experts (experts.gate_up_proj, experts.down_proj) into lw.experts_*.
// mlp: "<prefix>layers.<l>.mlp.".
void assemble_fused_experts(const ModelConfig& c, const std::string& mlp, WeightAssembler& a,
                            LayerWeights& lw);

// The shared expert and its gate into lw.shared_*.
void assemble_shared_expert(const ModelConfig& c, const std::string& mlp, WeightAssembler& a,
                            LayerWeights& lw);

}  // namespace miniinfer
