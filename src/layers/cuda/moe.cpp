#include "layers/cuda/moe.h"

#include <algorithm>
#include "core/cuda/device_buffer.h"

#include "kernels/cuda/elementwise/fp8_quantize.h"
#include "kernels/cuda/elementwise/gates.h"
#include "kernels/cuda/elementwise/silu_mul.h"
#include "kernels/cuda/gemm/fp8_gemm.h"
#include "kernels/cuda/gemm/grouped_gemm.h"
#include "kernels/cuda/moe/moe_gemv.h"
#include "kernels/cuda/moe/moe_routing.h"

namespace miniinfer::cuda {

Moe::Buffers Moe::allocate_buffers(int64_t max_tokens) const {
    const int64_t E = num_experts(), hidden = experts_down.size(1), inter = experts_down.size(2);
    // Any step up to max_tokens fits: its rows with its own tile are at most these.
    const int64_t R = moe_max_rows(max_tokens, top_k, E, kGroupedGemmMaxTileRows);
    // The router's logits in f32: bf16 logits flip the choice between near-equal experts
    // (Hugging Face's fp32 model is the reference), and the router is one small GEMM a layer.
    Buffers buf{.logits = device_tensor({max_tokens, E}, DType::kF32),
                .topk_ids = device_tensor({max_tokens, top_k}, DType::kI32),
                .topk_weights = device_tensor({max_tokens, top_k}, DType::kF32),
                .slot_row = device_tensor({max_tokens, top_k}, DType::kI32),
                .permute_workspace =
                    device_tensor({moe_permute_workspace_elems(max_tokens, top_k, E)}, DType::kI32),
                .expert_offsets = device_tensor({E + 1}, DType::kI32),
                .row_token = device_tensor({R}, DType::kI32),
                .gate_up = device_tensor({R, 2 * inter}, DType::kBF16),
                .act = device_tensor({R, inter}, DType::kBF16),
                .x_q = {},
                .x_scales = {},
                .act_q = {},
                .act_scales = {},
                .y_perm = device_tensor({R, hidden}, DType::kBF16),
                .shared = {},
                .shared_out = {}};
    if (fp8()) {
        buf.x_q = device_tensor({max_tokens, hidden}, DType::kF8E4M3);
        buf.x_scales = device_tensor({max_tokens, (hidden + 127) / 128}, DType::kF32);
        buf.act_q = device_tensor({R, inter}, DType::kF8E4M3);
        buf.act_scales = device_tensor({R, (inter + 127) / 128}, DType::kF32);
    }
    if (shared.gate_up.weight.defined()) {
        buf.shared = shared.allocate_buffers(max_tokens);
        buf.shared_out = device_tensor({max_tokens, hidden}, DType::kBF16);
    }
    return buf;
}

namespace {

// The experts of many tokens: permute the (token, choice) pairs expert-contiguous, padded to the
// step's row tile, then one grouped GEMM each for gate_up (reading x through the permutation)
// and down, and the weighted combine back to token order.
void grouped_experts(const Moe& m, const Tensor& x, const Tensor& ids, const Tensor& weights,
                     Tensor& y, cudaStream_t st, Moe::Buffers& buf) {
    const int64_t n = ids.size(0);  // the step's tokens
    const int64_t tile = grouped_gemm_tile_rows(n * m.top_k, m.num_experts());
    const int64_t R = moe_max_rows(n, m.top_k, m.num_experts(), tile);
    Tensor slot_row = rows(buf.slot_row, n), row_token = rows(buf.row_token, R);
    Tensor act = rows(buf.act, R), y_perm = rows(buf.y_perm, R);
    moe_permute(ids, m.num_experts(), tile, buf.permute_workspace, buf.expert_offsets, row_token,
                slot_row, st);
    // SiLU·mul in the GEMM's epilogue up to m.silu_tile rows: at larger tiles (prefill, and the
    // wgmma kernel's 64-row decode tile) it slows the GEMM by more than the separate kernel costs
    // (bench/RESULTS.md#moe-silu-tile).
    if (tile <= m.silu_tile) {
        grouped_gemm(x, &row_token, m.experts_gate_up, buf.expert_offsets, tile,
                     GroupedGemmEpilogue::kSiluMul, act, st);
    } else {
        Tensor gate_up = rows(buf.gate_up, R);
        grouped_gemm(x, &row_token, m.experts_gate_up, buf.expert_offsets, tile,
                     GroupedGemmEpilogue::kStore, gate_up, st);
        // Only the rows the permutation filled (expert_offsets[E]), not the worst case R.
        silu_mul(gate_up, act, st, buf.expert_offsets.data<int32_t>() + m.num_experts());
    }
    // act's padding rows (row_token -1) are not read: the GEMM zeroes them in shared memory.
    grouped_gemm(act, &row_token, m.experts_down, buf.expert_offsets, tile,
                 GroupedGemmEpilogue::kStore, y_perm, st, GroupedGemmRows::kPermuted);
    moe_combine(y_perm, slot_row, weights, y, st);
}

// grouped_experts for FP8 experts: x quantized once per token, gate_up on the FP8 grouped GEMM,
// SiLU·mul fused into act's quantization, down on the FP8 grouped GEMM. Its tiles are the wgmma
// kernel's (64 or 128 rows): at decode sizes the weights' bytes decide, not the padding.
void grouped_experts_fp8(const Moe& m, const Tensor& x, const Tensor& ids, const Tensor& weights,
                         Tensor& y, cudaStream_t st, Moe::Buffers& buf) {
    const int64_t n = ids.size(0);
    const int64_t tile =
        std::max<int64_t>(64, grouped_gemm_tile_rows(n * m.top_k, m.num_experts()));
    const int64_t R = moe_max_rows(n, m.top_k, m.num_experts(), tile);
    Tensor slot_row = rows(buf.slot_row, n), row_token = rows(buf.row_token, R);
    Tensor gate_up = rows(buf.gate_up, R), y_perm = rows(buf.y_perm, R);
    Tensor x_q = rows(buf.x_q, n), x_scales = rows(buf.x_scales, n);
    Tensor act_q = rows(buf.act_q, R), act_scales = rows(buf.act_scales, R);
    moe_permute(ids, m.num_experts(), tile, buf.permute_workspace, buf.expert_offsets, row_token,
                slot_row, st);
    fp8_quantize(x, x_q, x_scales, st);
    fp8_grouped_gemm(x_q, x_scales, &row_token, m.experts_gate_up, m.experts_gate_up_scale,
                     buf.expert_offsets, tile, gate_up, st);
    silu_mul_fp8_quantize(gate_up, act_q, act_scales, st,
                          buf.expert_offsets.data<int32_t>() + m.num_experts());
    fp8_grouped_gemm(act_q, act_scales, &row_token, m.experts_down, m.experts_down_scale,
                     buf.expert_offsets, tile, y_perm, st, GroupedGemmRows::kPermuted);
    moe_combine(y_perm, slot_row, weights, y, st);
}

}  // namespace

void Moe::forward(const AddRmsNorm& input, Tensor& y, const Step& step, Buffers& buf) const {
    const int64_t n = step.in.num_tokens;
    const cudaStream_t st = step.stream;
    Tensor logits = rows(buf.logits, n), ids = rows(buf.topk_ids, n);
    Tensor weights = rows(buf.topk_weights, n);
    router.forward(input, logits, step);
    const Tensor& x = *input.normed;
    moe_route(logits, top_k, renormalize, ids, weights, st);
    if (fp8()) {
        if (n * top_k <= kMoeGemvMaxPairs &&
            moe_gemv_fp8_supported(experts_gate_up, experts_down)) {
            Tensor act = rows(buf.act, n * top_k);
            moe_gemv_gate_up_silu_fp8(x, ids, experts_gate_up, experts_gate_up_scale, act, st);
            moe_gemv_down_combine_fp8(act, ids, weights, experts_down, experts_down_scale, y, st);
        } else {
            grouped_experts_fp8(*this, x, ids, weights, y, st, buf);
        }
    } else if (n * top_k <= kMoeGemvMaxPairs && moe_gemv_supported(experts_gate_up, experts_down)) {
        // A few tokens: stream the chosen experts' rows, no permutation (moe_gemv.h).
        Tensor act = rows(buf.act, n * top_k);
        moe_gemv_gate_up_silu(x, ids, experts_gate_up, act, st);
        moe_gemv_down_combine(act, ids, weights, experts_down, y, st);
    } else {
        grouped_experts(*this, x, ids, weights, y, st, buf);
    }
    if (shared.gate_up.weight.defined()) {
        Tensor gate_up = rows(buf.shared.gate_up, n), act = rows(buf.shared.act, n);
        Tensor out = rows(buf.shared_out, n);
        shared.gate_up.forward(x, gate_up, step);
        shared.down.forward_silu_mul(gate_up, act, out, step);
        add_gated_shared_expert(x, shared_gate, out, y, st);
    }
    if (comm) comm->all_reduce_sum(y, st);
}

}  // namespace miniinfer::cuda
