#include "server/http_listener.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "core/logging.h"
#include "server/openai_protocol.h"

namespace miniinfer {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Blocking waits are cut into slices this long, so a drain is noticed within one.
constexpr milliseconds kPollSlice{100};

// Waits up to `timeout` for `events` on `sock`; the revents, 0 on timeout, -1 on error.
int poll_socket(socket_t sock, short events, milliseconds timeout) {
    pollfd p{sock, events, 0};
    for (;;) {
        const int n = ::poll(&p, 1, int(timeout.count()));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -1;
        return n == 0 ? 0 : p.revents;
    }
}

std::string error_json(int status, const std::string& message, const std::string& type) {
    return ApiError{status, message, type}.body().dump();
}

// Over the connection cap: a 503 written without blocking, then the socket is closed unread.
void refuse(socket_t sock) {
    static const std::string response = [] {
        const std::string body = error_json(503, "too many open connections", "server_error");
        return fmt::format(
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            "Content-Length: {}\r\nConnection: close\r\n\r\n{}",
            body.size(), body);
    }();
    [[maybe_unused]] ssize_t sent =
        ::send(sock, response.data(), response.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    ::shutdown(sock, SHUT_WR);
    char sink[4096];  // what the client already sent: left unread, close() would send a reset
    [[maybe_unused]] ssize_t got = ::recv(sock, sink, sizeof sink, MSG_DONTWAIT);
    ::close(sock);
}

}  // namespace

// The state of one connection's current request, reached by the handlers through the thread.
struct HttpListener::Connection {
    socket_t sock = -1;
    Clock::time_point deadline;  // for reading the current request
    int64_t bytes_read = 0;      // of the current request, as received (framing included)
    int64_t byte_budget = 0;
    ReadFailure failure = ReadFailure::kNone;
    bool close_after = false;

    void begin_request(const ConnectionLimits& limits) {
        deadline = Clock::now() + limits.request_read_timeout;
        bytes_read = 0;
        byte_budget = limits.max_header_bytes;
        failure = ReadFailure::kNone;
        close_after = false;
    }
};

thread_local HttpListener::Connection* HttpListener::t_current_ = nullptr;
thread_local bool HttpListener::t_refuse_ = false;

// The TaskQueue httplib hands each accepted connection to: a new thread per connection while
// fewer than max_connections are open; over that, the connection is refused on the accepting
// thread. shutdown() (after the last accept) waits for every connection thread.
class HttpListener::Connections : public httplib::TaskQueue {
  public:
    explicit Connections(int max_connections) : max_connections_(max_connections) {}

    void enqueue(std::function<void()> fn) override {
        {
            std::lock_guard lock(mutex_);
            if (num_running_ < max_connections_) {
                try {
                    std::thread([this, fn = std::move(fn)]() mutable {
                        fn();
                        fn = nullptr;
                        std::lock_guard done(mutex_);
                        if (--num_running_ == 0) all_done_.notify_all();
                    }).detach();
                    ++num_running_;
                    return;
                } catch (const std::system_error& e) {  // out of threads: refuse this one
                    MI_LOG_WARN("cannot start a connection thread: {}", e.what());
                }
            }
        }
        t_refuse_ = true;
        fn();
        t_refuse_ = false;
    }

    void shutdown() override {
        std::unique_lock lock(mutex_);
        all_done_.wait(lock, [&] { return num_running_ == 0; });
    }

  private:
    const int max_connections_;
    std::mutex mutex_;
    std::condition_variable all_done_;
    int num_running_ = 0;
};

// httplib's Stream over one connection's socket: buffered reads that fail (with a reason in
// the Connection) once the request's deadline or byte budget is passed or a drain began.
class HttpListener::SocketStream : public httplib::Stream {
  public:
    SocketStream(const HttpListener& owner, Connection& connection, milliseconds idle_timeout,
                 milliseconds write_timeout)
        : owner_(owner),
          c_(connection),
          idle_timeout_(idle_timeout),
          write_timeout_(write_timeout) {}

    bool has_buffered() const { return begin_ < end_; }

    bool is_readable() const override {
        return has_buffered() || poll_socket(c_.sock, POLLIN, idle_timeout_) > 0;
    }

    bool is_writable() const override {
        const int revents = poll_socket(c_.sock, POLLOUT, write_timeout_);
        return revents > 0 && (revents & POLLOUT) && !(revents & (POLLERR | POLLHUP));
    }

    ssize_t read(char* ptr, size_t size) override {
        if (!has_buffered()) {
            if (!wait_readable()) return -1;
            ssize_t n;
            do n = ::recv(c_.sock, buffer_, sizeof buffer_, 0);
            while (n < 0 && errno == EINTR);
            if (n <= 0) return n;
            c_.bytes_read += n;
            if (c_.bytes_read > c_.byte_budget) {
                c_.failure = ReadFailure::kTooLarge;
                return -1;
            }
            begin_ = 0;
            end_ = size_t(n);
        }
        const size_t n = std::min(size, end_ - begin_);
        std::memcpy(ptr, buffer_ + begin_, n);
        begin_ += n;
        return ssize_t(n);
    }

    ssize_t write(const char* ptr, size_t size) override {
        if (!is_writable()) return -1;
        ssize_t n;
        do n = ::send(c_.sock, ptr, size, MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        return n;
    }

    void get_remote_ip_and_port(std::string& ip, int& port) const override {
        address(::getpeername, ip, port);
    }
    void get_local_ip_and_port(std::string& ip, int& port) const override {
        address(::getsockname, ip, port);
    }
    socket_t socket() const override { return c_.sock; }

  private:
    // Until bytes arrive (true), or the request's deadline, the idle timeout or a drain.
    bool wait_readable() {
        const auto idle_end = Clock::now() + idle_timeout_;
        for (;;) {
            if (owner_.draining()) return fail(ReadFailure::kDraining);
            const auto now = Clock::now();
            if (now >= c_.deadline || now >= idle_end) return fail(ReadFailure::kTimedOut);
            const auto left = std::min(c_.deadline, idle_end) - now;
            const auto slice =
                std::min<milliseconds>(kPollSlice, std::chrono::ceil<milliseconds>(left));
            const int revents = poll_socket(c_.sock, POLLIN, slice);
            if (revents < 0) return false;
            if (revents > 0) return true;  // data, end of stream or an error: recv tells
        }
    }
    bool fail(ReadFailure why) {
        c_.failure = why;
        return false;
    }

    template <typename GetName>
    void address(GetName get_name, std::string& ip, int& port) const {
        sockaddr_storage addr{};
        socklen_t len = sizeof addr;
        ip.clear();
        port = 0;
        if (get_name(c_.sock, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return;
        char host[NI_MAXHOST], serv[NI_MAXSERV];
        if (getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, serv,
                        sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) != 0)
            return;
        ip = host;
        port = std::atoi(serv);
    }

    const HttpListener& owner_;
    Connection& c_;
    milliseconds idle_timeout_, write_timeout_;
    char buffer_[16 << 10];
    size_t begin_ = 0, end_ = 0;
};

HttpListener::HttpListener(ConnectionLimits limits) : limits_(limits) {
    const int max_connections = limits_.max_connections;
    new_task_queue = [max_connections] { return new Connections(max_connections); };
    set_payload_max_length(size_t(limits_.max_body_bytes));
}

HttpListener::~HttpListener() = default;

bool HttpListener::process_and_close_socket(socket_t sock) {
    if (t_refuse_) {
        refuse(sock);
        return true;
    }
    ++num_open_;
    {
        std::lock_guard lock(sockets_mutex_);
        sockets_.insert(sock);
    }
    Connection connection;
    connection.sock = sock;
    t_current_ = &connection;
    SocketStream stream(*this, connection,
                        milliseconds(read_timeout_sec_ * 1000 + read_timeout_usec_ / 1000),
                        milliseconds(write_timeout_sec_ * 1000 + write_timeout_usec_ / 1000));
    for (size_t remaining = keep_alive_max_count_; remaining > 0; --remaining) {
        if (!stream.has_buffered() && !wait_for_request(sock)) break;
        connection.begin_request(limits_);
        const bool last = remaining == 1 || draining();
        bool closed = false;
        if (!process_request(stream, last, closed, nullptr) || closed || last ||
            connection.close_after ||
            connection.failure !=
                ReadFailure::kNone)  // what follows a cut-off request is not a request
            break;
    }
    t_current_ = nullptr;
    {
        std::lock_guard lock(sockets_mutex_);
        sockets_.erase(sock);
    }
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    --num_open_;
    return true;
}

bool HttpListener::wait_for_request(socket_t sock) const {
    const auto end = Clock::now() + std::chrono::seconds(keep_alive_timeout_sec_);
    while (!draining()) {
        const auto now = Clock::now();
        if (now >= end) return false;
        const int revents = poll_socket(
            sock, POLLIN,
            std::min<milliseconds>(kPollSlice, std::chrono::ceil<milliseconds>(end - now)));
        if (revents != 0) return revents > 0;
    }
    return false;
}

void HttpListener::drain() {
    if (draining_.exchange(true)) return;
    stop();
}

void HttpListener::close_all() {
    std::lock_guard lock(sockets_mutex_);
    for (socket_t sock : sockets_) ::shutdown(sock, SHUT_RDWR);
}

bool HttpListener::admit_body(const httplib::Request& req, httplib::Response& res) {
    Connection* c = t_current_;
    if (!c) return true;
    c->byte_budget = c->bytes_read + 2 * limits_.max_body_bytes + 4096;
    if (!req.has_header("Content-Length")) return true;
    const std::string length = req.get_header_value("Content-Length");
    uint64_t n = 0;
    const auto [end, ec] = std::from_chars(length.data(), length.data() + length.size(), n);
    if (ec == std::errc() && end == length.data() + length.size() &&
        n <= uint64_t(limits_.max_body_bytes))
        return true;
    if (ec == std::errc::invalid_argument || end != length.data() + length.size()) {
        set_error(res, 400, "the Content-Length header is not a number", "invalid_request_error");
    } else {
        c->failure = ReadFailure::kTooLarge;
        set_error(res, 413,
                  fmt::format("the request body is too large (the limit is {} bytes)",
                              limits_.max_body_bytes),
                  "invalid_request_error");
    }
    close_after_response();
    return false;
}

std::optional<std::string> HttpListener::read_body(const httplib::ContentReader& content_reader,
                                                   httplib::Response& res) {
    std::string body;
    bool too_large = false;
    const size_t limit = size_t(limits_.max_body_bytes);
    const bool ok = content_reader([&](const char* data, size_t n) {
        if (body.size() + n > limit) {
            too_large = true;
            return false;
        }
        body.append(data, n);
        return true;
    });
    if (ok && !too_large) return body;
    ReadFailure why = too_large ? ReadFailure::kTooLarge : current_read_failure();
    switch (why) {
        case ReadFailure::kTooLarge:
            set_error(res, 413,
                      fmt::format("the request body is too large (the limit is {} bytes)", limit),
                      "invalid_request_error");
            break;
        case ReadFailure::kTimedOut:
            set_error(res, 408, "the request was not received in time", "invalid_request_error");
            break;
        case ReadFailure::kDraining:
            set_error(res, 503, "the server is shutting down", "server_error");
            break;
        case ReadFailure::kNone:
            set_error(res, 400, "the request body could not be read", "invalid_request_error");
            break;
    }
    close_after_response();
    return std::nullopt;
}

ReadFailure HttpListener::current_read_failure() {
    return t_current_ ? t_current_->failure : ReadFailure::kNone;
}

void HttpListener::close_after_response() {
    if (t_current_) t_current_->close_after = true;
}

bool HttpListener::peer_hung_up() {
    if (!t_current_) return false;
    const int revents = poll_socket(t_current_->sock, POLLIN | POLLRDHUP, milliseconds(0));
    if (revents < 0 || (revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) return true;
    if (!(revents & POLLIN)) return false;
    char byte;  // readable: end of file, or the next pipelined request (left where it is)
    return ::recv(t_current_->sock, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

void HttpListener::set_error(httplib::Response& res, int status, const std::string& message,
                             const std::string& type) {
    res.status = status;
    res.set_content(error_json(status, message, type), "application/json");
}

}  // namespace miniinfer
