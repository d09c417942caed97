// Tensor: a view (pointer, dtype, shape, strides, device) that may keep its memory alive.
//
// A Tensor never copies on assignment: copies share the same Storage (host allocation, device
// allocation, or a memory-mapped checkpoint file). Shapes are listed outermost first and
// strides are in elements. Kernels take raw pointers from data<T>(); layers pass Tensors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace miniinfer {

enum class Device : uint8_t { kCPU, kCUDA };

// Owner of a block of memory. Subclasses free it in their destructor.
class Storage {
  public:
    virtual ~Storage() = default;
    void* data = nullptr;
    size_t bytes = 0;
    Device device = Device::kCPU;
};

using Shape = std::vector<int64_t>;

class Tensor {
  public:
    Tensor() = default;
    // A view of memory someone else owns (owner may be null: the caller keeps it alive).
    Tensor(void* data, DType dtype, Shape shape, Device device = Device::kCPU,
           std::shared_ptr<Storage> owner = nullptr);

    // New zero-filled contiguous host tensor. (Device tensors come from the CUDA backend.)
    static Tensor zeros(Shape shape, DType dtype);

    template <typename T>
    T* data() const {
        return static_cast<T*>(data_);
    }
    void* raw() const { return data_; }
    DType dtype() const { return dtype_; }
    Device device() const { return device_; }
    const Shape& shape() const { return shape_; }
    const Shape& strides() const { return strides_; }
    int ndim() const { return int(shape_.size()); }
    int64_t size(int dim) const { return shape_.at(dim < 0 ? dim + ndim() : dim); }
    int64_t numel() const;
    size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
    bool defined() const { return !shape_.empty(); }
    bool is_contiguous() const;

    // Rows [begin, end) of dimension 0, sharing storage.
    Tensor slice_rows(int64_t begin, int64_t end) const;
    // Same memory, another shape with the same number of elements (contiguous only).
    Tensor view(Shape shape) const;
    // A contiguous f32 host copy (converts bf16 / f16 / e4m3).
    Tensor to_f32() const;

    std::string describe() const;  // "bf16[128, 64]"

  private:
    void* data_ = nullptr;
    DType dtype_ = DType::kF32;
    Device device_ = Device::kCPU;
    Shape shape_;
    Shape strides_;
    std::shared_ptr<Storage> owner_;
};

std::string shape_str(const Shape& shape);

// Writes a contiguous host tensor's elements (f32, bf16, f16 or e4m3) to dst as f32.
void copy_to_f32(const Tensor& src, float* dst);

// Writes n elements of src (f32, bf16, f16 or e4m3) to dst as dst_dtype (the same four), each
// pointer aligned to its dtype. Equal dtypes are a plain copy; narrowing rounds to nearest even
// (to e4m3: saturating at +-448, f32_to_e4m3).
void convert_elements(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n);

}  // namespace miniinfer
