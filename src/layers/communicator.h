// CpuCommunicator: the collective a tensor-parallel CPU model needs, for ranks that are threads
// of one process (CpuModelRunner with tensor_parallel_size > 1). It exists to prove the
// sharding without a GPU: the same column/row split as the CUDA blocks (layers/cuda/), with the
// partial sums added here instead of by NCCL.
//
// all_reduce_sum adds the ranks' tensors in rank order (0 + x_0 + x_1 + ...), so every rank
// gets the same bits; all_gather_columns puts the ranks' column blocks side by side (the
// vocab-parallel LM head's logits). Every rank of a group must make the same calls in the same
// order.
#pragma once

#include <barrier>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace miniinfer {

class CpuCommunicator {
  public:
    // What the ranks of one group share.
    class Group {
      public:
        explicit Group(int64_t world);
        int64_t world() const { return int64_t(slots_.size()); }

      private:
        friend class CpuCommunicator;
        std::barrier<> barrier_;
        std::vector<const float*> slots_;  // each rank's tensor during a collective
        std::vector<int64_t> cols_;        // each rank's column count (all_gather_columns)
    };

    CpuCommunicator(Group& group, int64_t rank) : group_(&group), rank_(rank) {}
    int64_t rank() const { return rank_; }
    int64_t world() const { return group_->world(); }

    // x (f32, same shape on every rank) = the sum of x over the ranks, in place.
    void all_reduce_sum(Tensor& x);
    // out [rows, sum of the ranks' cols] (f32) = the ranks' local [rows, cols_r] blocks in rank
    // order, on every rank.
    void all_gather_columns(const Tensor& local, Tensor& out);

  private:
    Group* group_;
    int64_t rank_;
};

}  // namespace miniinfer
