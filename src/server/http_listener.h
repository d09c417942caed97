// HttpListener: cpp-httplib's Server with the connection handling a public server needs. The
// library parses HTTP and routes; this class owns the sockets:
//
//  - One thread per open connection, made when the connection arrives (no fixed pool): 1,000
//    slow clients hold 1,000 threads and /health still gets its own at once. At most
//    `max_connections` are open; beyond that a new connection is answered 503 and closed
//    without reading it.
//  - Every request is read against a deadline (headers and body together) and a byte budget,
//    whatever its framing (Content-Length, chunked, none): a trickling or endless upload is cut
//    off (408 / 413) and never buffered past the budget. The connection then closes.
//  - drain(): stop accepting; idle keep-alive connections and requests still being read close
//    at once; handlers see draining() and end their responses; close_all() ends what is left.
//
// Handlers run on the connection's thread, so the state of "the current request" is
// per-thread: current_read_failure() and close_after_response() refer to the calling thread's
// connection.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <set>
#include <string>

namespace miniinfer {

struct ConnectionLimits {
    int max_connections = 2048;
    std::chrono::milliseconds request_read_timeout{30'000};  // headers + body of one request
    int64_t max_body_bytes = 32 << 20;                       // the decoded body
    int64_t max_header_bytes = 64 << 10;                     // request line + headers
};

// Why reading the calling thread's current request failed.
enum class ReadFailure { kNone, kTooLarge, kTimedOut, kDraining };

class HttpListener : public httplib::Server {
  public:
    explicit HttpListener(ConnectionLimits limits);
    ~HttpListener() override;

    const ConnectionLimits& limits() const { return limits_; }

    // Stops accepting (listen() then returns once every connection has closed); idle
    // connections and unfinished request reads end within ~100 ms. Thread-safe, idempotent.
    void drain();
    bool draining() const { return draining_.load(std::memory_order_relaxed); }
    // Shuts down every open connection (a blocked read or write fails at once).
    void close_all();
    int64_t num_open_connections() const { return num_open_.load(); }

    // Called once a request's headers are in (before its body is read): the body may take at
    // most max_body_bytes, framing included up to twice that. A Content-Length above the
    // limit is refused here: false, and `res` is the 413 (the connection closes after it).
    bool admit_body(const httplib::Request& req, httplib::Response& res);
    // Reads the body through `content_reader`, at most max_body_bytes after decoding (chunked,
    // gzip). nullopt when it failed: `res` is then the 413/408/400/503 error.
    std::optional<std::string> read_body(const httplib::ContentReader& content_reader,
                                         httplib::Response& res);

    // The calling thread's current request.
    static ReadFailure current_read_failure();
    static void close_after_response();  // the connection closes after this response
    // Whether the calling thread's client has closed its connection (read side at end of file,
    // or the socket in error): nobody is left to answer. Never blocks. A client that only shut
    // down its sending side counts as gone too, as in uvicorn (vLLM's server).
    static bool peer_hung_up();

    // Sets `res` to OpenAI's error JSON for `status` (no I/O).
    static void set_error(httplib::Response& res, int status, const std::string& message,
                          const std::string& type);

  private:
    class Connections;  // the TaskQueue: one thread per connection
    class SocketStream;
    struct Connection;

    bool process_and_close_socket(socket_t sock) override;
    // Waits until `sock` has bytes (true), or the keep-alive time passed / draining (false).
    bool wait_for_request(socket_t sock) const;

    static thread_local Connection* t_current_;  // the calling thread's connection
    static thread_local bool t_refuse_;          // the accepting thread: this one is over the cap

    ConnectionLimits limits_;
    std::atomic<bool> draining_{false};
    std::atomic<int64_t> num_open_{0};
    std::mutex sockets_mutex_;
    std::set<socket_t> sockets_;  // open connections
};

}  // namespace miniinfer
