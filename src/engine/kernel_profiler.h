// KernelProfiler: the GPU time of every kernel the process runs, summed by kernel, from CUPTI's
// activity records (CUDA graph replays included) — where a step's time goes, for `miniinfer
// bench --profile-kernels`. Two sums a kernel: its duration (start to end), and its exposed
// time, the part of it its stream waited for: with programmatic dependent launch a kernel
// starts before the one before it ends and its duration includes that overlap, so durations
// add up to more than the stream's time; exposed times do not (they and the gaps between
// kernels make up the stream's span). CUPTI (libcupti.so, part of the CUDA toolkit) is loaded
// when a profiler starts, so neither the binary nor a run without the flag needs it. Recording
// adds host cost to every launch: the wall time of a profiled run is not the benchmark's; the
// kernels' own times are what it is for.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace miniinfer {

struct KernelTime {
    std::string name;  // demangled, namespaces and parameter list left out
    int64_t calls = 0;
    double total_us = 0;    // durations
    double exposed_us = 0;  // from the later of its start and the previous kernel's end
};

// One kernel execution as CUPTI records it (ns timestamps).
struct KernelRecord {
    std::string name;
    uint32_t stream = 0;
    uint64_t start_ns = 0, end_ns = 0;
};

// The records summed by name (as given: the caller shortens names), with each kernel's exposed
// time: max(0, end - max(start, the latest end of the kernels that started before it on its
// stream)). Unordered input; most total duration first.
std::vector<KernelTime> sum_kernel_records(std::vector<KernelRecord> records);

class KernelProfiler {
  public:
    // Starts recording. Throws Error when this build has no CUDA, CUPTI cannot be loaded, or
    // another profiler holds it; one profiler at a time.
    KernelProfiler();
    ~KernelProfiler();
    KernelProfiler(const KernelProfiler&) = delete;
    KernelProfiler& operator=(const KernelProfiler&) = delete;

    // Stops recording (the GPU work launched so far must have finished: synchronise first) and
    // returns every kernel seen, most total time first.
    std::vector<KernelTime> stop();

  private:
    bool running_ = false;
};

// A kernel's name as the table shows it: demangled, our namespaces and the parameter list left
// out, at most 100 characters ("_ZN9miniinfer4cuda12_GLOBAL__N_111gemv_kernelILi1ELi1EfEEv..."
// -> "gemv_kernel<1, 1, float>"); a name that is not mangled (cuBLAS's) stays as it is.
std::string kernel_display_name(const std::string& mangled);

// A Markdown table of the `top` kernels with the most time: calls, total ms, share of all the
// kernels' time, mean µs, exposed ms and its share of all exposed time, mean exposed µs; then
// one line with the rest.
std::string format_kernel_times(const std::vector<KernelTime>& times, size_t top);

}  // namespace miniinfer
