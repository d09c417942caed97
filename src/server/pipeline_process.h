// The pipeline's child processes: started by re-executing this binary (/proc/self/exe, or the
// binary set_worker_binary names, with the hidden `pipeline-worker` subcommand; never fork without
// exec: threads and CUDA do not survive it), then watched by one thread until each exits.
//
// Children get their own process group (a Ctrl-C in the terminal reaches only the frontend,
// which then stops them) and default signal dispositions. They ask the kernel for SIGTERM
// when the thread that spawned them ends (PR_SET_PDEATHSIG), so construct ChildProcesses on
// a thread that lives as long as the pipeline (the main thread).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace miniinfer::pipeline {

struct ChildSpec {
    std::string role;               // "tokenizer", "engine", "detokenizer"
    std::vector<std::string> args;  // argv[1..] of /proc/self/exe
};

struct ChildExit {
    std::string role;
    pid_t pid = 0;
    std::string how;        // "exited with status 1", "was killed by signal 9 (SIGKILL)"
    bool expected = false;  // terminate_all() had been called
};

// The executable children run: the `miniinfer` binary. By default this process's own
// (/proc/self/exe); a process that is not the binary (Python, through libminiinfer_c) names
// it here before starting a pipeline. Safe from any thread.
void set_worker_binary(const std::string& path);

// "exited with status N" or "was killed by signal N (SIGNAME)" for a waitpid status.
std::string describe_wait_status(int status);

class ChildProcesses {
  public:
    // Starts every child (Error if one cannot be started; those already started are stopped).
    // on_exit runs on the watching thread once per child, whenever it exits. When one exits
    // before terminate_all(), the others are sent SIGTERM (their exits then count as expected).
    ChildProcesses(const std::vector<ChildSpec>& children,
                   std::function<void(const ChildExit&)> on_exit);
    // terminate_all(5 s).
    ~ChildProcesses();
    ChildProcesses(const ChildProcesses&) = delete;
    ChildProcesses& operator=(const ChildProcesses&) = delete;

    // SIGTERM to every child still running, SIGKILL to those left after `grace`; returns once
    // all are reaped. Idempotent.
    void terminate_all(std::chrono::milliseconds grace);
    std::vector<pid_t> pids() const;

  private:
    struct Child {
        std::string role;
        pid_t pid = 0;
        int pidfd = -1;
        bool reaped = false;
    };
    void watch();

    std::function<void(const ChildExit&)> on_exit_;
    mutable std::mutex mutex_;
    std::condition_variable all_reaped_;
    std::vector<Child> children_;
    bool terminating_ = false;
    std::thread watcher_;
};

}  // namespace miniinfer::pipeline
