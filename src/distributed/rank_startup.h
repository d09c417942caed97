// Tensor-parallel start-up of the ranks other than 0 (rank 0's end is step_broadcaster.h, which
// gives the exchange's order). A rank joins rank 0 over TCP (StepReceiver), reads its welcome
// (control_messages.h), then runs its device's RankMain: load its shard, report to rank 0, run
// every step rank 0 sends until the end. The RankMains belong to the runners
// (run_cpu_rank in engine/model_runner.h, run_cuda_rank in engine/cuda_model_runner.h); who
// starts ranks names the one it wants, so this code knows no runner.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include "config/engine_config.h"
#include "core/json.h"
#include "distributed/step_receiver.h"

namespace miniinfer::tensor_parallel {

// A rank's life after the welcome. local_rank: its index among this node's ranks (a CUDA rank's
// device). steps: its end of rank 0's links (report, steps; the CPU's collectives too). Throws
// Error.
using RankMain = void (*)(const EngineConfig& config, int64_t rank, int64_t local_rank,
                          StepReceiver& steps, const Json& welcome);

// Each of `ranks_here` ranks computing at once on this machine gets a pool of its share of the
// cores.
int rank_threads(int64_t ranks_here);

// Rank `rank` (> 0) of config's world, on this thread: joins rank 0 (on a thread pool of its own
// for everything it does, loading included: ranks on threads of one process must not share one),
// reads the welcome and runs `main`; returns at once if rank 0 sends the end instead of a
// welcome. give_up: see StepReceiver. Throws Error.
void run_rank(const EngineConfig& config, int64_t rank, int64_t ranks_here, RankMain main,
              const std::atomic<bool>* give_up = nullptr);

// This node's other ranks (rank > 0 of `config`'s world) run on a thread each: run_rank. An
// error is logged; a CUDA rank's error ends the process (its peers would wait in NCCL forever).
std::thread start_rank_thread(const EngineConfig& config, int64_t rank, int64_t ranks_here,
                              RankMain main);

// A node of a multi-node group with node_rank > 0 (`miniinfer serve ... --node-rank 1`): runs
// its tensor_parallel_size / nnodes ranks (threads), each joining rank 0 over TCP, loading its
// shard and running every step rank 0 sends, until rank 0 ends. Throws Error if a rank fails,
// with every failed rank's reason.
void run_worker_node(const EngineConfig& config, RankMain main);

}  // namespace miniinfer::tensor_parallel
