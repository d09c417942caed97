#include "layers/cuda/linear.h"

#include "kernels/cuda/gemm/gemm.h"
#include "kernels/cuda/norm/rms_norm.h"

namespace miniinfer::cuda {

namespace {

// One GEMM of `l` under its shard rule: run(bias to add, or null), then a row-parallel layer's
// all-reduce, whose bias only rank 0 adds.
template <class Run>
void sharded(const Linear& l, Tensor& y, const Step& step, Run&& run) {
    const bool reduce = l.shard == Shard::kRow && l.comm != nullptr;
    const bool add_bias = l.bias.defined() && (!reduce || l.comm->rank() == 0);
    run(add_bias ? &l.bias : nullptr);
    if (reduce) l.comm->all_reduce_sum(y, step.stream);
}

}  // namespace

void Linear::forward(const Tensor& x, Tensor& y, const Step& step) const {
    sharded(*this, y, step, [&](const Tensor* b) {
        if (weight_scale.defined())
            step.gemm.run_fp8(x, weight, weight_scale, b, y, step.stream);
        else
            step.gemm.run(x, weight, b, y, step.stream);
    });
}

void Linear::forward(const AddRmsNorm& in, Tensor& y, const Step& step) const {
    sharded(*this, y, step, [&](const Tensor* b) {
        if (weight_scale.defined())
            step.gemm.run_normed_fp8(in, weight, weight_scale, b, y, step.stream);
        else
            step.gemm.run_normed(in, weight, b, y, step.stream);
    });
}

void Linear::forward_silu_mul(const Tensor& gate_up, Tensor& act, Tensor& y,
                              const Step& step) const {
    sharded(*this, y, step, [&](const Tensor* b) {
        if (weight_scale.defined())
            step.gemm.run_silu_mul_fp8(gate_up, weight, weight_scale, b, y, step.stream);
        else
            step.gemm.run_silu_mul(gate_up, act, weight, b, y, step.stream);
    });
}

AddRmsNorm RmsNorm::before(const Tensor* delta, const Tensor& residual, Tensor* residual_out,
                           Tensor& normed) const {
    return {.delta = delta,
            .residual = &residual,
            .residual_out = residual_out,
            .weight = &weight,
            .eps = eps,
            .normed = &normed};
}

void RmsNorm::forward(const Tensor& x, Tensor* residual, Tensor& out, cudaStream_t stream) const {
    add_rms_norm(x, residual, weight, eps, out, stream);
}

}  // namespace miniinfer::cuda
