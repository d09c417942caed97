// The kernel test harness every GPU test and bench uses, in the manner of llm.c's dev/cuda trio
// (written for this project):
//   REQUIRE_GPU(), random_bf16    the visible skip without a GPU; random inputs
//   all_close, bitwise_equal      a GPU result against the CPU reference, as a gtest
//                                 AssertionResult whose failure message is a normalised error
//                                 summary (max abs / rel error, RMS error / RMS reference, the
//                                 first mismatching index)
//   time_launch                   the median time of a launch: CUDA events, warm-up, L2 flushed
//   CapturedGraph                 the launches of a lambda captured as a CUDA graph, to replay
//   device_peaks, print_bench_row achieved GB/s and TFLOP/s against this device's copy bandwidth
//                                 and bf16 (or FP8) GEMM rate, measured once per process (not
//                                 datasheet figures)
//   CublasFp8                     cuBLASLt's FP8 GEMM with one scale a tensor: the FP8 rate's
//                                 yardstick
// Header-only; a test that uses device_peaks links miniinfer_kernels_cuda (cuda::Gemm).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <cublasLt.h>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/cuda/gemm/gemm.h"

// Skips the test with a message ctest shows (SKIP_REGULAR_EXPRESSION). GTEST_SKIP returns
// from the calling function, so this must be a macro.
#define REQUIRE_GPU()                           \
    if (::miniinfer::cuda::device_count() == 0) \
    GTEST_SKIP() << "no CUDA device visible: GPU test skipped"

namespace miniinfer::gpu_testing {

// What `launches` enqueues on `stream`, captured (nothing runs during the capture) and
// instantiated as a CUDA graph; replay() launches it on a stream. Destroys both at the end.
class CapturedGraph {
  public:
    CapturedGraph(cudaStream_t stream, const std::function<void()>& launches) {
        MI_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        launches();
        MI_CUDA_CHECK(cudaStreamEndCapture(stream, &graph_));
        MI_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
    }
    ~CapturedGraph() {
        cudaGraphExecDestroy(exec_);
        cudaGraphDestroy(graph_);
    }
    CapturedGraph(const CapturedGraph&) = delete;
    CapturedGraph& operator=(const CapturedGraph&) = delete;
    void replay(cudaStream_t stream) const { MI_CUDA_CHECK(cudaGraphLaunch(exec_, stream)); }

  private:
    cudaGraph_t graph_ = nullptr;
    cudaGraphExec_t exec_ = nullptr;
};

// A host bf16 tensor of N(0, scale²) values.
inline Tensor random_bf16(Shape shape, std::mt19937& rng, float scale) {
    Tensor t = Tensor::zeros(std::move(shape), DType::kBF16);
    std::normal_distribution<float> d(0.f, scale);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<uint16_t>()[i] = f32_to_bf16(d(rng));
    return t;
}

// A view of `shape` starting `offset` elements into a device buffer of the same dtype: operands
// whose base address is not 16-byte aligned.
inline Tensor offset_view(const Tensor& buffer, int64_t offset, Shape shape) {
    return Tensor(static_cast<char*>(buffer.raw()) + offset * int64_t(dtype_size(buffer.dtype())),
                  buffer.dtype(), std::move(shape), Device::kCUDA);
}

// A contiguous host copy of a view of device memory (to_host wants an owning tensor's layout).
inline Tensor download(const Tensor& view) {
    Tensor out = Tensor::zeros(view.shape(), view.dtype());
    MI_CUDA_CHECK(cudaMemcpy(out.raw(), view.raw(), out.nbytes(), cudaMemcpyDeviceToHost));
    return out;
}

// Every element as a double (f32, bf16, f16, i32, i64, u8), host or device tensor.
inline std::vector<double> to_doubles(const Tensor& t) {
    const Tensor host = t.device() == Device::kCUDA ? download(t) : t;
    std::vector<double> out(size_t(host.numel()));
    for (int64_t i = 0; i < host.numel(); ++i) {
        double v = 0;
        switch (host.dtype()) {
            case DType::kF32:
                v = host.data<float>()[i];
                break;
            case DType::kBF16:
                v = bf16_to_f32(host.data<uint16_t>()[i]);
                break;
            case DType::kI32:
                v = host.data<int32_t>()[i];
                break;
            case DType::kI64:
                v = double(host.data<int64_t>()[i]);
                break;
            case DType::kU8:
                v = host.data<uint8_t>()[i];
                break;
            default: {
                const Tensor f = host.to_f32();  // f16
                v = f.data<float>()[i];
            }
        }
        out[size_t(i)] = v;
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// (a) Comparing against the reference

// Element i passes when |got - ref| <= atol + rtol · |ref| (+ extra[i] where a test adds a
// per-element bound, such as a GEMM's accumulation error Σ|x·w| · k · 2^-24).
struct Tolerance {
    double atol = 0, rtol = 0;
};

struct ErrorStats {
    int64_t count = 0, mismatches = 0;
    int64_t first_mismatch = -1;  // its got, ref and allowed error below
    double first_got = 0, first_ref = 0, first_allowed = 0;
    double max_abs = 0;  // largest |got - ref|, at max_abs_idx
    int64_t max_abs_idx = -1;
    double max_rel = 0;           // largest |got - ref| / |ref| over ref != 0
    double rms_err = 0;           // sqrt(mean((got - ref)²))
    double rms_ref = 0;           // sqrt(mean(ref²))
    double worst_of_allowed = 0;  // largest |got - ref| / allowed: <= 1 passes

    std::string summary() const {
        char line[512];
        std::snprintf(line, sizeof line,
                      "%lld of %lld elements outside tolerance; max abs err %.3g (at %lld), max "
                      "rel err %.3g, rms err / rms ref %.3g (%.3g / %.3g), worst err %.3g of "
                      "allowed",
                      (long long)mismatches, (long long)count, max_abs, (long long)max_abs_idx,
                      max_rel, rms_ref > 0 ? rms_err / rms_ref : rms_err, rms_err, rms_ref,
                      worst_of_allowed);
        std::string out = line;
        if (first_mismatch >= 0) {
            std::snprintf(line, sizeof line,
                          "; first mismatch at %lld: got %.9g, want %.9g, |err| %.3g > allowed "
                          "%.3g",
                          (long long)first_mismatch, first_got, first_ref,
                          std::fabs(first_got - first_ref), first_allowed);
            out += line;
        }
        return out;
    }
};

inline ErrorStats error_stats(std::span<const double> got, std::span<const double> ref,
                              Tolerance tol, std::span<const double> extra = {}) {
    ErrorStats s;
    s.count = int64_t(ref.size());
    double sum_err2 = 0, sum_ref2 = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        const double g = got[i], r = ref[i];
        const double err = g == r ? 0.0 : std::fabs(g - r);  // equal infinities: no error
        const double allowed = tol.atol + tol.rtol * std::fabs(r) + (extra.empty() ? 0 : extra[i]);
        if (!(err <= allowed)) {  // NaN fails
            if (s.mismatches++ == 0) {
                s.first_mismatch = int64_t(i);
                s.first_got = g, s.first_ref = r, s.first_allowed = allowed;
            }
        }
        if (!(err <= s.max_abs)) s.max_abs = err, s.max_abs_idx = int64_t(i);
        if (r != 0) s.max_rel = std::max(s.max_rel, err / std::fabs(r));
        if (allowed > 0) s.worst_of_allowed = std::max(s.worst_of_allowed, err / allowed);
        sum_err2 += err * err;
        sum_ref2 += r * r;
    }
    if (s.count > 0) {
        s.rms_err = std::sqrt(sum_err2 / double(s.count));
        s.rms_ref = std::sqrt(sum_ref2 / double(s.count));
    }
    return s;
}

inline ::testing::AssertionResult all_close(std::span<const double> got,
                                            std::span<const double> ref, Tolerance tol,
                                            std::span<const double> extra = {}) {
    if (got.size() != ref.size() || (!extra.empty() && extra.size() != ref.size()))
        return ::testing::AssertionFailure()
               << "size mismatch: got " << got.size() << " elements, want " << ref.size();
    const ErrorStats s = error_stats(got, ref, tol, extra);
    if (s.mismatches == 0) return ::testing::AssertionSuccess() << s.summary();
    return ::testing::AssertionFailure()
           << "(atol " << tol.atol << ", rtol " << tol.rtol
           << (extra.empty() ? "" : ", + per-element bound") << ") " << s.summary();
}

// Tensors of any dtypes (host or device, same number of elements): the GPU result and the
// reference, compared as doubles.
inline ::testing::AssertionResult all_close(const Tensor& got, const Tensor& ref, Tolerance tol) {
    const std::vector<double> g = to_doubles(got), r = to_doubles(ref);
    return all_close(std::span<const double>(g), std::span<const double>(r), tol);
}

// Bit-for-bit equality (copies, integer results, and kernels that do the reference's exact
// float operations: -0.f differs from 0.f, NaN payloads count).
template <typename T>
::testing::AssertionResult bitwise_equal(std::span<const T> got, std::span<const T> ref) {
    if (got.size() != ref.size())
        return ::testing::AssertionFailure()
               << "size mismatch: got " << got.size() << " elements, want " << ref.size();
    int64_t differ = 0, first = -1;
    for (size_t i = 0; i < ref.size(); ++i) {
        if (std::memcmp(&got[i], &ref[i], sizeof(T)) == 0) continue;
        if (differ++ == 0) first = int64_t(i);
    }
    if (differ == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << differ << " of " << ref.size() << " elements differ; first at " << first << ": got "
           << got[size_t(first)] << ", want " << ref[size_t(first)];
}

// Two tensors (host or device) of one dtype and element count, bit for bit; values printed as
// doubles.
inline ::testing::AssertionResult bitwise_equal(const Tensor& got, const Tensor& ref) {
    if (got.dtype() != ref.dtype() || got.numel() != ref.numel())
        return ::testing::AssertionFailure()
               << "got " << got.describe() << ", want " << ref.describe();
    const Tensor g = got.device() == Device::kCUDA ? download(got) : got;
    const Tensor r = ref.device() == Device::kCUDA ? download(ref) : ref;
    const size_t elem = dtype_size(g.dtype());
    const auto* gb = static_cast<const unsigned char*>(g.raw());
    const auto* rb = static_cast<const unsigned char*>(r.raw());
    int64_t differ = 0, first = -1;
    for (int64_t i = 0; i < g.numel(); ++i) {
        if (std::memcmp(gb + size_t(i) * elem, rb + size_t(i) * elem, elem) == 0) continue;
        if (differ++ == 0) first = i;
    }
    if (differ == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << differ << " of " << g.numel() << " elements differ; first at " << first << ": got "
           << to_doubles(g)[size_t(first)] << ", want " << to_doubles(r)[size_t(first)];
}

// ---------------------------------------------------------------------------------------------
// (b) Timing a launch

// True under compute-sanitizer (it injects itself through this variable): times mean nothing.
inline bool instrumented() {
    return std::getenv("CUDA_INJECTION64_PATH") != nullptr;
}

struct TimingOptions {
    int warmup = 3;
    int samples = 21;
    // Overwrite the L2 (twice its size) before each sample, outside the timed span, so that the
    // inputs come from HBM: a model step's working set is far larger than the L2, and a bench
    // that re-reads the same few MiB from L2 would report more than the memory can give.
    bool flush_l2 = true;
};

struct LaunchTiming {
    double median_us = 0, min_us = 0;
    int samples = 0;
};

// Times fn(stream) on a stream of its own: opt.warmup untimed calls, then opt.samples calls each
// between two events; the median and the fastest. One call and no warm-up when instrumented.
inline LaunchTiming time_launch(const std::function<void(cudaStream_t)>& fn,
                                TimingOptions opt = {}) {
    if (instrumented()) opt.warmup = 0, opt.samples = 1;
    static cuda::DeviceBuffer l2_scrub = [] {
        int device = 0, l2_bytes = 0;
        MI_CUDA_CHECK(cudaGetDevice(&device));
        MI_CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device));
        return cuda::DeviceBuffer(size_t(std::max(l2_bytes, 1 << 20)) * 2);
    }();
    cuda::Stream stream;
    for (int i = 0; i < opt.warmup; ++i) fn(stream.get());
    std::vector<double> us;
    cuda::Event start(true), end(true);
    for (int i = 0; i < opt.samples; ++i) {
        if (opt.flush_l2)
            MI_CUDA_CHECK(
                cudaMemsetAsync(l2_scrub.data(), i & 0xff, l2_scrub.bytes(), stream.get()));
        start.record(stream.get());
        fn(stream.get());
        end.record(stream.get());
        end.synchronize();
        us.push_back(1e3 * double(cuda::Event::elapsed_ms(start, end)));
    }
    std::sort(us.begin(), us.end());
    return {us[us.size() / 2], us.front(), int(us.size())};
}

// cuBLASLt's FP8 GEMM with one scale a tensor (no block scales): what a vendor-tuned FP8 kernel
// reaches at a shape, the yardstick for fp8_gemm's rows. y[m, n] = xq[m, k] · w[n, k]ᵀ, bf16 out.
class CublasFp8 {
  public:
    CublasFp8() { check(cublasLtCreate(&handle_)); }
    ~CublasFp8() {
        for (auto& [key, p] : plans_) {
            cublasLtMatrixLayoutDestroy(p.a);
            cublasLtMatrixLayoutDestroy(p.b);
            cublasLtMatrixLayoutDestroy(p.d);
            cublasLtMatmulDescDestroy(p.op);
        }
        cublasLtDestroy(handle_);
    }
    // The first call of a shape plans it (the timed calls after it only launch).
    void run(const Tensor& xq, const Tensor& w, Tensor& y, cudaStream_t st) {
        const uint64_t m = uint64_t(xq.size(0)), n = uint64_t(w.size(0)), k = uint64_t(w.size(1));
        Plan& p = plans_[{m, n, k}];
        if (p.op == nullptr) plan(p, m, n, k);
        const float alpha = 1.f, beta = 0.f;
        if (p.found)
            check(cublasLtMatmul(handle_, p.op, &alpha, w.raw(), p.a, xq.raw(), p.b, &beta, y.raw(),
                                 p.d, y.raw(), p.d, &p.algo, workspace_.data(), workspace_.bytes(),
                                 st));
    }

  private:
    struct Plan {
        cublasLtMatmulDesc_t op = nullptr;
        cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
        cublasLtMatmulAlgo_t algo{};
        bool found = false;
    };
    void plan(Plan& p, uint64_t m, uint64_t n, uint64_t k) {
        check(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        const cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
        check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
        check(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof nn));
        check(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_8F_E4M3, k, n, int64_t(k)));
        check(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_8F_E4M3, k, m, int64_t(k)));
        check(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_16BF, n, m, int64_t(n)));
        cublasLtMatmulPreference_t pref = nullptr;
        check(cublasLtMatmulPreferenceCreate(&pref));
        const uint64_t ws = workspace_.bytes();
        check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &ws, sizeof ws));
        cublasLtMatmulHeuristicResult_t result{};
        int found = 0;
        check(cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, p.b, p.d, p.d, pref, 1, &result,
                                             &found));
        cublasLtMatmulPreferenceDestroy(pref);
        p.algo = result.algo;
        p.found = found > 0;
        if (!p.found) ADD_FAILURE() << "cuBLASLt offers no FP8 algorithm for " << m << "x" << n;
    }
    static void check(cublasStatus_t s) {
        if (s != CUBLAS_STATUS_SUCCESS)
            ADD_FAILURE() << "cuBLASLt FP8: " << cublasLtGetStatusString(s);
    }
    cublasLtHandle_t handle_ = nullptr;
    cuda::DeviceBuffer workspace_{size_t(32) << 20};
    std::map<std::tuple<uint64_t, uint64_t, uint64_t>, Plan> plans_;
};

// ---------------------------------------------------------------------------------------------
// (c) Achieved rates against this device's measured peaks

struct DevicePeaks {
    std::string name;
    double copy_gb_s = 0;     // device-to-device copy, bytes read + written per second / 1e9
    double bf16_tflop_s = 0;  // cuda::Gemm (cuBLASLt) bf16, 8192³
    double fp8_tflop_s = 0;   // CublasFp8 (cuBLASLt e4m3, one scale a tensor), 8192³
};

// Measured on the first call and cached for the process: the median of a 1 GiB device-to-device
// cudaMemcpyAsync (read and write both counted, as the bench lines count them) and of an 8192³
// bf16 GEMM through the project's cuda::Gemm. About a second.
inline const DevicePeaks& device_peaks() {
    static const DevicePeaks peaks = [] {
        DevicePeaks p;
        int device = 0;
        cudaDeviceProp prop{};
        MI_CUDA_CHECK(cudaGetDevice(&device));
        MI_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
        p.name = prop.name;

        const size_t copy_bytes = size_t(1) << 30;
        cuda::DeviceBuffer src(copy_bytes), dst(copy_bytes);
        MI_CUDA_CHECK(cudaMemset(src.data(), 1, copy_bytes));
        const LaunchTiming copy = time_launch(
            [&](cudaStream_t s) {
                MI_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), copy_bytes,
                                              cudaMemcpyDeviceToDevice, s));
            },
            {.warmup = 2, .samples = 9, .flush_l2 = false});
        p.copy_gb_s = 2.0 * double(copy_bytes) / (copy.median_us * 1e-6) / 1e9;

        const int64_t size = 8192;
        std::mt19937 rng(7);
        Tensor a = cuda::to_device(random_bf16({size, size}, rng, 1.f));
        Tensor b = cuda::to_device(random_bf16({size, size}, rng, 0.01f));
        Tensor c = cuda::device_tensor({size, size}, DType::kBF16);
        cuda::Gemm gemm;
        const LaunchTiming mm = time_launch([&](cudaStream_t s) { gemm.run(a, b, nullptr, c, s); },
                                            {.warmup = 3, .samples = 9, .flush_l2 = false});
        p.bf16_tflop_s =
            2.0 * double(size) * double(size) * double(size) / (mm.median_us * 1e-6) / 1e12;
        Tensor a8 = cuda::device_tensor({size, size}, DType::kF8E4M3);
        Tensor b8 = cuda::device_tensor({size, size}, DType::kF8E4M3);
        MI_CUDA_CHECK(cudaMemset(a8.raw(), 0x30, a8.nbytes()));  // 0.5: no overflow
        MI_CUDA_CHECK(cudaMemset(b8.raw(), 0x30, b8.nbytes()));
        CublasFp8 fp8;
        const LaunchTiming mm8 = time_launch([&](cudaStream_t s) { fp8.run(a8, b8, c, s); },
                                             {.warmup = 3, .samples = 9, .flush_l2 = false});
        p.fp8_tflop_s =
            2.0 * double(size) * double(size) * double(size) / (mm8.median_us * 1e-6) / 1e12;
        std::printf(
            "device peaks (%s, measured): copy %.0f GB/s, bf16 GEMM %.0f TFLOP/s, FP8 GEMM %.0f "
            "TFLOP/s\n",
            p.name.c_str(), p.copy_gb_s, p.bf16_tflop_s, p.fp8_tflop_s);
        return p;
    }();
    return peaks;
}

inline void print_bench_header() {
    const DevicePeaks& peaks = device_peaks();
    std::printf("%-24s %-34s %9s %9s %6s %9s %6s\n", "op", "shape", "us", "GB/s", "%copy",
                "TFLOP/s", "%gemm");
    (void)peaks;
}

// One table line: the median time, bytes / time against the copy peak and, when flops > 0,
// flops / time against the GEMM peak (FP8's with fp8). Informative only: speed is never asserted.
inline void print_bench_row(const std::string& op, const std::string& shape, const LaunchTiming& t,
                            double bytes, double flops = 0, bool fp8 = false) {
    const DevicePeaks& peaks = device_peaks();
    const double gb_s = bytes / (t.median_us * 1e-6) / 1e9;
    std::printf("%-24s %-34s %9.2f %9.0f %5.0f%%", op.c_str(), shape.c_str(), t.median_us, gb_s,
                100.0 * gb_s / peaks.copy_gb_s);
    if (flops > 0) {
        const double tflop_s = flops / (t.median_us * 1e-6) / 1e12;
        std::printf(" %9.1f %5.0f%%", tflop_s,
                    100.0 * tflop_s / (fp8 ? peaks.fp8_tflop_s : peaks.bf16_tflop_s));
    }
    std::printf("\n");
}

}  // namespace miniinfer::gpu_testing
