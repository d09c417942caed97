#include "layers/communicator.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"

namespace miniinfer {

CpuCommunicator::Group::Group(int64_t world)
    : barrier_(std::ptrdiff_t(world)), slots_(size_t(world), nullptr) {
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

}  // namespace miniinfer
