// Communicator: the collectives a tensor-parallel block needs on the GPU. Without tensor
// parallelism there is none (blocks hold a null pointer and skip the reduction); with it,
// NcclCommunicator (distributed/nccl_communicator.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace miniinfer::cuda {

class Communicator {
  public:
    virtual ~Communicator() = default;
    virtual int64_t rank() const = 0;
    virtual int64_t world() const = 0;
    // x = the sum of x over every rank, in place, on `stream` (capturable; no host sync).
    virtual void all_reduce_sum(Tensor& x, cudaStream_t stream) = 0;
    // out = every rank's `local` (same shape and dtype on every rank), rank after rank:
    // out.numel() == world * local.numel(). On `stream`, capturable.
    virtual void all_gather(const Tensor& local, Tensor& out, cudaStream_t stream) = 0;
    // x = rank 0's x on every rank, in place, on `stream`.
    virtual void broadcast_from_rank0(Tensor& x, cudaStream_t stream) = 0;
    // The smallest of every rank's `value` (host in, host out; synchronises `stream`): ranks
    // agree on sizes each measured alone (the KV cache's pages).
    virtual int64_t min_over_ranks(int64_t value, cudaStream_t stream) = 0;
};

}  // namespace miniinfer::cuda
