// The host-side switch of programmatic dependent launch (kernels/cuda/launch.cuh): on unless
// MINIINFER_PDL=0 is in the environment at start; tests turn it off to compare.
#pragma once

#include <atomic>

#include "core/env.h"

namespace miniinfer::cuda {

inline std::atomic<bool>& pdl_switch() {
    static std::atomic<bool> on = env_switch("MINIINFER_PDL", true);
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
