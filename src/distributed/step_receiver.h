// StepReceiver: a tensor-parallel rank's end (rank > 0) of rank 0's StepBroadcaster
// (step_broadcaster.h, which gives the start-up's order). It owns the rank's TCP link to rank 0
// (tcp_communicator.h); its RankMain (rank_startup.h) reads the welcome, reports whether it is
// ready, then runs every step that arrives, and sees no link.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "config/engine_config.h"
#include "core/json.h"
#include "distributed/communicator.h"
#include "distributed/control_messages.h"

namespace miniinfer {

class TcpCommunicator;

class StepReceiver {
  public:
    // Joins rank 0 of config's world at master_addr:master_port as `rank`, retrying until
    // tensor_parallel::kJoinTimeout or until *give_up turns true (TcpCommunicator). Throws Error.
    StepReceiver(const EngineConfig& config, int64_t rank, const std::atomic<bool>* give_up);
    ~StepReceiver();

    // Rank 0's welcome (control_messages.h); nullopt if rank 0 ended the group instead.
    std::optional<Json> receive_welcome();
    // This rank's collectives over the link (the CPU's; CUDA has NCCL).
    Communicator& collectives();
    // Tells rank 0 this rank's status ("" when ready, else why not) and returns rank 0's answer
    // once every rank has reported: whether the group goes on (never after a refusal).
    bool report(const std::string& status);
    // The next step's batch from rank 0; nullopt once rank 0 ends the group. Throws Error on a
    // message that is no step.
    std::optional<DecodedStep> next_step();

  private:
    std::unique_ptr<TcpCommunicator> links_;
};

}  // namespace miniinfer
