// The process's host memory and age, as the kernel counts them (/proc).
#pragma once

#include <cstdint>

namespace miniinfer {

// VmHWM: the most resident memory this process has held since it started, in bytes (file
// mappings included). 0 where /proc is not available.
int64_t peak_host_memory_bytes();

// Seconds since this process started (/proc/self/stat's start time against /proc/uptime, to the
// kernel's clock tick, 10 ms), or -1 where /proc cannot tell.
double process_age_seconds();

}  // namespace miniinfer
