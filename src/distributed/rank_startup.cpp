#include "distributed/rank_startup.h"

#include <algorithm>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/logging.h"
#include "core/thread_pool.h"

namespace miniinfer::tensor_parallel {

int rank_threads(int64_t ranks_here) {
    return std::max(1, ThreadPool::global().num_threads() / int(ranks_here));
}

void run_rank(const EngineConfig& config, int64_t rank, int64_t ranks_here, RankMain main,
              const std::atomic<bool>* give_up) {
    ThreadPool pool(rank_threads(ranks_here));
    ThreadPool::Bind bind(pool);
    StepReceiver steps(config, rank, give_up);
    if (const std::optional<Json> welcome = steps.receive_welcome())
        main(config, rank, rank % ranks_here, steps, *welcome);
}

std::thread start_rank_thread(const EngineConfig& config, int64_t rank, int64_t ranks_here,
                              RankMain main) {
    return std::thread([config, rank, ranks_here, main] {
        try {
            run_rank(config, rank, ranks_here, main);
        } catch (const std::exception& e) {
            MI_LOG_ERROR("{}", e.what());
            // A CUDA rank that fails leaves its peers waiting in NCCL, with no timeout: end the
            // process rather than hang. A CPU rank's peers see the closed link and fail the step.
            if (config.device == "cuda") std::_Exit(1);
        }
    });
}

void run_worker_node(const EngineConfig& config, RankMain main) {
    const int64_t here = config.tensor_parallel_size / config.nnodes;
    MI_CHECK(config.node_rank > 0, "run_worker_node: node_rank > 0 only");
    MI_LOG_INFO("node {} of {}: ranks {}-{} of {}, joining rank 0 at {}:{}", config.node_rank,
                config.nnodes, config.node_rank * here, (config.node_rank + 1) * here - 1,
                config.tensor_parallel_size, config.master_addr, config.master_port);
    std::vector<std::future<void>> ranks;
    // A rank that fails (refused by rank 0, say) stops its siblings' connection attempts: rank 0
    // has given up on the group and would never accept them.
    std::atomic<bool> failed{false};
    for (int64_t r = config.node_rank * here; r < (config.node_rank + 1) * here; ++r)
        ranks.push_back(std::async(std::launch::async, [&config, &failed, main, r, here] {
            try {
                run_rank(config, r, here, main, &failed);
            } catch (...) {
                failed = true;
                throw;
            }
        }));
    std::string errors;  // every rank's: the first to fail may not be the one that says why
    for (auto& f : ranks) {
        try {
            f.get();
        } catch (const std::exception& e) {
            errors += (errors.empty() ? "" : "; ") + std::string(e.what());
        }
    }
    if (!errors.empty()) fail("{}", errors);
    MI_LOG_INFO("node {}: rank 0 ended the group", config.node_rank);
}

}  // namespace miniinfer::tensor_parallel
