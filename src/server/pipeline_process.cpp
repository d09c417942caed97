#include "server/pipeline_process.h"

#include <poll.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>

#include "core/check.h"
#include "core/logging.h"

extern char** environ;

namespace miniinfer::pipeline {

std::string describe_wait_status(int status) {
    if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
    if (WIFSIGNALED(status)) {
        const int sig = WTERMSIG(status);
        const char* name = sigabbrev_np(sig);
        return fmt::format("was killed by signal {} (SIG{})", sig, name ? name : "?");
    }
    return fmt::format("ended with wait status {}", status);
}

namespace {

std::mutex g_worker_binary_mutex;
std::string g_worker_binary;  // empty: /proc/self/exe

std::string worker_binary() {
    std::lock_guard lock(g_worker_binary_mutex);
    return g_worker_binary;
}

pid_t spawn_self(const std::vector<std::string>& args) {
    std::string binary = worker_binary();
    std::error_code ec;  // argv[0]: the binary's real path, so `ps` shows what runs
    const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    std::vector<std::string> argv_strings = {!binary.empty() ? binary : ec ? "miniinfer" : self};
    if (binary.empty()) binary = "/proc/self/exe";
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& s : argv_strings) argv.push_back(s.data());
    argv.push_back(nullptr);

    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    for (int sig : {SIGINT, SIGTERM, SIGPIPE, SIGCHLD}) sigaddset(&defaults, sig);
    posix_spawnattr_setsigmask(&attr, &none);  // the frontend blocks SIGINT/SIGTERM for sigwait
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(
        &attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, binary.c_str(), nullptr, &attr, argv.data(), environ);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) fail("cannot start a pipeline process: {}", std::strerror(rc));
    return pid;
}

}  // namespace

void set_worker_binary(const std::string& path) {
    std::lock_guard lock(g_worker_binary_mutex);
    g_worker_binary = path;
}

ChildProcesses::ChildProcesses(const std::vector<ChildSpec>& children,
                               std::function<void(const ChildExit&)> on_exit)
    : on_exit_(std::move(on_exit)) {
    try {
        for (const ChildSpec& spec : children) {
            Child c{.role = spec.role, .pid = spawn_self(spec.args), .pidfd = -1, .reaped = false};
            // A pidfd of a child we have not reaped stays valid even if it has exited already.
            c.pidfd = int(syscall(SYS_pidfd_open, c.pid, 0));
            if (c.pidfd < 0) {
                const int error = errno;
                kill(c.pid, SIGKILL);
                waitpid(c.pid, nullptr, 0);
                fail("pidfd_open: {} (Linux 5.3 or later is needed)", std::strerror(error));
            }
            MI_LOG_INFO("started the {} process (pid {})", c.role, c.pid);
            children_.push_back(c);
        }
    } catch (...) {
        for (Child& c : children_) {
            kill(c.pid, SIGKILL);
            waitpid(c.pid, nullptr, 0);
            close(c.pidfd);
        }
        throw;
    }
    watcher_ = std::thread([this] { watch(); });
}

ChildProcesses::~ChildProcesses() {
    terminate_all(std::chrono::seconds(5));
}

std::vector<pid_t> ChildProcesses::pids() const {
    std::lock_guard lock(mutex_);
    std::vector<pid_t> out;
    for (const Child& c : children_) out.push_back(c.pid);
    return out;
}

// Waits on the pidfds of the children still running; reaps each one that exits.
void ChildProcesses::watch() {
    for (;;) {
        std::vector<pollfd> fds;
        std::vector<size_t> index;
        {
            std::lock_guard lock(mutex_);
            for (size_t i = 0; i < children_.size(); ++i)
                if (!children_[i].reaped) {
                    fds.push_back(pollfd{children_[i].pidfd, POLLIN, 0});
                    index.push_back(i);
                }
        }
        if (fds.empty()) break;
        if (poll(fds.data(), fds.size(), -1) < 0) {
            MI_CHECK(errno == EINTR, "poll on child pidfds: {}", std::strerror(errno));
            continue;
        }
        for (size_t k = 0; k < fds.size(); ++k) {
            if (!(fds[k].revents & POLLIN)) continue;
            ChildExit exit;
            {
                std::lock_guard lock(mutex_);
                Child& c = children_[index[k]];
                int status = 0;
                if (waitpid(c.pid, &status, 0) != c.pid) continue;
                c.reaped = true;
                close(c.pidfd);
                exit = ChildExit{.role = c.role,
                                 .pid = c.pid,
                                 .how = describe_wait_status(status),
                                 .expected = terminating_};
                // A pipeline is useless without any of its parts: stop the others.
                terminating_ = true;
                for (const Child& other : children_)
                    if (!other.reaped) kill(other.pid, SIGTERM);
            }
            on_exit_(exit);
        }
    }
    std::lock_guard lock(mutex_);
    all_reaped_.notify_all();
}

void ChildProcesses::terminate_all(std::chrono::milliseconds grace) {
    std::unique_lock lock(mutex_);
    terminating_ = true;
    auto running = [&] {
        for (const Child& c : children_)
            if (!c.reaped) return true;
        return false;
    };
    for (const Child& c : children_)
        if (!c.reaped) kill(c.pid, SIGTERM);
    if (!all_reaped_.wait_for(lock, grace, [&] { return !running(); })) {
        for (const Child& c : children_)
            if (!c.reaped) {
                MI_LOG_WARN("the {} process (pid {}) did not stop within {} ms: SIGKILL", c.role,
                            c.pid, grace.count());
                kill(c.pid, SIGKILL);
            }
        all_reaped_.wait(lock, [&] { return !running(); });
    }
    lock.unlock();
    if (watcher_.joinable()) watcher_.join();
}

}  // namespace miniinfer::pipeline
