// Logging through spdlog, to stderr. Level from MINIINFER_LOG_LEVEL (trace, debug, info, warn,
// error, off); default info. Use MI_LOG_INFO("loaded {} tensors", n) and friends.
#pragma once

#include <spdlog/spdlog.h>

namespace miniinfer {
// Idempotent; called by the CLI and the engine before the first log line.
void init_logging();
}  // namespace miniinfer

#define MI_LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define MI_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define MI_LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define MI_LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)
