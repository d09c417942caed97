#include "core/cuda/device_buffer.h"

#include <utility>

#include "core/check.h"
#include "core/cuda/cuda_check.h"

namespace miniinfer::cuda {

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    cudaError_t err = cudaMalloc(&data_, bytes);
    if (err != cudaSuccess) {
        size_t free_bytes = 0, total_bytes = 0;
        cudaGetLastError();
        cudaMemGetInfo(&free_bytes, &total_bytes);
        fail("cudaMalloc of {:.2f} MiB failed ({}); {:.2f} of {:.2f} MiB free", bytes / 1048576.0,
             cudaGetErrorString(err), free_bytes / 1048576.0, total_bytes / 1048576.0);
    }
}

DeviceBuffer::~DeviceBuffer() {
    if (data_) cudaFree(data_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
        if (data_) cudaFree(data_);
        data_ = std::exchange(other.data_, nullptr);
        bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
}

namespace {
class DeviceStorage : public Storage {
  public:
    explicit DeviceStorage(size_t num_bytes) : buffer_(num_bytes) {
        MI_CUDA_CHECK(cudaMemset(buffer_.data(), 0, num_bytes));
        data = buffer_.data();
        bytes = num_bytes;
        device = Device::kCUDA;
    }

  private:
    DeviceBuffer buffer_;
};
}  // namespace

Tensor device_tensor(Shape shape, DType dtype) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    auto storage = std::make_shared<DeviceStorage>(size_t(n) * dtype_size(dtype));
    return Tensor(storage->data, dtype, std::move(shape), Device::kCUDA, storage);
}

Tensor to_device(const Tensor& host) {
    MI_CHECK(host.device() == Device::kCPU && host.is_contiguous(), "to_device of {}",
             host.describe());
    Tensor out = device_tensor(host.shape(), host.dtype());
    MI_CUDA_CHECK(cudaMemcpy(out.raw(), host.raw(), host.nbytes(), cudaMemcpyHostToDevice));
    return out;
}

Tensor to_host(const Tensor& device) {
    MI_CHECK(device.device() == Device::kCUDA && device.is_contiguous(), "to_host of {}",
             device.describe());
    Tensor out = Tensor::zeros(device.shape(), device.dtype());
    MI_CUDA_CHECK(cudaMemcpy(out.raw(), device.raw(), device.nbytes(), cudaMemcpyDeviceToHost));
    return out;
}

Stream::Stream() {
    MI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}
Stream::~Stream() {
    if (stream_) cudaStreamDestroy(stream_);
}
void Stream::synchronize() const {
    MI_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

Event::Event(bool timing) {
    MI_CUDA_CHECK(
        cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}
Event::~Event() {
    if (event_) cudaEventDestroy(event_);
}
void Event::record(cudaStream_t stream) const {
    MI_CUDA_CHECK(cudaEventRecord(event_, stream));
}
void Event::synchronize() const {
    MI_CUDA_CHECK(cudaEventSynchronize(event_));
}
float Event::elapsed_ms(const Event& start, const Event& end) {
    float ms = 0;
    MI_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, end.event_));
    return ms;
}

int sm_count() {
    int device = 0, sms = 0;
    MI_CUDA_CHECK(cudaGetDevice(&device));
    MI_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return sms;
}

int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

std::string unavailable_reason() {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    cudaGetLastError();
    if (e != cudaSuccess) return cudaGetErrorString(e);
    return n == 0 ? "no device visible" : "";
}

}  // namespace miniinfer::cuda
