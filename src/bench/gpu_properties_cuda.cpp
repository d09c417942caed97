// The CUDA half of gpu_peak.h: the current device's name and the attributes its speed of light
// is worked out from when the table does not know it. CUDA 13's cudaDeviceProp has no clock
// rates any more: they are read as attributes.
#include <cuda_runtime.h>

#include "bench/gpu_peak.h"
#include "core/cuda/cuda_check.h"

namespace miniinfer::bench {

GpuProperties current_gpu_properties() {
    int device = 0;
    MI_CUDA_CHECK(cudaGetDevice(&device));
    cudaDeviceProp prop{};
    MI_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    const auto attribute = [device](cudaDeviceAttr a) {
        int value = 0;
        MI_CUDA_CHECK(cudaDeviceGetAttribute(&value, a, device));
        return value;
    };
    return {.name = prop.name,
            .memory_clock_khz = attribute(cudaDevAttrMemoryClockRate),
            .memory_bus_width_bits = attribute(cudaDevAttrGlobalMemoryBusWidth),
            .num_sms = attribute(cudaDevAttrMultiProcessorCount),
            .sm_clock_khz = attribute(cudaDevAttrClockRate),
            .compute_major = attribute(cudaDevAttrComputeCapabilityMajor),
            .compute_minor = attribute(cudaDevAttrComputeCapabilityMinor)};
}

}  // namespace miniinfer::bench
