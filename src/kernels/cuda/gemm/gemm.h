// bf16 GEMM (bf16 or f32 out): the gemv kernel for a few rows, cuBLASLt otherwise (gemm.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "core/tensor.h"
#include "kernels/cuda/norm/rms_norm.h"

namespace miniinfer::cuda {

// y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias[n]): bf16 in and out, fp32 accumulation.
// m ≤ gemv_max_rows (decode at small batch) with operands gemv_supported() accepts (k % 8 == 0,
// x and w 16-byte aligned) runs the bandwidth-bound gemv kernel (kernels/cuda/gemm/gemv.h): one
// bf16 rounding of the fp32 sum plus bias, no workspace, no algorithm cache. Everything else runs
// through cuBLASLt, as follows (decode-size GEMMs of our own stayed 5-40% behind it).
// x may have any rank with k as its last dimension (m = x.numel() / k); y holds m * n elements.
// All tensors are contiguous bf16 CUDA tensors, except that y may be f32 (without a bias): the
// fp32 sums as they are, for the LM head's logits. y must not alias x, w or bias.
// Rounding: without bias y = bf16(fp32 sum). With bias, cuBLASLt's BIAS epilogue (the one
// PyTorch's addmm uses) was measured on the H200 to round x·w to bf16 before adding the bias and
// rounding again: up to one extra half-ulp of |x·w| (tests/gpu/test_cuda_kernels.cpp).
//
// The algorithm is chosen once per (m, n, k, bias?, pointer alignment): the first that
// cublasLtMatmulAlgoGetHeuristic offers, cached with its descriptors in the Gemm, so every run
// rounds alike.
// Thread-compatible: one Gemm per stream/thread. The Gemm owns its cuBLASLt handle and a 32 MiB
// workspace. Safe to call during CUDA graph capture once the shape's algorithm is cached: a cached
// call allocates nothing and never synchronises. Bad shapes/dtypes and cuBLASLt failures abort
// (MI_CHECK): they are bugs in the caller, not user errors.
class Gemm {
  public:
    // gemv_max_rows: the largest m sent to the gemv kernel; 0 sends everything to cuBLASLt
    // (benchmarks and tests compare the two this way).
    explicit Gemm(int64_t gemv_max_rows = kGemvMaxRows);
    ~Gemm();
    Gemm(const Gemm&) = delete;
    Gemm& operator=(const Gemm&) = delete;

    void run(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y, cudaStream_t stream);
    // y = *in.normed · wᵀ (+ bias) after the residual add + RMSNorm `in` (rms_norm.h; in.normed
    // is required and written). Where run() would take gemv, the norm runs inside it
    // (gemv_rms_norm: one kernel instead of two, which needs in.residual_out to be another
    // buffer than in.residual); otherwise add_rms_norm, then run().
    void run_normed(const AddRmsNorm& in, const Tensor& w, const Tensor* bias, Tensor& y,
                    cudaStream_t stream);
    // y = act · wᵀ (+ bias) with act = silu_mul(gate_up) (silu_mul.h, gate_up [m, 2k]): inside
    // the gemv where run() would take it (gemv_silu_mul; act is then not written), otherwise
    // silu_mul into act, then run().
    void run_silu_mul(const Tensor& gate_up, Tensor& act, const Tensor& w, const Tensor* bias,
                      Tensor& y, cudaStream_t stream);

    // The same three for a block-scaled FP8 weight: w [n, k] e4m3 with w_scale [ceil(n / 128),
    // ceil(k / 128)] f32 (a checkpoint's weight_scale_inv), the activations quantized per token
    // in groups of 128 (fp8_gemm.h; the CPU reference's arithmetic, kernels/cpu/fp8_linear.h).
    // Up to kFp8GemvMaxRows rows fp8_gemv quantizes x itself (with the norm or SiLU·mul inside
    // it, fp8_gemv.h); above, x is quantized into this Gemm's scratch (reserve_fp8; the SiLU·mul
    // fused into that quantization, act not written) and fp8_gemm runs on the tensor cores.
    // y bf16 (or f32 through fp8_gemv); safe during graph capture, as run().
    void run_fp8(const Tensor& x, const Tensor& w, const Tensor& w_scale, const Tensor* bias,
                 Tensor& y, cudaStream_t stream);
    void run_normed_fp8(const AddRmsNorm& in, const Tensor& w, const Tensor& w_scale,
                        const Tensor* bias, Tensor& y, cudaStream_t stream);
    void run_silu_mul_fp8(const Tensor& gate_up, const Tensor& w, const Tensor& w_scale,
                          const Tensor* bias, Tensor& y, cudaStream_t stream);
    // Sizes the quantized-activation scratch of run_*_fp8 for up to max_rows rows of up to
    // max_k columns (allocates: call before any capture).
    void reserve_fp8(int64_t max_rows, int64_t max_k);

    static constexpr size_t kWorkspaceBytes = size_t(32) << 20;
    // Largest m sent to gemv by default: gemv's time grows with m (each row is another pass
    // over x), so it pays only for the smallest batches (test_cuda_gemv's BenchQwen3Shapes).
    static constexpr int64_t kGemvMaxRows = 2;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
    int64_t gemv_max_rows_;
    Tensor fp8_q_, fp8_scales_;  // reserve_fp8's scratch: e4m3 and f32, flat
    // fp8_gemm on x's quantization into the scratch (quantize(q, scales) writes it).
    template <class Quantize>
    void fp8_gemm_from_scratch(int64_t m, const Tensor& w, const Tensor& w_scale,
                               const Tensor* bias, Tensor& y, cudaStream_t stream,
                               Quantize&& quantize);
};

}  // namespace miniinfer::cuda
