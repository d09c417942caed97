#include "distributed/step_broadcaster.h"

#include <string>

#include "core/check.h"
#include "distributed/control_messages.h"

namespace miniinfer {

void StepBroadcaster::start_local_rank(const EngineConfig& config, int64_t rank, int64_t ranks_here,
                                       tensor_parallel::RankMain main) {
    local_ranks_.push_back(tensor_parallel::start_rank_thread(config, rank, ranks_here, main));
}

TcpCommunicator& StepBroadcaster::links() {
    MI_CHECK(links_, "StepBroadcaster: no links yet");
    return *links_;
}

void StepBroadcaster::broadcast(const ForwardBatch& batch) {
    links().send_control(encode_step(batch));
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
