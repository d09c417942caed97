#include "core/tensor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/check.h"

namespace miniinfer {
namespace {

class HostStorage : public Storage {
  public:
    // calloc: large blocks come zeroed from the OS page by page, so a big KV cache costs
    // nothing until it is used. Aligned to 64 bytes (a cache line) by hand.
    explicit HostStorage(size_t num_bytes) : block_(std::calloc(num_bytes + 64, 1)) {
        MI_CHECK(block_ != nullptr, "host allocation of {} bytes failed", num_bytes);
        data = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(block_) + 63) & ~uintptr_t(63));
        bytes = num_bytes;
    }
    ~HostStorage() override { std::free(block_); }

  private:
    void* block_;
};

Shape contiguous_strides(const Shape& shape) {
    Shape strides(shape.size());
    int64_t stride = 1;
    for (size_t i = shape.size(); i-- > 0;) {
        strides[i] = stride;
        stride *= shape[i];
    }
    return strides;
}

}  // namespace

Tensor::Tensor(void* data, DType dtype, Shape shape, Device device, std::shared_ptr<Storage> owner)
    : data_(data),
      dtype_(dtype),
      device_(device),
      shape_(std::move(shape)),
      strides_(contiguous_strides(shape_)),
      owner_(std::move(owner)) {
    for (int64_t d : shape_) MI_CHECK(d >= 0, "negative dimension in {}", shape_str(shape_));
}

Tensor Tensor::zeros(Shape shape, DType dtype) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    auto storage = std::make_shared<HostStorage>(size_t(n) * dtype_size(dtype));
    return Tensor(storage->data, dtype, std::move(shape), Device::kCPU, storage);
}

int64_t Tensor::numel() const {
    int64_t n = 1;
    for (int64_t d : shape_) n *= d;
    return n;
}

bool Tensor::is_contiguous() const {
    return strides_ == contiguous_strides(shape_);
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
    MI_CHECK(ndim() >= 1 && 0 <= begin && begin <= end && end <= shape_[0], "slice [{}, {}) of {}",
             begin, end, describe());
    Tensor out = *this;
    out.data_ = static_cast<char*>(data_) + begin * strides_[0] * int64_t(dtype_size(dtype_));
    out.shape_[0] = end - begin;
    return out;
}

Tensor Tensor::view(Shape shape) const {
    MI_CHECK(is_contiguous(), "view of a non-contiguous tensor {}", describe());
    Tensor out = *this;
    out.shape_ = std::move(shape);
    out.strides_ = contiguous_strides(out.shape_);
    MI_CHECK(out.numel() == numel(), "view {} of {}", shape_str(out.shape_), describe());
    return out;
}

Tensor Tensor::to_f32() const {
    Tensor out = zeros(shape_, DType::kF32);
    copy_to_f32(*this, out.data<float>());
    return out;
}

void copy_to_f32(const Tensor& src, float* dst) {
    const DType t = src.dtype();
    MI_CHECK(src.device() == Device::kCPU && src.is_contiguous() &&
                 (t == DType::kF32 || t == DType::kBF16 || t == DType::kF16 || t == DType::kF8E4M3),
             "copy_to_f32 of {}", src.describe());
    convert_elements(src.raw(), t, dst, DType::kF32, src.numel());
}

void convert_elements(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n) {
    const size_t src_size = dtype_size(src_dtype), dst_size = dtype_size(dst_dtype);
    if (src_dtype == dst_dtype) {
        std::memcpy(dst, src, size_t(n) * src_size);
        return;
    }
    // Through f32 a block at a time: one switch per block, not per element.
    constexpr int64_t kBlock = 1024;
    float f32[kBlock];
    for (int64_t begin = 0; begin < n; begin += kBlock) {
        const int64_t len = std::min(kBlock, n - begin);
        const void* s = static_cast<const char*>(src) + size_t(begin) * src_size;
        void* d = static_cast<char*>(dst) + size_t(begin) * dst_size;
        const auto* s16 = static_cast<const uint16_t*>(s);
        auto* d16 = static_cast<uint16_t*>(d);
        switch (src_dtype) {
            case DType::kF32:
                std::memcpy(f32, s, size_t(len) * sizeof(float));
                break;
            case DType::kBF16:
                for (int64_t i = 0; i < len; ++i) f32[i] = bf16_to_f32(s16[i]);
                break;
            case DType::kF16:
                for (int64_t i = 0; i < len; ++i) f32[i] = f16_to_f32(s16[i]);
                break;
            case DType::kF8E4M3:
                for (int64_t i = 0; i < len; ++i)
                    f32[i] = e4m3_to_f32(static_cast<const uint8_t*>(s)[i]);
                break;
            default:
                MI_CHECK(false, "convert_elements from {}", dtype_name(src_dtype));
        }
        switch (dst_dtype) {
            case DType::kF32:
                std::memcpy(d, f32, size_t(len) * sizeof(float));
                break;
            case DType::kBF16:
                for (int64_t i = 0; i < len; ++i) d16[i] = f32_to_bf16(f32[i]);
                break;
            case DType::kF16:
                for (int64_t i = 0; i < len; ++i) d16[i] = f32_to_f16(f32[i]);
                break;
            case DType::kF8E4M3:
                for (int64_t i = 0; i < len; ++i) static_cast<uint8_t*>(d)[i] = f32_to_e4m3(f32[i]);
                break;
            default:
                MI_CHECK(false, "convert_elements to {}", dtype_name(dst_dtype));
        }
    }
}

std::string shape_str(const Shape& shape) {
    return fmt::format("[{}]", fmt::join(shape, ", "));
}

std::string Tensor::describe() const {
    return fmt::format("{}{}", dtype_name(dtype_), shape_str(shape_));
}

}  // namespace miniinfer
