#include "layers/cuda/linear.h"

#include "kernels/cuda/gemm.h"
#include "kernels/cuda/rms_norm.h"

namespace miniinfer::cuda {

void Linear::forward(const Tensor& x, Tensor& y, const Step& step) const {
    const bool reduce = shard == Shard::kRow && comm != nullptr;
    const bool add_bias = bias.defined() && (!reduce || comm->rank() == 0);
    step.gemm.run(x, weight, add_bias ? &bias : nullptr, y, step.stream);
    if (reduce) comm->all_reduce_sum(y, step.stream);
}

void Linear::forward(const AddRmsNorm& in, Tensor& y, const Step& step) const {
    const bool reduce = shard == Shard::kRow && comm != nullptr;
    const bool add_bias = bias.defined() && (!reduce || comm->rank() == 0);
    step.gemm.run_normed(in, weight, add_bias ? &bias : nullptr, y, step.stream);
    if (reduce) comm->all_reduce_sum(y, step.stream);
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
