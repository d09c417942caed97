#include "layers/cuda/attention.h"

#include "core/cuda/device_buffer.h"
#include "kernels/cuda/elementwise/gates.h"
#include "kernels/cuda/norm/qk_norm_rope.h"
#include "layers/cuda/attention_backend.h"

namespace miniinfer::cuda {

Attention::Buffers Attention::allocate_buffers(int64_t max_tokens) const {
    return {.qkv = device_tensor({max_tokens, qkv.weight.size(0)}, DType::kBF16),
            .q = device_tensor({max_tokens, num_heads, head_dim}, DType::kBF16),
            .out = device_tensor({max_tokens, num_heads * head_dim}, DType::kBF16)};
}

void Attention::forward(const AddRmsNorm& input, Tensor& y, KvLayer& kv, const Step& step,
                        Buffers& buf) const {
    const StepInputs& in = step.in;
    Tensor qkv_out = rows(buf.qkv, in.num_tokens), q = rows(buf.q, in.num_tokens);
    Tensor out = rows(buf.out, in.num_tokens);
    qkv.forward(input, qkv_out, step);
    const Tensor* qn = q_norm.defined() ? &q_norm : nullptr;
    const Tensor* kn = k_norm.defined() ? &k_norm : nullptr;
    // A decode step on a backend that can: the decode kernel normalises, rotates and stores
    // itself (AttentionParams::qkv_step), one kernel fewer.
    const bool qkv_in_decode = in.max_query_len == 1 && !output_gate &&
                               (rotary_dim == 0 || rotary_dim == head_dim) &&
                               step.attention.decode_takes_qkv_step(in.num_seqs);
    const DecodeQkvStep qkv_step{.qkv = &qkv_out,
                                 .q_norm = qn,
                                 .k_norm = kn,
                                 .eps = eps,
                                 .positions = &in.positions,
                                 .inv_freq = &inv_freq,
                                 .slot_mapping = &in.slots,
                                 .rope_scale = rope_scale};
    if (!qkv_in_decode)
        qk_norm_rope_store(qkv_out, qn, kn, eps, in.positions, inv_freq, in.slots, num_heads,
                           num_kv_heads, head_dim, q, kv.k, kv.v, step.stream, kv.k_scale,
                           kv.v_scale, rope_scale, rotary_dim);
    const AttentionParams params =
        with_step_sequences({.q = &q,
                             .k_cache = &kv.k,
                             .v_cache = &kv.v,
                             .scale = scale,
                             .out = &out,
                             .k_scale = kv.k_scale,
                             .v_scale = kv.v_scale,
                             .qkv_step = qkv_in_decode ? &qkv_step : nullptr},
                            in);
    step.attention.run(params, step.stream);
    if (output_gate)
        mul_sigmoid(out, qkv_out, (num_heads + 2 * num_kv_heads) * head_dim, step.stream);
    o_proj.forward(out, y, step);
}

}  // namespace miniinfer::cuda
