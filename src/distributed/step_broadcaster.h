// StepBroadcaster: rank 0's end of a tensor-parallel group whose other ranks run elsewhere, on
// threads of this process (this node's, started here) or in other processes (other nodes',
// run_worker_node). It owns rank 0's TCP links to them (tcp_communicator.h) and this node's rank
// threads; a runner holds it and sees no link. Every other rank holds a StepReceiver.
//
// The start-up, rank 0 on the left, every other rank on the right:
//   constructor: listen, start this node's ranks,     run_rank: a StepReceiver joins rank 0,
//     accept every rank, send the welcome     ->        receive_welcome(), then its RankMain:
//   load its own shard                                  load its own
//   wait_for_ranks(): every status, then go   <->       report(status): "" or why not; the answer
// CUDA adds a round before NCCL's start, whose collectives would wait forever for a rank that
// cannot come. Then each step: broadcast(batch) here, next_step() there, until end().
#pragma once

#include <memory>
#include <thread>
#include <vector>

#include "core/json.h"
#include "distributed/communicator.h"
#include "distributed/rank_startup.h"
#include "layers/forward_batch.h"

namespace miniinfer {

class TcpCommunicator;

class StepBroadcaster {
  public:
    // Opens the group as rank 0 of config's world (node_rank 0): listens on master_addr:
    // master_port (one node: on loopback, on a free port, so that two servers may run at once),
    // starts this node's other ranks on threads running `rank_main`, waits for every rank to join
    // (tensor_parallel::kJoinTimeout) and sends each `welcome` (control_messages.h). Throws Error
    // if a rank does not join in time or is refused, after ending the ranks started here.
    StepBroadcaster(const EngineConfig& config, const Json& welcome,
                    tensor_parallel::RankMain rank_main);
    ~StepBroadcaster();
    StepBroadcaster(const StepBroadcaster&) = delete;
    StepBroadcaster& operator=(const StepBroadcaster&) = delete;

    // Rank 0's collectives over the links (the CPU's; CUDA has NCCL).
    Communicator& collectives();
    // Every other rank's next status (StepReceiver::report). If all are ready they are told to go
    // on; else the group ends and Error names every refusal ("tensor-parallel rank r: why; ...").
    void wait_for_ranks();
    // Every other rank runs `batch` too (encode_step, control_messages.h). Throws Error if a
    // rank has gone.
    void broadcast(const ForwardBatch& batch);
    // Tells every rank the end, closes the links and joins this node's ranks; idempotent.
    void end();

  private:
    std::unique_ptr<TcpCommunicator> links_;
    std::vector<std::thread> local_ranks_;
};

}  // namespace miniinfer
