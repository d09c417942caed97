// The fused step between the QKV GEMM and attention (see qk_norm_rope.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace miniinfer::cuda {

// For every token t of the batch, reading its row of the QKV GEMM output:
//   q_out[t, h]                    = rope(rms_norm_per_head(q[t, h], q_norm), positions[t])
//   k_cache[slot_mapping[t], kvh]  = rope(rms_norm_per_head(k[t, kvh], k_norm), positions[t])
//   v_cache[slot_mapping[t], kvh]  = v[t, kvh]
// qkv: [n, ≥ (num_heads + 2 * num_kv_heads) * head_dim] bf16 (q heads, then k heads, then v
//   heads; columns after them, such as gated attention's gates, are not read)
// q_norm, k_norm: [head_dim] bf16, or both nullptr (Qwen2: no per-head norm)
// positions: [n] i32; inv_freq: [rotary_dim / 2] f32 (the CPU Rotary's values, uploaded once);
//   rotary_dim < head_dim (0: head_dim): partial rotary, only a head's first rotary_dim elements
//   rotate (the hybrids);
//   rope_scale: every cos and sin is multiplied by it (Rotary::attention_scale, YaRN's; > 0)
// slot_mapping: [n] i32, slot = page * page_size + offset, every slot valid and distinct
// k_cache, v_cache: [num_pages, page_size, num_kv_heads, head_dim] bf16 (mutated at the slots
//   only), or u8 for an FP8 cache: each K/V value x stored as e4m3(x / scale) (kv_fp8.cuh), with
//   k_scale / v_scale (> 0; ignored for bf16)
// q_out: [n, num_heads, head_dim] bf16
// Rotary is NeoX style (the two halves of a head rotate together). Rounding as Hugging Face on
// bf16: the norm in fp32, normalised value rounded to bf16, times the weight rounded to bf16;
// the rotation in fp32 on those bf16 values, angle = float(pos) * inv_freq, then one rounding.
// head_dim must be 64, 128 or 256. All tensors contiguous on the CUDA device.
void qk_norm_rope_store(const Tensor& qkv, const Tensor* q_norm, const Tensor* k_norm, float eps,
                        const Tensor& positions, const Tensor& inv_freq, const Tensor& slot_mapping,
                        int64_t num_heads, int64_t num_kv_heads, int64_t head_dim, Tensor& q_out,
                        Tensor& k_cache, Tensor& v_cache, cudaStream_t stream, float k_scale = 1.f,
                        float v_scale = 1.f, float rope_scale = 1.f, int64_t rotary_dim = 0);

}  // namespace miniinfer::cuda
