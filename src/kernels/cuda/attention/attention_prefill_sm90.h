// The wgmma prefill attention (attention_prefill_sm90.cu) behind launch_attention_prefill.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/attention/attention.h"

namespace miniinfer::cuda {

// Whether launch_attention_prefill_sm90 runs `a`: an sm_90 device (H100 / H200) and head_dim
// 128 (bf16 or FP8 cache); other devices and head_dims keep the mma.sync kernel
// (bench/RESULTS.md#prefill-wgmma).
bool attention_prefill_sm90_supported(const AttentionLaunch& a);
// The fa2 prefill on wgmma; grid as launch_attention_prefill computes it (64-row tiles).
void launch_attention_prefill_sm90(const AttentionLaunch& a, dim3 grid, cudaStream_t stream);

}  // namespace miniinfer::cuda
