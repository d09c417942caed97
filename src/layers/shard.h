// How a weight [out_features, in_features] (a bias: [out_features]) splits over the
// tensor-parallel ranks, Megatron's rules. The loader cuts the checkpoint by them
// (models/weights.h) and the GPU's Linear reduces by them (layers/cuda/linear.h).
#pragma once

namespace miniinfer {

enum class Shard {
    kReplicated,  // every rank holds all of it
    kColumn,      // column-parallel linear: rank r holds a slice of the rows (its outputs)
    kRow,         // row-parallel linear: rank r holds a slice of the columns (its inputs); the
                  // outputs are partial sums, all-reduced across ranks, the bias added once
};

}  // namespace miniinfer
