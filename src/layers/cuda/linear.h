// The GPU blocks' two simplest parts: a linear layer with its tensor-parallel shard rule
// (layers/shard.h: a row-parallel layer sums its output over the ranks through the
// communicator and adds its bias on rank 0 only), and RMSNorm with the residual add fused in.
#pragma once

#include <cuda_runtime.h>

#include "core/tensor.h"
#include "distributed/communicator.h"
#include "kernels/cuda/norm/rms_norm.h"
#include "layers/cuda/step.h"
#include "layers/shard.h"

namespace miniinfer::cuda {

struct Linear {
    Tensor weight;  // [out, in] bf16 on the device (this rank's shard), or e4m3 with weight_scale
    Tensor bias;    // [out] bf16 or undefined
    Shard shard = Shard::kReplicated;
    Communicator* comm = nullptr;  // row-parallel layers all-reduce through it; null without TP
    // A block-scaled FP8 checkpoint's projection: weight's f32 scales [ceil(out / 128),
    // ceil(in / 128)] (Gemm::run_fp8); undefined for a bf16 weight.
    Tensor weight_scale;

    // y[n, out] = x[n, in] · weightᵀ (+ bias), summed over ranks for a row-parallel layer.
    void forward(const Tensor& x, Tensor& y, const Step& step) const;
    // The same for x = *in.normed, after the residual add + RMSNorm `in` (RmsNorm::before),
    // which runs inside the GEMV at small batches (Gemm::run_normed); *in.normed holds x after.
    void forward(const AddRmsNorm& in, Tensor& y, const Step& step) const;
    // The same for x = silu_mul(gate_up), into act first or, at small batches, inside the GEMV
    // (Gemm::run_silu_mul; act is then left as it was; an FP8 weight never writes act).
    void forward_silu_mul(const Tensor& gate_up, Tensor& act, Tensor& y, const Step& step) const;
};

struct RmsNorm {
    Tensor weight;  // [dim] bf16
    float eps = 1e-6f;
    // out = norm(x); with a residual: residual += x first, then out = norm(residual).
    void forward(const Tensor& x, Tensor* residual, Tensor& out, cudaStream_t stream) const;
    // This norm as the input of a block, run by the block's first linear layer: normed =
    // norm(residual + *delta) with the sum stored to residual_out (another buffer than
    // residual: blocks of a fused GEMV read residual while one of them writes the sum), or
    // without delta normed = norm(residual).
    AddRmsNorm before(const Tensor* delta, const Tensor& residual, Tensor* residual_out,
                      Tensor& normed) const;
};

}  // namespace miniinfer::cuda
