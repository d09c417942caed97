// The pieces of ModelConfig::from_json that live in their own files (model_config.cpp reads
// the top level and calls these). Each throws Error naming `where` and the field.
#pragma once

#include <string>

#include "config/model_config.h"
#include "core/json.h"

namespace miniinfer::config_parsing {

// rope_theta, rope_parameters / rope_scaling (which must agree) and, for the hybrids, the
// partial rotary and mRoPE sections. Needs cfg.arch, head_dim and max_position_embeddings.
// (rope_config.cpp)
void parse_rope(const Json& json, const std::string& where, ModelConfig& cfg);

// The hybrids' layer_types, Gated DeltaNet sizes, gated attention and zero-centred norms.
// Needs cfg.num_layers. (hybrid_config.cpp)
void parse_hybrid(const Json& json, const std::string& where, ModelConfig& cfg);

void require_positive(int64_t value, const char* field, const std::string& where);

}  // namespace miniinfer::config_parsing
