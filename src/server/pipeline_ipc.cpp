#include "server/pipeline_ipc.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>

#include "core/logging.h"
#include "server/pipeline_messages.h"

namespace miniinfer::pipeline {

IpcDir::IpcDir() {
    // sun_path holds 108 bytes: keep the directory short ("/tmp/miniinfer-XXXXXX").
    std::string pattern = "/tmp/miniinfer-XXXXXX";
    if (!mkdtemp(pattern.data()))
        fail("cannot create a directory for the pipeline's sockets: {}", std::strerror(errno));
    path_ = pattern;
}

IpcDir::~IpcDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    if (ec) MI_LOG_WARN("cannot remove {}: {}", path_.string(), ec.message());
}

std::string IpcDir::endpoint(const std::filesystem::path& dir, const std::string& role) {
    return "ipc://" + (dir / (role + ".ipc")).string();
}

namespace {
void configure(zmq::socket_t& socket) {
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::sndhwm, 0);
    socket.set(zmq::sockopt::rcvhwm, 0);
}
}  // namespace

zmq::socket_t bind_inbox(zmq::context_t& context, const std::string& endpoint) {
    zmq::socket_t socket(context, zmq::socket_type::pull);
    configure(socket);
    socket.bind(endpoint);
    return socket;
}

zmq::socket_t connect_to(zmq::context_t& context, const std::string& endpoint) {
    zmq::socket_t socket(context, zmq::socket_type::push);
    configure(socket);
    socket.connect(endpoint);
    return socket;
}

void send(zmq::socket_t& socket, const Json& message) {
    const std::string bytes = encode(message);
    socket.send(zmq::buffer(bytes), zmq::send_flags::none);
}

void send_raw(zmq::socket_t& socket, const zmq::message_t& message) {
    socket.send(zmq::buffer(message.data(), message.size()), zmq::send_flags::none);
}

std::optional<Json> receive(zmq::socket_t& socket, std::chrono::milliseconds timeout,
                            zmq::message_t* raw) {
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    if (timeout.count() > 0 && zmq::poll(&item, 1, timeout) == 0) return std::nullopt;
    zmq::message_t message;
    if (!socket.recv(message, zmq::recv_flags::dontwait)) return std::nullopt;
    Json json = decode(std::string_view(static_cast<const char*>(message.data()), message.size()));
    if (raw) *raw = std::move(message);
    return json;
}

}  // namespace miniinfer::pipeline
