// The process's host memory, as the kernel counts it (/proc/self/status).
#pragma once

#include <cstdint>

namespace miniinfer {

// VmHWM: the most resident memory this process has held since it started, in bytes (file
// mappings included). 0 where /proc is not available.
int64_t peak_host_memory_bytes();

}  // namespace miniinfer
