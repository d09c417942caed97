#include "distributed/step_receiver.h"

#include "distributed/tcp_communicator.h"

namespace miniinfer {

StepReceiver::StepReceiver(const EngineConfig& config, int64_t rank,
                           const std::atomic<bool>* give_up)
    : links_(std::make_unique<TcpCommunicator>(config.master_addr, int(config.master_port), rank,
                                               config.tensor_parallel_size,
                                               tensor_parallel::kJoinTimeout, give_up)) {}

StepReceiver::~StepReceiver() = default;

Communicator& StepReceiver::collectives() {
    return *links_;
}

std::optional<Json> StepReceiver::receive_welcome() {
    const std::optional<std::string> hello = links_->receive_control();
    // Rank 0 sends a JSON welcome, or the end if it failed to start.
    if (!hello || hello->empty() || (*hello)[0] != '{') return std::nullopt;
    return Json::parse(*hello);
}

bool StepReceiver::report(const std::string& status) {
    links_->send_status(status);
    const std::optional<std::string> answer = links_->receive_control();
    return status.empty() && answer && *answer == std::string(1, kGoMessage);
}

std::optional<DecodedStep> StepReceiver::next_step() {
    const std::optional<std::string> message = links_->receive_control();
    return message ? decode_control(*message) : std::nullopt;
}

}  // namespace miniinfer
