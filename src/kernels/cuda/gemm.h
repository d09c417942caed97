// bf16 GEMM (bf16 or f32 out): the gemv kernel for a few rows, cuBLASLt otherwise (gemm.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "core/tensor.h"
#include "kernels/cuda/rms_norm.h"

namespace miniinfer::cuda {

// y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias[n]): bf16 in and out, fp32 accumulation.
// m ≤ gemv_max_rows (decode at small batch) with operands gemv_supported() accepts (k % 8 == 0,
// x and w 16-byte aligned) runs the bandwidth-bound gemv kernel (kernels/cuda/gemv.h): one bf16
// rounding of the fp32 sum plus bias, no workspace, no algorithm cache. Everything else runs
// through cuBLASLt, as follows. (Decode-size GEMMs of our own, 3 to 256 rows, were tried on the
// H200 in session 12: the MoE's mma.sync tiles and its wgmma kernel run as one expert, with k
// split over thread-block clusters; each stayed 5-40% behind cuBLASLt, bench/RESULTS.md.)
// x may have any rank with k as its last dimension (m = x.numel() / k); y holds m * n elements.
// All tensors are contiguous bf16 CUDA tensors, except that y may be f32 (without a bias): the
// fp32 sums as they are, for the LM head's logits. y must not alias x, w or bias.
// Rounding: without bias y = bf16(fp32 sum). With bias, cuBLASLt's BIAS epilogue (the one
// PyTorch's addmm uses) was measured on the H200 to round x·w to bf16 before adding the bias and
// rounding again: up to one extra half-ulp of |x·w| (tests/gpu/test_cuda_kernels.cpp).
//
// The algorithm is chosen once per (m, n, k, bias?, pointer alignment) with
// cublasLtMatmulAlgoGetHeuristic and cached, with its descriptors, in the Gemm: its first
// candidate, or with tuning (MINIINFER_GEMM_TUNE=1, or the constructor's `tune`) the fastest of
// its first kTuneCandidates, timed on the first call's own operands (kTuneRepeats launches each,
// synchronising the stream) for m <= kTuneMaxRows (decode's shapes, met in the runner's eager
// warm-up before the graphs are captured), taken only if kTuneMinGain times the first one's
// time or faster. Tuning never happens inside a graph capture. Timing differs between
// processes, so with tuning two runs may round differently (another algorithm's sum order).
// Thread-compatible: one Gemm per stream/thread. The Gemm owns its cuBLASLt handle and a 32 MiB
// workspace. Safe to call during CUDA graph capture once the shape's algorithm is cached: a cached
// call allocates nothing and never synchronises. Bad shapes/dtypes and cuBLASLt failures abort
// (MI_CHECK): they are bugs in the caller, not user errors.
class Gemm {
  public:
    // gemv_max_rows: the largest m sent to the gemv kernel; 0 sends everything to cuBLASLt
    // (benchmarks and tests compare the two this way).
    explicit Gemm(int64_t gemv_max_rows = kGemvMaxRows, bool tune = tune_from_env());
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
    // MINIINFER_FUSED_GEMV=0 keeps two kernels in both run_normed and run_silu_mul.
    void run_silu_mul(const Tensor& gate_up, Tensor& act, const Tensor& w, const Tensor* bias,
                      Tensor& y, cudaStream_t stream);

    static constexpr size_t kWorkspaceBytes = size_t(32) << 20;
    static constexpr int kTuneCandidates = 8;
    static constexpr int kTuneRepeats = 5;
    static constexpr int64_t kTuneMaxRows = 512;
    static constexpr float kTuneMinGain = 0.95f;
    static bool tune_from_env();  // MINIINFER_GEMM_TUNE == "1", read once
    // Largest m sent to gemv by default. Measured on the H200 (test_cuda_gemv's BenchQwen3Shapes,
    // Qwen3-0.6B's four layer GEMMs): m=1 gemv 17.4 us vs cuBLASLt 30.0; m=4 25.6 vs 26.0;
    // m=8 31.3 vs 23.6. gemv's time grows with m (each row is another pass over x), so it only
    // pays for the smallest batches.
    static constexpr int64_t kGemvMaxRows = 2;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
    int64_t gemv_max_rows_;
    bool tune_;
};

}  // namespace miniinfer::cuda
