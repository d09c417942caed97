#include "layers/cuda/gated_delta_net.h"

#include "core/cuda/device_buffer.h"
#include "kernels/cuda/gdn/gated_delta_net.h"

namespace miniinfer::cuda {

GatedDeltaNet::Buffers GatedDeltaNet::allocate_buffers(int64_t max_tokens) const {
    return {.proj = device_tensor({max_tokens, in_proj.weight.size(0)}, DType::kBF16),
            .qkv = device_tensor({max_tokens, conv_dim()}, DType::kBF16),
            .out = device_tensor({max_tokens, value_dim()}, DType::kBF16)};
}

void GatedDeltaNet::forward(const AddRmsNorm& input, Tensor& y, StateLayer& state, const Step& step,
                            Buffers& buf) const {
    const StepInputs& in = step.in;
    const int64_t n = in.num_tokens;
    Tensor proj = rows(buf.proj, n), qkv = rows(buf.qkv, n), out = rows(buf.out, n);
    in_proj.forward(input, proj, step);
    const GdnSequences seqs{.query_start = &in.query_start,
                            .positions = &in.positions,
                            .state_slots = &in.state_slots,
                            .snapshot_rows = &in.snapshot_rows,
                            .snapshot_slots = &in.snapshot_slots};
    causal_conv1d_silu(proj, conv1d, seqs, state.conv, qkv, step.stream);
    const int64_t z_col = conv_dim(), b_col = z_col + value_dim();
    gated_delta_rule({.qkv = &qkv,
                      .zba = &proj,
                      .z_col = z_col,
                      .b_col = b_col,
                      .a_col = b_col + num_v_heads,
                      .A_log = &A_log,
                      .dt_bias = &dt_bias,
                      .norm_weight = &norm,
                      .norm_eps = eps,
                      .num_k_heads = num_k_heads,
                      .num_v_heads = num_v_heads,
                      .head_k_dim = head_k_dim,
                      .head_v_dim = head_v_dim,
                      .state = &state.recurrent,
                      .out = &out},
                     seqs, step.stream);
    out_proj.forward(out, y, step);
}

}  // namespace miniinfer::cuda
