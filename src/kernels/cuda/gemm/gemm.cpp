// bf16 GEMM: few rows go to the gemv kernel, the rest through cuBLASLt with a per-shape
// algorithm cache.
//
// cuBLASLt is column-major. Our row-major y[m, n] = x[m, k] · w[n, k]ᵀ is, read column-major,
// yᵀ[n, m] = w · xᵀ where the row-major w[n, k] is the column-major [k, n] matrix A (so op(A) = Aᵀ)
// and the row-major x[m, k] is the column-major [k, m] matrix B (op(B) = B). D = y is then the
// column-major [n, m] matrix with leading dimension n, and the bias epilogue adds bias[n] along
// D's rows, which are y's columns, as wanted.
#include "kernels/cuda/gemm/gemm.h"

#include <cublasLt.h>

#include <algorithm>
#include <unordered_map>

#include "core/check.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "kernels/cuda/elementwise/fp8_quantize.h"
#include "kernels/cuda/elementwise/silu_mul.h"
#include "kernels/cuda/gemm/fp8_gemm.h"
#include "kernels/cuda/gemm/fp8_gemv.h"
#include "kernels/cuda/gemm/gemv.h"
#include "kernels/cuda/primitives/check_tensor.h"

namespace miniinfer::cuda {
namespace {

void check_cublas(cublasStatus_t status, const char* what) {
    MI_CHECK(status == CUBLAS_STATUS_SUCCESS, "{} failed: {}", what,
             cublasLtGetStatusString(status));
}

// Largest power of two (≤ 256, cuBLASLt's default assumption) dividing the pointer. Algorithms
// are chosen for the actual alignment, so a view at an odd offset gets a kernel that handles it.
uint32_t alignment_of(const void* p) {
    const auto bits = reinterpret_cast<uintptr_t>(p);
    return bits == 0 ? 256u : uint32_t(std::min<uintptr_t>(bits & (~bits + 1), 256));
}

struct Key {
    int64_t m, n, k;
    bool has_bias, y_f32;
    uint32_t align_x, align_w, align_y;
    bool operator==(const Key&) const = default;
};

struct KeyHash {
    size_t operator()(const Key& key) const {
        size_t h = std::hash<int64_t>()(key.m);
        auto mix = [&h](uint64_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
        mix(uint64_t(key.n));
        mix(uint64_t(key.k));
        mix(uint64_t(key.has_bias) | uint64_t(key.y_f32) << 1 | uint64_t(key.align_x) << 2 |
            uint64_t(key.align_w) << 16 | uint64_t(key.align_y) << 32);
        return h;
    }
};

struct DescDeleter {
    void operator()(cublasLtMatmulDescOpaque_t* d) const { cublasLtMatmulDescDestroy(d); }
    void operator()(cublasLtMatrixLayoutOpaque_t* l) const { cublasLtMatrixLayoutDestroy(l); }
    void operator()(cublasLtMatmulPreferenceOpaque_t* p) const {
        cublasLtMatmulPreferenceDestroy(p);
    }
};
using OpDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDeleter>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, DescDeleter>;
using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, DescDeleter>;

// Candidates asked of cuBLASLt's heuristic; the first is taken.
constexpr int kHeuristicResults = 8;

// Everything a cached call needs: descriptors built once, and cuBLASLt's first heuristic
// algorithm (timing its other candidates made nothing faster: bench/RESULTS.md#gemm-tune).
struct Plan {
    OpDesc op;
    Layout a, b, d;  // w, x, y (C = D)
    cublasLtMatmulAlgo_t algo{};
};

Layout make_layout(uint64_t rows, uint64_t cols, int64_t ld, cudaDataType_t type = CUDA_R_16BF) {
    cublasLtMatrixLayout_t layout = nullptr;
    check_cublas(cublasLtMatrixLayoutCreate(&layout, type, rows, cols, ld),
                 "cublasLtMatrixLayoutCreate");
    return Layout(layout);
}

template <typename T>
void set_op_attr(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
    check_cublas(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)),
                 "cublasLtMatmulDescSetAttribute");
}

template <typename T>
void set_pref_attr(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                   const T& value) {
    check_cublas(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)),
                 "cublasLtMatmulPreferenceSetAttribute");
}

}  // namespace

struct Gemm::Impl {
    cublasLtHandle_t handle = nullptr;
    DeviceBuffer workspace{kWorkspaceBytes};
    std::unordered_map<Key, Plan, KeyHash> plans;

    Plan& plan_for(const Key& key);
};

Plan& Gemm::Impl::plan_for(const Key& key) {
    if (auto it = plans.find(key); it != plans.end()) return it->second;

    Plan plan;
    cublasLtMatmulDesc_t op = nullptr;
    check_cublas(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                 "cublasLtMatmulDescCreate");
    plan.op.reset(op);
    set_op_attr(op, CUBLASLT_MATMUL_DESC_TRANSA, cublasOperation_t(CUBLAS_OP_T));
    set_op_attr(op, CUBLASLT_MATMUL_DESC_TRANSB, cublasOperation_t(CUBLAS_OP_N));
    if (key.has_bias) {
        set_op_attr(op, CUBLASLT_MATMUL_DESC_EPILOGUE, cublasLtEpilogue_t(CUBLASLT_EPILOGUE_BIAS));
        set_op_attr(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t(CUDA_R_16BF));
    }
    plan.a = make_layout(uint64_t(key.k), uint64_t(key.n), key.k);
    plan.b = make_layout(uint64_t(key.k), uint64_t(key.m), key.k);
    plan.d =
        make_layout(uint64_t(key.n), uint64_t(key.m), key.n, key.y_f32 ? CUDA_R_32F : CUDA_R_16BF);

    cublasLtMatmulPreference_t pref_raw = nullptr;
    check_cublas(cublasLtMatmulPreferenceCreate(&pref_raw), "cublasLtMatmulPreferenceCreate");
    Preference pref(pref_raw);
    set_pref_attr(pref_raw, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(kWorkspaceBytes));
    // Split-K partial sums stay fp32 (out of place, in the workspace): the in-place and output-type
    // schemes would add the partial sums in bf16 and break the fp32-accumulation promise.
    set_pref_attr(pref_raw, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                  uint32_t(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE));
    set_pref_attr(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_w);
    set_pref_attr(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_x);
    set_pref_attr(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_y);
    set_pref_attr(pref_raw, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_y);

    cublasLtMatmulHeuristicResult_t results[kHeuristicResults]{};
    int num_results = 0;
    check_cublas(cublasLtMatmulAlgoGetHeuristic(handle, op, plan.a.get(), plan.b.get(),
                                                plan.d.get(), plan.d.get(), pref_raw,
                                                kHeuristicResults, results, &num_results),
                 "cublasLtMatmulAlgoGetHeuristic");
    MI_CHECK(
        num_results > 0,
        "gemm: cuBLASLt has no algorithm for m={} n={} k={} bias={} (alignment x {} w {} y {})",
        key.m, key.n, key.k, key.has_bias, key.align_x, key.align_w, key.align_y);
    plan.algo = results[0].algo;
    return plans.emplace(key, std::move(plan)).first->second;
}

void Gemm::run_normed(const AddRmsNorm& in, const Tensor& w, const Tensor* bias, Tensor& y,
                      cudaStream_t stream) {
    MI_CHECK(in.residual && in.normed, "gemm: a normed input needs its residual and normed rows");
    if (w.ndim() == 2 && w.size(1) > 0 && in.residual->numel() / w.size(1) <= gemv_max_rows_ &&
        gemv_rms_norm_supported(in, w, bias, y)) {
        gemv_rms_norm(in, w, bias, y, stream);
        return;
    }
    add_rms_norm(in, stream);
    run(*in.normed, w, bias, y, stream);
}

void Gemm::run_silu_mul(const Tensor& gate_up, Tensor& act, const Tensor& w, const Tensor* bias,
                        Tensor& y, cudaStream_t stream) {
    if (gate_up.ndim() == 2 && gate_up.size(0) <= gemv_max_rows_ &&
        gemv_silu_mul_supported(gate_up, w, bias, y)) {
        gemv_silu_mul(gate_up, w, bias, y, stream);
        return;
    }
    silu_mul(gate_up, act, stream);
    run(act, w, bias, y, stream);
}

void Gemm::reserve_fp8(int64_t max_rows, int64_t max_k) {
    const int64_t groups = (max_k + 127) / 128;
    if (fp8_q_.defined() && fp8_q_.numel() >= max_rows * max_k &&
        fp8_scales_.numel() >= max_rows * groups)
        return;
    fp8_q_ = device_tensor({max_rows * max_k}, DType::kF8E4M3);
    fp8_scales_ = device_tensor({max_rows * groups}, DType::kF32);
}

template <class Quantize>
void Gemm::fp8_gemm_from_scratch(int64_t m, const Tensor& w, const Tensor& w_scale,
                                 const Tensor* bias, Tensor& y, cudaStream_t stream,
                                 Quantize&& quantize) {
    const int64_t k = w.size(1), groups = (k + 127) / 128;
    MI_CHECK(fp8_q_.defined() && fp8_q_.numel() >= m * k && fp8_scales_.numel() >= m * groups,
             "gemm: the FP8 scratch holds {} values, {} rows of {} wanted (reserve_fp8)",
             fp8_q_.defined() ? fp8_q_.numel() : 0, m, k);
    Tensor q(fp8_q_.raw(), DType::kF8E4M3, {m, k}, Device::kCUDA);
    Tensor scales(fp8_scales_.raw(), DType::kF32, {m, groups}, Device::kCUDA);
    quantize(q, scales);
    fp8_gemm(q, scales, w, w_scale, bias, y, stream);
}

void Gemm::run_fp8(const Tensor& x, const Tensor& w, const Tensor& w_scale, const Tensor* bias,
                   Tensor& y, cudaStream_t stream) {
    MI_CHECK(w.ndim() == 2 && w.size(1) > 0 && x.size(-1) == w.size(1),
             "gemm: x {} does not match the FP8 weight {}", x.describe(), w.describe());
    const int64_t m = x.numel() / w.size(1);
    if (m == 0) return;
    if (m <= kFp8GemvMaxRows && fp8_gemv_supported(x, w, w_scale, bias, y)) {
        fp8_gemv(x, w, w_scale, bias, y, stream);
        return;
    }
    fp8_gemm_from_scratch(m, w, w_scale, bias, y, stream,
                          [&](Tensor& q, Tensor& scales) { fp8_quantize(x, q, scales, stream); });
}

void Gemm::run_normed_fp8(const AddRmsNorm& in, const Tensor& w, const Tensor& w_scale,
                          const Tensor* bias, Tensor& y, cudaStream_t stream) {
    MI_CHECK(in.residual && in.normed, "gemm: a normed input needs its residual and normed rows");
    if (w.ndim() == 2 && w.size(1) > 0 && in.residual->numel() / w.size(1) <= kFp8GemvMaxRows &&
        fp8_gemv_rms_norm_supported(in, w, w_scale, bias, y)) {
        fp8_gemv_rms_norm(in, w, w_scale, bias, y, stream);
        return;
    }
    add_rms_norm(in, stream);
    run_fp8(*in.normed, w, w_scale, bias, y, stream);
}

void Gemm::run_silu_mul_fp8(const Tensor& gate_up, const Tensor& w, const Tensor& w_scale,
                            const Tensor* bias, Tensor& y, cudaStream_t stream) {
    MI_CHECK(gate_up.ndim() == 2 && w.ndim() == 2 && gate_up.size(1) == 2 * w.size(1),
             "gemm: gate_up {} does not match the FP8 weight {}", gate_up.describe(), w.describe());
    const int64_t m = gate_up.size(0);
    if (m == 0) return;
    if (m <= kFp8GemvMaxRows && fp8_gemv_silu_mul_supported(gate_up, w, w_scale, bias, y)) {
        fp8_gemv_silu_mul(gate_up, w, w_scale, bias, y, stream);
        return;
    }
    fp8_gemm_from_scratch(m, w, w_scale, bias, y, stream, [&](Tensor& q, Tensor& scales) {
        silu_mul_fp8_quantize(gate_up, q, scales, stream);
    });
}

Gemm::Gemm(int64_t gemv_max_rows) : impl_(std::make_unique<Impl>()), gemv_max_rows_(gemv_max_rows) {
    check_cublas(cublasLtCreate(&impl_->handle), "cublasLtCreate");
}

Gemm::~Gemm() {
    impl_->plans.clear();  // descriptors before the handle
    if (impl_->handle) cublasLtDestroy(impl_->handle);
}

void Gemm::run(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y,
               cudaStream_t stream) {
    check_cuda_tensor(x, DType::kBF16, "gemm: x");
    check_cuda_tensor(w, DType::kBF16, "gemm: w");
    const bool y_f32 = y.dtype() == DType::kF32;
    check_cuda_tensor(y, y_f32 ? DType::kF32 : DType::kBF16, "gemm: y");
    MI_CHECK(w.ndim() == 2, "gemm: w must be [n, k], got {}", w.describe());
    const int64_t n = w.size(0), k = w.size(1);
    MI_CHECK(k > 0 && x.ndim() >= 1 && x.size(-1) == k, "gemm: x {} does not end in k = {}",
             x.describe(), k);
    const int64_t m = x.numel() / k;
    MI_CHECK(y.numel() == m * n && y.size(-1) == n, "gemm: y {} must hold [{}, {}]", y.describe(),
             m, n);
    if (bias) {
        MI_CHECK(!y_f32, "gemm: a bias needs a bf16 y");
        check_cuda_tensor(*bias, DType::kBF16, "gemm: bias");
        MI_CHECK(bias->ndim() == 1 && bias->size(0) == n, "gemm: bias {} must be [{}]",
                 bias->describe(), n);
    }
    if (m == 0 || n == 0) return;
    // Few rows: cuBLASLt's tiles are mostly idle and it adds a split-K reduce kernel, while the
    // GEMM is just a read of w (test_cuda_gemv's BenchQwen3Shapes compares the two).
    if (m <= gemv_max_rows_ && gemv_supported(x, w, bias, y)) {
        gemv(x, w, bias, y, stream);
        return;
    }

    const Key key{m,
                  n,
                  k,
                  bias != nullptr,
                  y_f32,
                  alignment_of(x.raw()),
                  alignment_of(w.raw()),
                  alignment_of(y.raw())};
    Plan& plan = impl_->plan_for(key);
    if (bias) set_op_attr(plan.op.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias->raw());
    const float alpha = 1.f, beta = 0.f;
    check_cublas(
        cublasLtMatmul(impl_->handle, plan.op.get(), &alpha, w.raw(), plan.a.get(), x.raw(),
                       plan.b.get(), &beta, y.raw(), plan.d.get(), y.raw(), plan.d.get(),
                       &plan.algo, impl_->workspace.data(), kWorkspaceBytes, stream),
        "cublasLtMatmul");
}

}  // namespace miniinfer::cuda
