// Communicator: the collective a tensor-parallel block needs. Without tensor parallelism there
// is none (blocks hold a null pointer and skip the reduction); the NCCL communicator comes with
// tensor parallelism.
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
};

}  // namespace miniinfer::cuda
