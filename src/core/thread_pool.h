// A fixed set of worker threads for data-parallel CPU loops.
//
// parallel_for(n, fn) splits [0, n) into contiguous chunks, runs fn(begin, end) on the workers
// and on the calling thread, and returns when every chunk is done. Not re-entrant: fn must not
// call parallel_for on the same pool. Callers on several threads take turns (a pool runs one
// loop at a time: give concurrent work pools of its own, see Bind). Exceptions thrown by fn are
// rethrown in the caller.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace miniinfer {

class ThreadPool {
  public:
    // num_threads <= 0: one per hardware thread.
    explicit ThreadPool(int num_threads = 0);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int num_threads() const { return int(workers_.size()) + 1; }

    // min_chunk: smallest range worth a task (avoids waking threads for tiny loops).
    void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                      int64_t min_chunk = 1);

    // Process-wide pool sized from MINIINFER_NUM_THREADS or the hardware.
    static ThreadPool& global();
    // The pool this thread's CPU kernels use: global(), unless a Bind on this thread says
    // otherwise (each rank of CPU tensor parallelism runs its kernels on a pool of its own, as
    // two callers may not share one pool at once).
    static ThreadPool& current();
    class Bind {
      public:
        explicit Bind(ThreadPool& pool);
        ~Bind();
        Bind(const Bind&) = delete;
        Bind& operator=(const Bind&) = delete;

      private:
        ThreadPool* previous_;
    };

  private:
    void worker_loop();

    std::vector<std::thread> workers_;
    std::mutex caller_mutex_;  // one parallel_for at a time
    std::mutex mutex_;
    std::condition_variable work_ready_, work_done_;
    const std::function<void(int64_t, int64_t)>* job_ = nullptr;
    int64_t job_n_ = 0, chunk_ = 0, next_chunk_ = 0, num_chunks_ = 0, chunks_done_ = 0;
    uint64_t generation_ = 0;
    std::exception_ptr error_;
    bool stop_ = false;
};

}  // namespace miniinfer
