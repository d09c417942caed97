// CpuCommunicator: the ranks of a tensor-parallel group as threads of one process
// (CpuModelRunner::load_parallel), the Communicator that proves the sharding without a GPU: the
// same column/row split as the CUDA blocks, with the partial sums added here instead of by NCCL.
// A collective is a meeting: each rank shows its tensor in its slot of the shared Group, waits
// for the others, reads every slot, and waits again before its tensor may change.
#pragma once

#include <barrier>
#include <cstdint>
#include <span>
#include <vector>

#include "distributed/communicator.h"

namespace miniinfer {

class CpuCommunicator final : public Communicator {
  public:
    // What the ranks of one group share.
    class Group {
      public:
        explicit Group(int64_t world);
        int64_t world() const { return int64_t(slots_.size()); }

      private:
        friend class CpuCommunicator;
        std::barrier<> barrier_;
        std::vector<std::span<const std::byte>> slots_;  // each rank's tensor during a collective
    };

    CpuCommunicator(Group& group, int64_t rank) : group_(&group), rank_(rank) {}
    int64_t rank() const override { return rank_; }
    int64_t world() const override { return group_->world(); }
    void all_reduce_sum(Tensor& x, CommStream = nullptr) override;
    void all_gather(const Tensor& local, Tensor& out, CommStream = nullptr) override;
    void broadcast_from_rank0(Tensor& x, CommStream = nullptr) override;

  private:
    // Shows `t` in this rank's slot and waits until every rank has shown its own.
    void meet(const Tensor& t);
    // Waits until every rank has read every slot.
    void leave() { group_->barrier_.arrive_and_wait(); }
    Group* group_;
    int64_t rank_;
};

}  // namespace miniinfer
