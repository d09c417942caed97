// TcpCommunicator: tensor-parallel ranks in separate processes, on one host or on several
// (--nnodes, --node-rank, --master-addr, --master-port): the CPU proof of the multi-process,
// multi-host layout that the GPU takes with NCCL (whose bootstrap is the same rendezvous).
//
// Rank 0 is the hub. It listens on the master address; every other rank connects to it and
// says its rank and world. A collective sends every rank's tensor to rank 0, which adds them in
// rank order (the bits CpuCommunicator gives) or puts them one after another, and sends the
// result back. The same links carry rank 0's control messages (send_control / receive_control: the
// step every rank runs, and the end) and the ranks' one status message after loading
// (send_status / receive_statuses), so that a rank that cannot load its shard fails the start
// of rank 0 with its reason.
//
// Every byte passes through rank 0 over TCP: it proves the protocol, not speed. A peer that
// disconnects or breaks the protocol is an Error on the ranks that notice it; frames carry
// their size, so a desynchronised peer is caught rather than misread.
#pragma once

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "distributed/communicator.h"

namespace miniinfer {

class TcpCommunicator final : public Communicator {
  public:
    // Rank 0: listens on addr:port (port 0: a free port, see port()) and waits until `timeout`
    // for the other world - 1 ranks. Other ranks: connect to addr:port, retrying until
    // `timeout` (rank 0 may start later), or until *give_up turns true (another rank of this
    // process failed to join: rank 0 refused it, so it will not wait for this one). Throws Error
    // naming the address on failure.
    TcpCommunicator(const std::string& addr, int port, int64_t rank, int64_t world,
                    std::chrono::milliseconds timeout, const std::atomic<bool>* give_up = nullptr);
    // Rank 0 in two steps, so that the port is known before the others connect (tests): listen
    // now, accept in accept_ranks().
    static TcpCommunicator listen(const std::string& addr, int port, int64_t world);
    void accept_ranks(std::chrono::milliseconds timeout);

    ~TcpCommunicator() override;
    TcpCommunicator(TcpCommunicator&& other) noexcept;
    TcpCommunicator& operator=(TcpCommunicator&&) = delete;
    TcpCommunicator(const TcpCommunicator&) = delete;

    int64_t rank() const override { return rank_; }
    int64_t world() const override { return world_; }
    int port() const { return port_; }  // rank 0: the port it listens on
    void all_reduce_sum(Tensor& x, CommStream = nullptr) override;
    void all_gather(const Tensor& local, Tensor& out, CommStream = nullptr) override;
    void broadcast_from_rank0(Tensor& x, CommStream = nullptr) override;

    // Rank 0: the same message to every other rank.
    void send_control(std::string_view message);
    // Ranks > 0: rank 0's next control message; nullopt once rank 0 has closed its link.
    std::optional<std::string> receive_control();
    // Ranks > 0: one message to rank 0 ("" if ready, else why not).
    void send_status(std::string_view status);
    // Rank 0: every other rank's status, in rank order (index 0: rank 1).
    std::vector<std::string> receive_statuses();

  private:
    TcpCommunicator(int64_t rank, int64_t world) : rank_(rank), world_(world) {}
    void open_listener(const std::string& addr, int port);
    int64_t rank_, world_;
    int port_ = 0;
    int listen_fd_ = -1;
    std::vector<int> peers_;  // rank 0: the socket of rank r at r - 1; others: rank 0's at 0
    std::vector<float> scratch_;
};

}  // namespace miniinfer
