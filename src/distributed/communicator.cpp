#include "distributed/communicator.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"

namespace miniinfer {

CpuCommunicator::Group::Group(int64_t world)
    : barrier_(std::ptrdiff_t(world)), slots_(size_t(world), nullptr), cols_(size_t(world), 0) {
    MI_CHECK(world >= 1, "a communicator group needs at least one rank");
}

void CpuCommunicator::all_reduce_sum(Tensor& x) {
    MI_CHECK(x.dtype() == DType::kF32, "all_reduce_sum: f32 only");
    const int64_t n = x.numel();
    group_->slots_[size_t(rank_)] = x.data<float>();
    group_->barrier_.arrive_and_wait();  // every rank's tensor is in its slot
    std::vector<float> sum(size_t(n), 0.f);
    for (const float* part : group_->slots_)
        for (int64_t i = 0; i < n; ++i) sum[size_t(i)] += part[i];
    group_->barrier_.arrive_and_wait();  // every rank has read every slot: x may change
    std::memcpy(x.data<float>(), sum.data(), size_t(n) * sizeof(float));
}

void place_columns(Tensor& out, const float* block, int64_t cols, int64_t* at) {
    const int64_t rows = out.size(0), width = out.size(1);
    MI_CHECK(*at + cols <= width, "all_gather_columns: the blocks exceed {} columns", width);
    for (int64_t i = 0; i < rows; ++i)
        std::memcpy(out.data<float>() + i * width + *at, block + i * cols,
                    size_t(cols) * sizeof(float));
    *at += cols;
}

void CpuCommunicator::all_gather_columns(const Tensor& local, Tensor& out) {
    MI_CHECK(local.dtype() == DType::kF32 && out.dtype() == DType::kF32 && local.ndim() == 2 &&
                 out.ndim() == 2 && local.size(0) == out.size(0),
             "all_gather_columns: f32 [rows, cols] tensors with the same rows");
    const int64_t width = out.size(1);
    group_->slots_[size_t(rank_)] = local.data<float>();
    group_->cols_[size_t(rank_)] = local.size(1);
    group_->barrier_.arrive_and_wait();  // every rank's block is in its slot
    int64_t at = 0;
    for (size_t r = 0; r < group_->slots_.size(); ++r)
        place_columns(out, group_->slots_[r], group_->cols_[r], &at);
    MI_CHECK(at == width, "all_gather_columns: {} columns gathered into {}", at, width);
    group_->barrier_.arrive_and_wait();  // every rank has read every slot
}

}  // namespace miniinfer
