#include "core/host_memory.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace miniinfer {

int64_t peak_host_memory_bytes() {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line))
        if (line.starts_with("VmHWM:")) return std::stoll(line.substr(6)) * 1024;  // "... kB"
    return 0;
}

double process_age_seconds() {
    std::ifstream stat_file("/proc/self/stat");
    std::string stat;
    std::getline(stat_file, stat);
    // Field 2 (the command) is in parentheses and may hold spaces: count from the last ')'.
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) return -1;
    std::istringstream fields(stat.substr(close + 1));
    std::string field;  // after the loop, field 22: the start time, in clock ticks after boot
    for (int i = 3; i <= 22; ++i) fields >> field;
    double uptime = 0;
    std::ifstream uptime_file("/proc/uptime");
    const long ticks = sysconf(_SC_CLK_TCK);
    if (!fields || !(uptime_file >> uptime) || ticks <= 0) return -1;
    return uptime - std::stod(field) / double(ticks);
}

}  // namespace miniinfer
