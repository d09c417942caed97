// The FP8 parts of the weight assembly (weights.cpp's assemble calls them; not a public header):
// a projection whose modules the config quantizes keeps its e4m3 weight and gets its
// weight_scale_inv fused and sharded alike (models/weights.h, LayerWeights' *_scale).
#pragma once

#include <vector>

#include "models/weight_assembler.h"

namespace miniinfer {

struct ProjectionWeights {
    Tensor weight;  // the fused weight: the target's dtype, or e4m3 when quantized
    Tensor scale;   // its f32 block scales when quantized, else undefined
};

// WeightAssembler::fused over `parts` (each "<module>.weight"). When config.quantization
// quantizes their modules the weight is written as e4m3 and the parts'
// "<module>.weight_scale_inv" are fused alike: each part's scale block is the 128 x 128 blocks
// its weight block covers, viewed [view[0], rows / view[0], cols] when `view` is 3-D (experts).
// Throws Error naming the tensor where a part mixes quantized and plain modules, or where a
// fused part or a rank's shard does not start and end on a block boundary (a block would be
// split: its one scale cannot serve two ranks or two parts).
ProjectionWeights assemble_projection(const ModelConfig& config, const WeightTarget& target,
                                      WeightAssembler& a,
                                      const std::vector<WeightAssembler::Part>& parts,
                                      const Shape& view = {});

}  // namespace miniinfer
