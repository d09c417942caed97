#include "distributed/step_broadcaster.h"

#include <string>

#include "core/check.h"
#include "core/logging.h"
#include "distributed/control_messages.h"
#include "distributed/tcp_communicator.h"

namespace miniinfer {

StepBroadcaster::StepBroadcaster(const EngineConfig& config, const Json& welcome,
                                 tensor_parallel::RankMain rank_main) {
    const int64_t world = config.tensor_parallel_size, here = world / config.nnodes;
    MI_CHECK(world > 1 && config.node_rank == 0, "StepBroadcaster: node 0 of a group only");
    EngineConfig links = config;
    if (config.nnodes == 1) {
        links.master_addr = "127.0.0.1";
        links.master_port = 0;
    }
    links_ = std::make_unique<TcpCommunicator>(
        TcpCommunicator::listen(links.master_addr, int(links.master_port), world));
    links.master_port = links_->port();
    try {
        for (int64_t r = 1; r < here; ++r)
            local_ranks_.push_back(tensor_parallel::start_rank_thread(links, r, here, rank_main));
        MI_LOG_INFO("tensor-parallel rank 0 of {} ({} node(s)): waiting for the others on {}:{}",
                    world, config.nnodes, links.master_addr, links.master_port);
        links_->accept_ranks(tensor_parallel::kJoinTimeout);
        links_->send_control(welcome.dump());
    } catch (...) {
        end();  // the destructor does not run for a constructor that throws
        throw;
    }
}

StepBroadcaster::~StepBroadcaster() {
    end();
}

Communicator& StepBroadcaster::collectives() {
    MI_CHECK(links_, "StepBroadcaster: the group has ended");
    return *links_;
}

void StepBroadcaster::wait_for_ranks() {
    std::string refusals;
    const std::vector<std::string> statuses = links_->receive_statuses();
    for (size_t i = 0; i < statuses.size(); ++i)
        if (!statuses[i].empty())
            refusals +=
                fmt::format("{}rank {}: {}", refusals.empty() ? "" : "; ", i + 1, statuses[i]);
    if (refusals.empty()) {
        links_->send_control(std::string(1, kGoMessage));
        return;
    }
    end();
    fail("tensor-parallel {}", refusals);
}

void StepBroadcaster::broadcast(const ForwardBatch& batch) {
    MI_CHECK(links_, "StepBroadcaster: the group has ended");
    links_->send_control(encode_step(batch));
}

void StepBroadcaster::end() {
    if (links_) {
        try {
            links_->send_control(std::string(1, kQuitMessage));
        } catch (const Error&) {  // a rank already gone
        }
        links_.reset();  // closed links end any rank still waiting
    }
    for (std::thread& t : local_ranks_)
        if (t.joinable()) t.join();
}

}  // namespace miniinfer
