#include "server/request_tracker.h"

namespace miniinfer {

namespace {
double seconds(std::chrono::steady_clock::duration d) {
    return std::chrono::duration<double>(d).count();
}
}  // namespace

void RequestTracker::add(const std::string& id, std::shared_ptr<OutputChannel> channel) {
    std::lock_guard lock(mutex_);
    Open& r = open_[id];
    r = Open{};
    r.channel = std::move(channel);
    r.arrival = Clock::now();
}

void RequestTracker::remove(const std::string& id) {
    std::lock_guard lock(mutex_);
    open_.erase(id);
}

bool RequestTracker::contains(const std::string& id) const {
    std::lock_guard lock(mutex_);
    return open_.count(id) > 0;
}

void RequestTracker::publish(RequestOutput out) {
    std::lock_guard lock(mutex_);
    auto it = open_.find(out.request_id);
    if (it == open_.end()) return;
    record(it->second, out, Clock::now());
    const bool finished = out.finished;
    it->second.channel->push(std::move(out));
    if (finished) open_.erase(it);
}

size_t RequestTracker::finish_all(const std::string& finish_reason, const std::string& error) {
    std::lock_guard lock(mutex_);
    const size_t n = open_.size();
    for (auto& [id, r] : open_) {
        RequestOutput out;
        out.request_id = id;
        out.finished = true;
        out.finish_reason = finish_reason;
        out.error = error;
        record(r, out, Clock::now());
        r.channel->push(std::move(out));
    }
    open_.clear();
    return n;
}

void RequestTracker::record(Open& r, const RequestOutput& out, Clock::time_point now) {
    const size_t num_tokens = size_t(out.num_output_tokens);
    if (num_tokens > r.num_tokens) {
        if (r.num_tokens == 0) {
            r.first_token = now;
            if (metrics_) metrics_->observe_time_to_first_token(seconds(now - r.arrival));
        } else if (metrics_) {
            metrics_->observe_inter_token_latency(seconds(now - r.last_token));
        }
        if (metrics_) metrics_->add_tokens(0, int64_t(num_tokens - r.num_tokens));
        r.num_tokens = num_tokens;
        r.last_token = now;
    }
    if (!out.finished || !metrics_) return;
    metrics_->add_tokens(out.num_prompt_tokens, 0);
    metrics_->add_prefix_cache(out.num_prompt_tokens, out.num_cached_tokens);
    metrics_->add_request_finished(out.finish_reason);
    metrics_->observe_e2e_request_latency(seconds(now - r.arrival));
    if (r.num_tokens > 1)
        metrics_->observe_time_per_output_token(seconds(r.last_token - r.first_token) /
                                                double(r.num_tokens - 1));
}

}  // namespace miniinfer
