// Checks for CUDA code. Self-contained (no fmt): .cu files include this, not core/check.h,
// because nvcc cannot compile fmt's compile-time format checks.
//   MI_CUDA_CHECK(call)       every CUDA runtime call, and cudaGetLastError() after a launch
//   MI_LAUNCH_CHECK(cond, msg) a launcher's validation of its arguments (a bug if it fails)
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace miniinfer::cuda {
[[noreturn]] inline void cuda_check_failed(const char* file, int line, const char* what,
                                           const char* detail) {
    std::fprintf(stderr, "%s:%d: %s failed: %s\n", file, line, what, detail);
    std::fflush(stderr);
    std::abort();
}
}  // namespace miniinfer::cuda

#define MI_CUDA_CHECK(call)                                                    \
    do {                                                                       \
        cudaError_t mi_err_ = (call);                                          \
        if (mi_err_ != cudaSuccess) [[unlikely]]                               \
            ::miniinfer::cuda::cuda_check_failed(__FILE__, __LINE__, #call,    \
                                                 cudaGetErrorString(mi_err_)); \
    } while (0)

#define MI_LAUNCH_CHECK(cond, msg)                                                                 \
    do {                                                                                           \
        if (!(cond)) [[unlikely]]                                                                  \
            ::miniinfer::cuda::cuda_check_failed(__FILE__, __LINE__, "MI_LAUNCH_CHECK(" #cond ")", \
                                                 msg);                                             \
    } while (0)
