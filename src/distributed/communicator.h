// Communicator: the collectives a tensor-parallel model needs, one interface for every backend.
// A model holds a null pointer without tensor parallelism and skips the collectives. Beside it:
//  - CpuCommunicator (cpu_communicator.h): ranks that are threads of one process;
//  - TcpCommunicator (tcp_communicator.h): ranks in other processes, on this host or others;
//  - NcclCommunicator (nccl_communicator.h): one rank per GPU, device tensors.
// The host ones take host tensors and ignore the stream; NCCL takes device tensors and runs on
// the stream, capturable in CUDA graphs, with no host sync (except min_over_ranks).
//
// all_reduce_sum on the host adds in rank order (0 + x_0 + x_1 + ...), so every rank gets the
// same bits whichever transport runs; NCCL adds in its own order. Every rank of a group must make
// the same calls in the same order.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace miniinfer {

// The CUDA stream (cudaStream_t) a device collective is ordered on, opaque so that this header
// needs no CUDA; host communicators ignore it.
using CommStream = void*;

class Communicator {
  public:
    virtual ~Communicator() = default;
    virtual int64_t rank() const = 0;
    virtual int64_t world() const = 0;
    // x (same shape on every rank) = the sum of x over the ranks, in place. Host: f32 only;
    // NCCL: bf16 or f32.
    virtual void all_reduce_sum(Tensor& x, CommStream stream = nullptr) = 0;
    // out = every rank's `local`, rank after rank, flat: out.numel() is the sum of the ranks'
    // local.numel() (NCCL: the same on every rank), one dtype throughout.
    virtual void all_gather(const Tensor& local, Tensor& out, CommStream stream = nullptr) = 0;
    // x = rank 0's x on every rank, in place.
    virtual void broadcast_from_rank0(Tensor& x, CommStream stream = nullptr) = 0;
    // The smallest of every rank's `value` (host in, host out; a device communicator
    // synchronises `stream`): ranks agree on sizes each measured alone (the KV cache's pages).
    // This one gathers the values through all_gather of host tensors.
    virtual int64_t min_over_ranks(int64_t value, CommStream stream = nullptr);
};

}  // namespace miniinfer
