// NcclCommunicator: the Communicator of device tensors, over NCCL, one rank per GPU. Ranks find
// each other through an id that rank 0 makes (unique_id()) and hands to the others out of band (the
// tensor-parallel TCP links, distributed/tcp_communicator.h); the constructor blocks until every
// rank of the world has joined. Collectives run on the caller's stream and may be captured in CUDA
// graphs. The NVLink multicast (NVLS) path is left to NCCL_NVLS_ENABLE in the environment.
#pragma once

#include <string>

#include "distributed/communicator.h"

namespace miniinfer::cuda {

class NcclCommunicator final : public Communicator {
  public:
    // An id for a new group (bytes of ncclUniqueId), made by rank 0.
    static std::string unique_id();
    // Joins the group `id` as `rank` of `world` on the current CUDA device.
    NcclCommunicator(const std::string& id, int64_t rank, int64_t world);
    ~NcclCommunicator() override;
    NcclCommunicator(const NcclCommunicator&) = delete;
    NcclCommunicator& operator=(const NcclCommunicator&) = delete;

    int64_t rank() const override { return rank_; }
    int64_t world() const override { return world_; }
    void all_reduce_sum(Tensor& x, CommStream stream = nullptr) override;
    void all_gather(const Tensor& local, Tensor& out, CommStream stream = nullptr) override;
    void broadcast_from_rank0(Tensor& x, CommStream stream = nullptr) override;
    int64_t min_over_ranks(int64_t value, CommStream stream = nullptr) override;

  private:
    void* comm_ = nullptr;  // ncclComm_t
    int64_t rank_, world_;
};

}  // namespace miniinfer::cuda
