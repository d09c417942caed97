// Two kinds of failure, kept apart on purpose:
//  - MI_CHECK: a broken invariant inside MiniInfer (a bug). Prints file:line and aborts.
//  - miniinfer::Error: bad input from a user (a model directory, a request, a flag). Thrown,
//    caught at the boundary (CLI, server, engine loop) and reported to that caller only.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace miniinfer {

class Error : public std::runtime_error {
  public:
    explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Throws miniinfer::Error with a formatted message: fail("tensor {} missing", name).
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
    throw Error(fmt::format(format, std::forward<Args>(args)...));
}

[[noreturn]] inline void check_failed(const char* file, int line, const char* cond,
                                      const std::string& message) {
    std::fprintf(stderr, "%s:%d: MI_CHECK(%s) failed: %s\n", file, line, cond, message.c_str());
    std::fflush(stderr);
    std::abort();
}

}  // namespace miniinfer

#define MI_CHECK(cond, ...)                                                                   \
    do {                                                                                      \
        if (!(cond)) [[unlikely]]                                                             \
            ::miniinfer::check_failed(__FILE__, __LINE__, #cond, ::fmt::format(__VA_ARGS__)); \
    } while (0)
