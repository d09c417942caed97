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

void RmsNorm::forward(const Tensor& x, Tensor* residual, Tensor& out, cudaStream_t stream) const {
    add_rms_norm(x, residual, weight, eps, out, stream);
}

}  // namespace miniinfer::cuda
