#include "layers/cuda/mlp.h"

#include "core/cuda/device_buffer.h"

namespace miniinfer::cuda {

Mlp::Buffers Mlp::allocate_buffers(int64_t max_tokens) const {
    const int64_t inter = down.weight.size(1);
    return {.gate_up = device_tensor({max_tokens, 2 * inter}, DType::kBF16),
            .act = device_tensor({max_tokens, inter}, DType::kBF16)};
}

void Mlp::forward(const AddRmsNorm& input, Tensor& y, const Step& step, Buffers& buf) const {
    Tensor gu = rows(buf.gate_up, step.in.num_tokens), act = rows(buf.act, step.in.num_tokens);
    gate_up.forward(input, gu, step);
    down.forward_silu_mul(gu, act, y, step);
}

}  // namespace miniinfer::cuda
