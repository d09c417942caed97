// The collectives a tensor-parallel CPU model needs (QwenModel with CpuParallel), behind one
// interface with two transports:
//  - CpuCommunicator: ranks that are threads of one process (CpuModelRunner::load_parallel);
//  - TcpCommunicator (distributed/tcp_communicator.h): ranks in other processes, on this host or
//    others (--nnodes), over TCP.
// They exist to prove the sharding without a GPU: the same column/row split as the CUDA blocks
// (layers/cuda/), with the partial sums added here instead of by NCCL.
//
// all_reduce_sum adds the ranks' tensors in rank order (0 + x_0 + x_1 + ...), so every rank
// gets the same bits, whatever the transport; all_gather_columns puts the ranks' column blocks
// side by side (the vocab-parallel LM head's logits). Every rank of a group must make the same
// calls in the same order.
#pragma once

#include <barrier>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace miniinfer {

class Communicator {
  public:
    virtual ~Communicator() = default;
    virtual int64_t rank() const = 0;
    virtual int64_t world() const = 0;
    // x (f32, same shape on every rank) = the sum of x over the ranks, in place.
    virtual void all_reduce_sum(Tensor& x) = 0;
    // out [rows, sum of the ranks' cols] (f32) = the ranks' local [rows, cols_r] blocks in rank
    // order, on every rank.
    virtual void all_gather_columns(const Tensor& local, Tensor& out) = 0;
};

// The two transports' all_gather_columns, gathered: a [rows, cols] block into out's columns
// [*at, *at + cols), rows = out.size(0); *at moves past it. Checks that it fits.
void place_columns(Tensor& out, const float* block, int64_t cols, int64_t* at);

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
        std::vector<const float*> slots_;  // each rank's tensor during a collective
        std::vector<int64_t> cols_;        // each rank's column count (all_gather_columns)
    };

    CpuCommunicator(Group& group, int64_t rank) : group_(&group), rank_(rank) {}
    int64_t rank() const override { return rank_; }
    int64_t world() const override { return group_->world(); }
    void all_reduce_sum(Tensor& x) override;
    void all_gather_columns(const Tensor& local, Tensor& out) override;

  private:
    Group* group_;
    int64_t rank_;
};

}  // namespace miniinfer
