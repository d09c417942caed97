#include "distributed/cpu_communicator.h"

#include <cstring>

#include "core/check.h"

namespace miniinfer {
namespace {

void check_host(const Tensor& t) {
    MI_CHECK(t.device() == Device::kCPU && t.is_contiguous(),
             "CpuCommunicator: contiguous host tensors only, got {}", t.describe());
}

}  // namespace

CpuCommunicator::Group::Group(int64_t world)
    : barrier_(std::ptrdiff_t(world)), slots_(size_t(world)) {
    MI_CHECK(world >= 1, "a communicator group needs at least one rank");
}

void CpuCommunicator::meet(const Tensor& t) {
    check_host(t);
    group_->slots_[size_t(rank_)] = {static_cast<const std::byte*>(t.raw()), t.nbytes()};
    group_->barrier_.arrive_and_wait();
}

void CpuCommunicator::all_reduce_sum(Tensor& x, CommStream) {
    MI_CHECK(x.dtype() == DType::kF32, "all_reduce_sum: f32 only");
    const int64_t n = x.numel();
    meet(x);
    std::vector<float> sum(size_t(n), 0.f);
    for (std::span<const std::byte> slot : group_->slots_) {
        MI_CHECK(slot.size() == x.nbytes(), "all_reduce_sum: ranks with different sizes");
        const auto* part = reinterpret_cast<const float*>(slot.data());
        for (int64_t i = 0; i < n; ++i) sum[size_t(i)] += part[i];
    }
    leave();
    std::memcpy(x.data<float>(), sum.data(), x.nbytes());
}

void CpuCommunicator::all_gather(const Tensor& local, Tensor& out, CommStream) {
    MI_CHECK(out.dtype() == local.dtype(), "all_gather: {} into {}", local.describe(),
             out.describe());
    check_host(out);
    meet(local);
    auto* at = static_cast<std::byte*>(out.raw());
    for (std::span<const std::byte> slot : group_->slots_) {
        MI_CHECK(at + slot.size() <= static_cast<std::byte*>(out.raw()) + out.nbytes(),
                 "all_gather: the ranks' tensors exceed {}", out.describe());
        std::memcpy(at, slot.data(), slot.size());
        at += slot.size();
    }
    MI_CHECK(at == static_cast<std::byte*>(out.raw()) + out.nbytes(),
             "all_gather: the ranks' tensors do not fill {}", out.describe());
    leave();
}

void CpuCommunicator::broadcast_from_rank0(Tensor& x, CommStream) {
    meet(x);
    MI_CHECK(group_->slots_[0].size() == x.nbytes(),
             "broadcast_from_rank0: ranks with different sizes");
    if (rank_ != 0) std::memcpy(x.raw(), group_->slots_[0].data(), x.nbytes());
    leave();
}

}  // namespace miniinfer
