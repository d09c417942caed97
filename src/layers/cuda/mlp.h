// The dense MLP block on the GPU: gate_up GEMM (column-parallel) -> SiLU(gate) * up -> down
// GEMM (row-parallel). Qwen3-MoE's sparse block (router -> top-k experts) is the next block to
// join this folder, as moe.h.
#pragma once

#include <cstdint>

#include "layers/cuda/linear.h"
#include "layers/cuda/step.h"

namespace miniinfer::cuda {

struct Mlp {
    Linear gate_up;  // [2 * inter, hidden]: gate rows, then up rows (this rank's inter)
    Linear down;     // [hidden, inter]

    struct Buffers {
        Tensor gate_up;  // [max_tokens, 2 * inter]
        Tensor act;      // [max_tokens, inter]
    };
    Buffers allocate_buffers(int64_t max_tokens) const;

    // y = mlp(x), x the output of the norm `input` (run by gate_up).
    void forward(const AddRmsNorm& input, Tensor& y, const Step& step, Buffers& buf) const;
};

}  // namespace miniinfer::cuda
