#include "kernels/cuda/primitives/check_tensor.h"

#include <fmt/format.h>

#include <string>

#include "core/cuda/cuda_check.h"

namespace miniinfer::cuda {
namespace {

bool shape_matches(const Tensor& t, std::initializer_list<int64_t> shape) {
    if (shape.size() == 0) return true;
    if (size_t(t.ndim()) != shape.size()) return false;
    int dim = 0;
    for (int64_t size : shape) {
        if (size != kAnySize && t.size(dim) != size) return false;
        ++dim;
    }
    return true;
}

std::string pattern_str(std::initializer_list<int64_t> shape) {
    if (shape.size() == 0) return "";
    std::string out = " [";
    for (int64_t size : shape) {
        if (out.size() > 2) out += ", ";
        out += size == kAnySize ? std::string("?") : std::to_string(size);
    }
    return out + "]";
}

[[noreturn]] void fail(const char* what, DType dtype, std::initializer_list<int64_t> shape,
                       const std::string& got, std::source_location where) {
    const std::string message = fmt::format("{} must be a contiguous {} CUDA tensor{}, got {}",
                                            what, dtype_name(dtype), pattern_str(shape), got);
    cuda_check_failed(where.file_name(), int(where.line()), "check_cuda_tensor", message.c_str());
}

}  // namespace

bool is_cuda_tensor(const Tensor& t, DType dtype) {
    return t.device() == Device::kCUDA && t.dtype() == dtype && t.is_contiguous();
}

void check_cuda_tensor(const Tensor& t, DType dtype, const char* what,
                       std::initializer_list<int64_t> shape, std::source_location where) {
    if (is_cuda_tensor(t, dtype) && shape_matches(t, shape)) [[likely]]
        return;
    fail(what, dtype, shape,
         fmt::format("{}{} on the {}", t.describe(), t.is_contiguous() ? "" : " (strided)",
                     t.device() == Device::kCUDA ? "GPU" : "CPU"),
         where);
}

void check_cuda_tensor(const Tensor* t, DType dtype, const char* what,
                       std::initializer_list<int64_t> shape, std::source_location where) {
    if (t == nullptr) fail(what, dtype, shape, "null", where);
    check_cuda_tensor(*t, dtype, what, shape, where);
}

}  // namespace miniinfer::cuda
