#include "core/host_memory.h"

#include <fstream>
#include <string>

namespace miniinfer {

int64_t peak_host_memory_bytes() {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line))
        if (line.starts_with("VmHWM:")) return std::stoll(line.substr(6)) * 1024;  // "... kB"
    return 0;
}

}  // namespace miniinfer
