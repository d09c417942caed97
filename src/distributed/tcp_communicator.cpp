#include "distributed/tcp_communicator.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

#include "core/check.h"

namespace miniinfer {
namespace {

using Clock = std::chrono::steady_clock;

// Every frame starts with this and its payload's size, so that a peer out of step is caught.
constexpr uint32_t kMagic = 0x4d495450;  // "MITP"

std::string endpoint(const std::string& addr, int port) {
    return fmt::format("{}:{}", addr, port);
}

void write_all(int fd, const void* data, size_t size) {
    const auto* p = static_cast<const char*>(data);
    while (size > 0) {
        const ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) fail("tensor-parallel link: send failed: {}", std::strerror(errno));
        p += n;
        size -= size_t(n);
    }
}

// False if the peer closed the link before the first byte; an Error if it closed midway.
bool read_all(int fd, void* data, size_t size) {
    auto* p = static_cast<char*>(data);
    const size_t total = size;
    while (size > 0) {
        const ssize_t n = ::recv(fd, p, size, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail("tensor-parallel link: receive failed: {}", std::strerror(errno));
        if (n == 0) {
            if (size == total) return false;
            fail("tensor-parallel link: the peer closed the connection mid-message");
        }
        p += n;
        size -= size_t(n);
    }
    return true;
}

void write_frame(int fd, const void* data, uint64_t size) {
    const uint64_t header[2] = {kMagic, size};
    write_all(fd, header, sizeof header);
    write_all(fd, data, size);
}

// The next frame's size, or nullopt if the peer closed the link cleanly before it.
std::optional<uint64_t> read_header(int fd) {
    uint64_t header[2];
    if (!read_all(fd, header, sizeof header)) return std::nullopt;
    if (header[0] != kMagic) fail("tensor-parallel link: a frame without its marker (out of step)");
    return header[1];
}

// A frame of exactly `size` bytes into `data`.
void read_frame_into(int fd, void* data, uint64_t size, int64_t peer) {
    const std::optional<uint64_t> got = read_header(fd);
    if (!got) fail("tensor-parallel link: rank {} closed the connection", peer);
    if (*got != size)
        fail("tensor-parallel link: rank {} sent {} bytes where {} were expected (out of step)",
             peer, *got, size);
    if (!read_all(fd, data, size))
        fail("tensor-parallel link: rank {} closed the connection", peer);
}

std::optional<std::string> read_frame(int fd) {
    const std::optional<uint64_t> size = read_header(fd);
    if (!size) return std::nullopt;
    std::string out(*size, '\0');
    if (!read_all(fd, out.data(), out.size()))
        fail("tensor-parallel link: the peer closed the connection mid-message");
    return out;
}

void set_nodelay(int fd) {
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

addrinfo* resolve(const std::string& addr, int port, bool passive) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    addrinfo* result = nullptr;
    const std::string service = std::to_string(port);
    if (const int rc = getaddrinfo(addr.c_str(), service.c_str(), &hints, &result); rc != 0)
        fail("--master-addr {}: {}", addr, gai_strerror(rc));
    return result;
}

void check_host(const Tensor& t) {
    MI_CHECK(t.device() == Device::kCPU && t.is_contiguous(),
             "TcpCommunicator: contiguous host tensors only, got {}", t.describe());
}

int remaining_ms(Clock::time_point deadline) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    return int(std::max<int64_t>(0, left.count()));
}

}  // namespace

TcpCommunicator TcpCommunicator::listen(const std::string& addr, int port, int64_t world) {
    MI_CHECK(world >= 2, "a TCP group needs at least two ranks, got {}", world);
    TcpCommunicator c(0, world);
    c.open_listener(addr, port);
    return c;
}

void TcpCommunicator::open_listener(const std::string& addr, int port) {
    TcpCommunicator& c = *this;
    addrinfo* info = resolve(addr, port, /*passive=*/true);
    std::string error = "no address";
    for (addrinfo* a = info; a && c.listen_fd_ < 0; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) continue;
        const int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, int(world_)) == 0) {
            c.listen_fd_ = fd;
            sockaddr_storage bound{};
            socklen_t len = sizeof bound;
            getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
            c.port_ = ntohs(bound.ss_family == AF_INET6
                                ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
        } else {
            error = std::strerror(errno);
            ::close(fd);
        }
    }
    freeaddrinfo(info);
    if (c.listen_fd_ < 0)
        fail("tensor-parallel rank 0 cannot listen on {}: {} (--master-addr, --master-port)",
             endpoint(addr, port), error);
}

void TcpCommunicator::accept_ranks(std::chrono::milliseconds timeout) {
    MI_CHECK(rank_ == 0 && listen_fd_ >= 0, "accept_ranks: rank 0 after listen() only");
    const Clock::time_point deadline = Clock::now() + timeout;
    peers_.assign(size_t(world_ - 1), -1);
    for (int64_t joined = 0; joined < world_ - 1;) {
        pollfd p{listen_fd_, POLLIN, 0};
        const int ready = ::poll(&p, 1, remaining_ms(deadline));
        if (ready < 0 && errno == EINTR) continue;
        if (ready <= 0)
            fail(
                "tensor-parallel rank 0: {} of the {} other ranks connected within {} s (start "
                "every node with the same --tensor-parallel-size, --nnodes, --master-addr and "
                "--master-port)",
                joined, world_ - 1, timeout.count() / 1000);
        const int fd = ::accept(listen_fd_, nullptr, nullptr);
        if (fd < 0) continue;
        set_nodelay(fd);
        int64_t hello[2] = {0, 0};  // rank, world
        try {
            read_frame_into(fd, hello, sizeof hello, -1);
        } catch (const Error&) {
            ::close(fd);  // not one of ours (a port scan, a stale client): keep waiting
            continue;
        }
        const int64_t r = hello[0];
        std::string refusal;
        if (hello[1] != world_)
            refusal =
                fmt::format("rank {} says the world is {}, rank 0 says {}", r, hello[1], world_);
        else if (r < 1 || r >= world_ || peers_[size_t(r - 1)] >= 0)
            refusal = fmt::format("rank {} is not a free rank of a world of {}", r, world_);
        write_frame(fd, refusal.data(), refusal.size());
        if (!refusal.empty()) {
            ::close(fd);
            fail("tensor-parallel rank 0: {}", refusal);
        }
        peers_[size_t(r - 1)] = fd;
        ++joined;
    }
    ::close(listen_fd_);
    listen_fd_ = -1;
}

TcpCommunicator::TcpCommunicator(const std::string& addr, int port, int64_t rank, int64_t world,
                                 std::chrono::milliseconds timeout,
                                 const std::atomic<bool>* give_up)
    : rank_(rank), world_(world) {
    MI_CHECK(world >= 2 && rank >= 0 && rank < world, "rank {} of a TCP group of {}", rank, world);
    if (rank == 0) {
        open_listener(addr, port);
        accept_ranks(timeout);
        return;
    }
    const Clock::time_point deadline = Clock::now() + timeout;
    std::string error;
    int fd = -1;
    while (fd < 0) {
        addrinfo* info = resolve(addr, port, /*passive=*/false);
        for (addrinfo* a = info; a && fd < 0; a = a->ai_next) {
            fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
            if (fd < 0) continue;
            if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
                error = std::strerror(errno);
                ::close(fd);
                fd = -1;
            }
        }
        freeaddrinfo(info);
        if (fd >= 0) break;
        if (give_up && give_up->load())
            fail("tensor-parallel rank {}: another rank of this node failed to join; giving up",
                 rank);
        if (Clock::now() >= deadline)
            fail("tensor-parallel rank {}: cannot reach rank 0 at {} within {} s: {}", rank,
                 endpoint(addr, port), timeout.count() / 1000, error);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    set_nodelay(fd);
    peers_ = {fd};
    const int64_t hello[2] = {rank, world};
    write_frame(fd, hello, sizeof hello);
    const std::optional<std::string> refusal = read_frame(fd);
    if (!refusal) fail("tensor-parallel rank {}: rank 0 closed the connection", rank);
    if (!refusal->empty()) fail("tensor-parallel rank {}: refused by rank 0: {}", rank, *refusal);
}

TcpCommunicator::TcpCommunicator(TcpCommunicator&& o) noexcept
    : rank_(o.rank_),
      world_(o.world_),
      port_(o.port_),
      listen_fd_(std::exchange(o.listen_fd_, -1)),
      peers_(std::move(o.peers_)) {
    o.peers_.clear();
}

TcpCommunicator::~TcpCommunicator() {
    for (int fd : peers_)
        if (fd >= 0) ::close(fd);
    if (listen_fd_ >= 0) ::close(listen_fd_);
}

void TcpCommunicator::all_reduce_sum(Tensor& x, CommStream) {
    check_host(x);
    MI_CHECK(x.dtype() == DType::kF32, "all_reduce_sum: f32 only");
    const int64_t n = x.numel();
    float* data = x.data<float>();
    if (rank_ != 0) {
        write_frame(peers_[0], data, x.nbytes());
        read_frame_into(peers_[0], data, x.nbytes(), 0);
        return;
    }
    // 0 + x_0 + x_1 + ...: the order CpuCommunicator adds in (0 + x_0 turns -0 into +0), in
    // place.
    for (int64_t i = 0; i < n; ++i) data[i] = 0.f + data[i];
    scratch_.resize(size_t(n));
    for (int64_t r = 1; r < world_; ++r) {
        read_frame_into(peers_[size_t(r - 1)], scratch_.data(), x.nbytes(), r);
        for (int64_t i = 0; i < n; ++i) data[i] += scratch_[size_t(i)];
    }
    for (int fd : peers_) write_frame(fd, data, x.nbytes());
}

void TcpCommunicator::all_gather(const Tensor& local, Tensor& out, CommStream) {
    check_host(local);
    check_host(out);
    MI_CHECK(out.dtype() == local.dtype() && local.nbytes() <= out.nbytes(),
             "all_gather: {} into {}", local.describe(), out.describe());
    if (rank_ != 0) {
        write_frame(peers_[0], local.raw(), local.nbytes());
        read_frame_into(peers_[0], out.raw(), out.nbytes(), 0);
        return;
    }
    auto* bytes = static_cast<char*>(out.raw());
    std::memcpy(bytes, local.raw(), local.nbytes());
    size_t at = local.nbytes();
    for (int64_t r = 1; r < world_; ++r) {
        const std::optional<std::string> block = read_frame(peers_[size_t(r - 1)]);
        if (!block) fail("tensor-parallel link: rank {} closed the connection", r);
        if (at + block->size() > out.nbytes())
            fail("tensor-parallel link: rank {}'s block overflows all_gather's {}", r,
                 out.describe());
        std::memcpy(bytes + at, block->data(), block->size());
        at += block->size();
    }
    if (at != out.nbytes())
        fail("tensor-parallel link: the ranks' blocks fill {} of all_gather's {} bytes", at,
             out.nbytes());
    for (int fd : peers_) write_frame(fd, out.raw(), out.nbytes());
}

void TcpCommunicator::broadcast_from_rank0(Tensor& x, CommStream) {
    check_host(x);
    if (rank_ != 0) {
        read_frame_into(peers_[0], x.raw(), x.nbytes(), 0);
        return;
    }
    for (int fd : peers_) write_frame(fd, x.raw(), x.nbytes());
}

void TcpCommunicator::send_control(std::string_view message) {
    MI_CHECK(rank_ == 0, "send_control: rank 0 only");
    for (int fd : peers_) write_frame(fd, message.data(), message.size());
}

std::optional<std::string> TcpCommunicator::receive_control() {
    MI_CHECK(rank_ != 0, "receive_control: ranks > 0 only");
    return read_frame(peers_[0]);
}

void TcpCommunicator::send_status(std::string_view status) {
    MI_CHECK(rank_ != 0, "send_status: ranks > 0 only");
    write_frame(peers_[0], status.data(), status.size());
}

std::vector<std::string> TcpCommunicator::receive_statuses() {
    MI_CHECK(rank_ == 0, "receive_statuses: rank 0 only");
    std::vector<std::string> out;
    for (int64_t r = 1; r < world_; ++r) {
        std::optional<std::string> s = read_frame(peers_[size_t(r - 1)]);
        out.push_back(s ? std::move(*s) : fmt::format("rank {} closed the connection", r));
    }
    return out;
}

}  // namespace miniinfer
