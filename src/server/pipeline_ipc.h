// ZeroMQ plumbing of the multi-process pipeline: the private directory that holds the ipc://
// socket files, and PUSH/PULL sockets that carry one MessagePack message per ZeroMQ message.
//
// Each process binds one PULL socket, its inbox (ipc://DIR/<role>.ipc), and connects a PUSH
// socket to each inbox it sends to. Queues are unbounded (no high-water mark): a send never
// blocks and never drops. Sockets close without lingering.
#pragma once

#include <zmq.hpp>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>

#include "core/json.h"

namespace miniinfer::pipeline {

// A fresh private directory (mkdtemp, mode 0700) removed with everything in it on destruction.
class IpcDir {
  public:
    IpcDir();
    ~IpcDir();
    IpcDir(const IpcDir&) = delete;
    IpcDir& operator=(const IpcDir&) = delete;

    const std::filesystem::path& path() const { return path_; }
    // The endpoint of a process's inbox in `dir`, e.g. "ipc:///tmp/miniinfer-Ab12/engine.ipc".
    static std::string endpoint(const std::filesystem::path& dir, const std::string& role);

  private:
    std::filesystem::path path_;
};

// A PULL socket bound to `endpoint` (the caller's inbox).
zmq::socket_t bind_inbox(zmq::context_t& context, const std::string& endpoint);
// A PUSH socket connected to another process's inbox (messages queue until it is there).
zmq::socket_t connect_to(zmq::context_t& context, const std::string& endpoint);

void send(zmq::socket_t& socket, const Json& message);
// Sends bytes received before, unchanged (the detokenizer forwards what it does not handle).
void send_raw(zmq::socket_t& socket, const zmq::message_t& message);
// The next message if one arrives within `timeout` (0: only one already there). Throws Error
// on a message that does not decode (a bug in a peer, reported with the endpoint).
std::optional<Json> receive(zmq::socket_t& socket, std::chrono::milliseconds timeout,
                            zmq::message_t* raw = nullptr);

}  // namespace miniinfer::pipeline
