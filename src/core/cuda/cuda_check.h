// MI_CUDA_CHECK wraps every CUDA runtime call and follows every kernel launch.
#pragma once

#include <cuda_runtime.h>

#include "core/check.h"

#define MI_CUDA_CHECK(call)                                                             \
    do {                                                                                \
        cudaError_t mi_err_ = (call);                                                   \
        MI_CHECK(mi_err_ == cudaSuccess, "{} -> {}: {}", #call, cudaGetErrorName(mi_err_), \
                 cudaGetErrorString(mi_err_));                                          \
    } while (0)
