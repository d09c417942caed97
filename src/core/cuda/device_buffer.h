// RAII owners of CUDA resources: device memory, streams and events. Move-only; the destructor
// frees. Construction failures (out of memory) throw miniinfer::Error with the numbers, since
// they are caused by the user's settings (model size, memory utilisation), not by a bug.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "core/tensor.h"

namespace miniinfer::cuda {

class DeviceBuffer {
  public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t bytes);
    ~DeviceBuffer();
    DeviceBuffer(DeviceBuffer&& other) noexcept;
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    void* data() const { return data_; }
    size_t bytes() const { return bytes_; }

  private:
    void* data_ = nullptr;
    size_t bytes_ = 0;
};

// A contiguous device tensor that owns its memory (zero-filled).
Tensor device_tensor(Shape shape, DType dtype);
// Host <-> device copies of whole contiguous tensors (synchronous).
Tensor to_device(const Tensor& host);
Tensor to_host(const Tensor& device);

class Stream {
  public:
    Stream();  // non-blocking stream
    ~Stream();
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    cudaStream_t get() const { return stream_; }
    void synchronize() const;

  private:
    cudaStream_t stream_ = nullptr;
};

class Event {
  public:
    explicit Event(bool timing = false);
    ~Event();
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;
    cudaEvent_t get() const { return event_; }
    void record(cudaStream_t stream) const;
    void synchronize() const;
    // Milliseconds between two recorded timing events.
    static float elapsed_ms(const Event& start, const Event& end);

  private:
    cudaEvent_t event_ = nullptr;
};

// Number of visible CUDA devices; 0 when there is no GPU or no driver (never throws).
int device_count();
// Streaming multiprocessors of the current device (aborts on a CUDA error).
int sm_count();
// Why device_count() is 0, in the runtime's words (e.g. "CUDA driver version is insufficient for
// CUDA runtime version"); "" when a device is visible.
std::string unavailable_reason();

}  // namespace miniinfer::cuda
