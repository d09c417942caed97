#include "core/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace miniinfer {

ThreadPool::ThreadPool(int num_threads) {
    if (num_threads <= 0) num_threads = int(std::max(1u, std::thread::hardware_concurrency()));
    for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard lock(mutex_);
        stop_ = true;
    }
    work_ready_.notify_all();
    for (auto& t : workers_) t.join();
}

ThreadPool& ThreadPool::global() {
    // MINIINFER_NUM_THREADS (user-facing; unset or not a number: every core).
    static ThreadPool pool([] {
        const char* v = std::getenv("MINIINFER_NUM_THREADS");
        return v == nullptr ? 0 : std::atoi(v);
    }());
    return pool;
}

namespace {
thread_local ThreadPool* t_bound = nullptr;
}  // namespace

ThreadPool& ThreadPool::current() {
    return t_bound ? *t_bound : global();
}

ThreadPool::Bind::Bind(ThreadPool& pool) : previous_(t_bound) {
    t_bound = &pool;
}

ThreadPool::Bind::~Bind() {
    t_bound = previous_;
}

// Workers and the caller take chunks from a shared counter until none are left.
void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                              int64_t min_chunk) {
    if (n <= 0) return;
    const int64_t max_chunks = int64_t(num_threads()) * 4;
    const int64_t chunk =
        std::max<int64_t>(std::max<int64_t>(min_chunk, 1), (n + max_chunks - 1) / max_chunks);
    if (workers_.empty() || chunk >= n) {
        fn(0, n);
        return;
    }
    std::lock_guard turn(caller_mutex_);
    std::unique_lock lock(mutex_);
    job_ = &fn;
    job_n_ = n;
    chunk_ = chunk;
    next_chunk_ = 0;
    num_chunks_ = (n + chunk - 1) / chunk;
    chunks_done_ = 0;
    error_ = nullptr;
    ++generation_;
    work_ready_.notify_all();
    while (next_chunk_ < num_chunks_) {
        int64_t c = next_chunk_++;
        lock.unlock();
        std::exception_ptr err;
        try {
            fn(c * chunk, std::min(n, (c + 1) * chunk));
        } catch (...) {
            err = std::current_exception();
        }
        lock.lock();
        if (err && !error_) error_ = err;
        ++chunks_done_;
    }
    work_done_.wait(lock, [&] { return chunks_done_ == num_chunks_; });
    job_ = nullptr;
    if (error_) std::rethrow_exception(error_);
}

void ThreadPool::worker_loop() {
    uint64_t seen = 0;
    std::unique_lock lock(mutex_);
    for (;;) {
        work_ready_.wait(lock, [&] { return stop_ || (generation_ != seen && job_ != nullptr); });
        if (stop_) return;
        seen = generation_;
        while (job_ != nullptr && next_chunk_ < num_chunks_) {
            int64_t c = next_chunk_++;
            const auto* fn = job_;
            int64_t n = job_n_, chunk = chunk_;
            lock.unlock();
            std::exception_ptr err;
            try {
                (*fn)(c * chunk, std::min(n, (c + 1) * chunk));
            } catch (...) {
                err = std::current_exception();
            }
            lock.lock();
            if (err && !error_) error_ = err;
            if (++chunks_done_ == num_chunks_) work_done_.notify_all();
        }
    }
}

}  // namespace miniinfer
