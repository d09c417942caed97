// PinnedBuffer: page-locked host memory for per-step host->device transfers (async copies from
// it neither stage nor block). Owns the allocation; not copyable.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "core/cuda/cuda_check.h"

namespace miniinfer::cuda {

struct PinnedBuffer {
    explicit PinnedBuffer(size_t size) : bytes(size) {
        MI_CUDA_CHECK(cudaHostAlloc(&data, size, cudaHostAllocDefault));
    }
    ~PinnedBuffer() { cudaFreeHost(data); }
    PinnedBuffer(const PinnedBuffer&) = delete;
    PinnedBuffer& operator=(const PinnedBuffer&) = delete;
    void* data = nullptr;
    size_t bytes = 0;
};

}  // namespace miniinfer::cuda
