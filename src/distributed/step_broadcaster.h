// StepBroadcaster: rank 0's end of a tensor-parallel group whose other ranks run elsewhere, on
// threads of this process (this node's, started here: rank_startup.h) or in other processes
// (other nodes'). It owns rank 0's TCP links to them (distributed/tcp_communicator.h) and this
// node's rank threads. A runner tells it each step's batch, which every other rank then runs too,
// and otherwise sees no link: the start-up's exchanges (welcome, statuses) go through links().
//
// end() (or destruction) ends the group: every rank is told the end, the links close (a rank
// still starting sees them closed and gives up), and this node's rank threads are joined.
#pragma once

#include <memory>
#include <thread>
#include <vector>

#include "distributed/rank_startup.h"
#include "distributed/tcp_communicator.h"
#include "layers/forward_batch.h"

namespace miniinfer {

class StepBroadcaster {
  public:
    StepBroadcaster() = default;
    ~StepBroadcaster() { end(); }
    StepBroadcaster(const StepBroadcaster&) = delete;
    StepBroadcaster& operator=(const StepBroadcaster&) = delete;

    // Starts this node's rank `rank` (> 0) on a thread (tensor_parallel::start_rank_thread);
    // end() joins it.
    void start_local_rank(const EngineConfig& config, int64_t rank, int64_t ranks_here,
                          tensor_parallel::RankMain main);
    // Rank 0's links to every other rank: listening (TcpCommunicator::listen) or joined.
    void set_links(std::unique_ptr<TcpCommunicator> links) { links_ = std::move(links); }
    // The links, for the start-up (accept the ranks, welcome, statuses) and, on the CPU, rank 0's
    // collectives. Checks that there are links.
    TcpCommunicator& links();
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
