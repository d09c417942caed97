// PinnedUpload: a small table the host rebuilds every step (an attention backend's plan) for
// kernels that read it at one fixed device address, so that a captured graph replays with each
// step's: the host fills a pinned buffer, which is copied asynchronously on the step's stream.
// fill() first waits until the previous copy has left the pinned buffer; that copy ran at the
// start of the step before, so a host one step ahead (overlap scheduling) does not wait.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "core/cuda/pinned_buffer.h"

namespace miniinfer::cuda {

class PinnedUpload {
  public:
    explicit PinnedUpload(size_t bytes) : host_(bytes), device_(bytes) {}
    ~PinnedUpload() { cudaEventSynchronize(copied_.get()); }  // may still read host_
    PinnedUpload(const PinnedUpload&) = delete;
    PinnedUpload& operator=(const PinnedUpload&) = delete;

    // The pinned buffer to fill, once the previous upload has left it.
    void* fill() {
        copied_.synchronize();
        return host_.data;
    }
    // Copies the pinned buffer's first `bytes` to device() on `stream` (asynchronous).
    void upload(size_t bytes, cudaStream_t stream) {
        MI_CUDA_CHECK(
            cudaMemcpyAsync(device_.data(), host_.data, bytes, cudaMemcpyHostToDevice, stream));
        copied_.record(stream);
    }
    void* device() const { return device_.data(); }
    size_t bytes() const { return host_.bytes; }

  private:
    PinnedBuffer host_;
    DeviceBuffer device_;
    Event copied_;
};

}  // namespace miniinfer::cuda
