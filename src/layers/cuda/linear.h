// The GPU blocks' two simplest parts: a linear layer with its tensor-parallel shard rule, and
// RMSNorm (with the residual add fused in).
#pragma once

#include <cuda_runtime.h>

#include "core/tensor.h"
#include "layers/cuda/communicator.h"
#include "layers/cuda/step.h"

namespace miniinfer::cuda {

// How a linear layer's weight is split across tensor-parallel ranks (Megatron's rules; the
// loader cuts the checkpoint the same way, models/weights.h):
//   kColumn: each rank holds a slice of the output rows; its output is that slice of y.
//   kRow: each rank holds a slice of the input columns and sees that slice of x; its output is
//     a partial sum, all-reduced across ranks. The bias is added once (rank 0).
//   kReplicated: every rank holds the whole weight.
enum class Shard { kReplicated, kColumn, kRow };

struct Linear {
    Tensor weight;  // [out, in] bf16 on the device: this rank's shard
    Tensor bias;    // [out] bf16 or undefined
    Shard shard = Shard::kReplicated;
    Communicator* comm = nullptr;  // row-parallel layers all-reduce through it; null without TP

    // y[n, out] = x[n, in] · weightᵀ (+ bias), summed over ranks for a row-parallel layer.
    void forward(const Tensor& x, Tensor& y, const Step& step) const;
};

struct RmsNorm {
    Tensor weight;  // [dim] bf16
    float eps = 1e-6f;
    // out = norm(x); with a residual: residual += x first, then out = norm(residual).
    void forward(const Tensor& x, Tensor* residual, Tensor& out, cudaStream_t stream) const;
};

}  // namespace miniinfer::cuda
