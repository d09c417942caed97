// The host-side switch of programmatic dependent launch (kernels/cuda/primitives/launch.cuh): on by
// default; the CUDA runner sets it from Tuning::pdl, tests turn it off to compare.
#pragma once

#include <atomic>

namespace miniinfer::cuda {

inline std::atomic<bool>& pdl_switch() {
    static std::atomic<bool> on = true;
    return on;
}
// Whether launch_kernel lets a kernel start before the previous one in its stream has finished.
inline bool pdl_enabled() {
    return pdl_switch().load(std::memory_order_relaxed);
}
inline void set_pdl_enabled(bool on) {
    pdl_switch().store(on, std::memory_order_relaxed);
}

}  // namespace miniinfer::cuda
