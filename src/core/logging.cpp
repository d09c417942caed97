#include "core/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <mutex>

namespace miniinfer {

void init_logging() {
    static std::once_flag once;
    std::call_once(once, [] {
        auto logger = spdlog::stderr_color_mt("miniinfer");
        logger->set_pattern("%^[%H:%M:%S.%e %L]%$ %v");
        const char* level = std::getenv("MINIINFER_LOG_LEVEL");
        logger->set_level(level ? spdlog::level::from_str(level) : spdlog::level::info);
        spdlog::set_default_logger(logger);
    });
}

}  // namespace miniinfer
