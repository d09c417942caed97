// The launchers' tensor checks (STYLE habit 5: the launcher checks, the kernel trusts): a tensor
// is on the GPU, of one dtype, contiguous, and of the expected rank and sizes. A failure is a
// caller's bug: it aborts like MI_LAUNCH_CHECK, at the caller's file:line, with a message that
// says what was expected and what arrived:
//   rms_norm: x must be a contiguous bf16 CUDA tensor [?, 1024], got f32[4, 1024] on the CPU
// Host code only; .cu files include it (no fmt here: nvcc cannot compile fmt's checks).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <source_location>

#include "core/dtype.h"
#include "core/tensor.h"

namespace miniinfer::cuda {

constexpr int64_t kAnySize = -1;  // in a shape pattern: any size in that dimension

// Whether p is 16-byte aligned (what a kernel's 16-byte vector loads need).
inline bool aligned16(const void* p) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// True when t is a contiguous CUDA tensor of `dtype` (for conditions that combine this with
// others, such as gemv_supported).
bool is_cuda_tensor(const Tensor& t, DType dtype);

// Aborts unless t is a contiguous CUDA tensor of `dtype` matching `shape`: one entry per
// dimension, kAnySize for any size; an empty pattern accepts any rank. what names the operand
// with its op ("rms_norm: x").
void check_cuda_tensor(const Tensor& t, DType dtype, const char* what,
                       std::initializer_list<int64_t> shape = {},
                       std::source_location where = std::source_location::current());

// The same for an operand passed by pointer; null fails too.
void check_cuda_tensor(const Tensor* t, DType dtype, const char* what,
                       std::initializer_list<int64_t> shape = {},
                       std::source_location where = std::source_location::current());

}  // namespace miniinfer::cuda
