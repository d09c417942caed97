#include "server/engine_client.h"

#include <fmt/format.h>

namespace miniinfer {

void OutputChannel::push(RequestOutput out) {
    {
        std::lock_guard lock(mutex_);
        queue_.push_back(std::move(out));
    }
    ready_.notify_one();
}

std::optional<RequestOutput> OutputChannel::next(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    if (!ready_.wait_for(lock, timeout, [&] { return !queue_.empty(); })) return std::nullopt;
    RequestOutput out = std::move(queue_.front());
    queue_.pop_front();
    return out;
}

std::optional<QueueFull> check_queue(int64_t num_waiting, int64_t max_queued) {
    if (max_queued <= 0 || num_waiting < max_queued) return std::nullopt;
    return QueueFull(fmt::format("too many requests are queued ({}); try again later", max_queued));
}

}  // namespace miniinfer
