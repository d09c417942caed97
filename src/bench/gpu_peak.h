// The figures `miniinfer bench` computes its speed of light against: the card's own memory
// bandwidth and dense bf16 matrix rate, from a table of known cards by name, else worked out
// from what the CUDA runtime says about the card. Plain host code (the CUDA query aside).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "bench/workloads.h"

namespace miniinfer::bench {

// What the CUDA runtime says about a card (cudaDeviceGetAttribute), for cards the table lacks.
struct GpuProperties {
    std::string name;  // cudaDeviceProp::name, e.g. "NVIDIA H100 80GB HBM3"
    int64_t memory_clock_khz = 0, memory_bus_width_bits = 0;
    int64_t num_sms = 0, sm_clock_khz = 0;
    int compute_major = 0, compute_minor = 0;
};

// A speed of light's figures and where they came from. A figure not known is infinite: it then
// bounds nothing (a SOL of the memory traffic alone, or of the matmuls alone).
struct GpuPeak {
    std::string name;  // the card's name, or "given" (the bench flags on the CPU)
    SolHardware hardware;
    std::string source;  // "table", "from device properties", "--hbm-bytes-per-s", ...
};

// The figures of a known card (HBM bandwidth, dense bf16 tensor-core rate: gpu_peak.cpp), matched
// on the words of its CUDA name (case-insensitive; "GH200" is not "H200"); nullopt for others.
std::optional<SolHardware> known_gpu(std::string_view name);

// The table's figures for props.name, else (source "from device properties"): bandwidth =
// 2 (double data rate) x memory clock x bus width, matrix rate = SMs x clock x the dense bf16
// FLOP per SM per clock of its architecture (8.0, 8.6, 8.9, 9.0, 10.0; others: unknown).
GpuPeak gpu_peak(const GpuProperties& props);

// bench's header line: "SOL: NVIDIA H100 80GB HBM3, 3.35 TB/s, 790 TFLOP/s bf16 (table)".
std::string describe(const GpuPeak& peak);

#ifdef MINIINFER_HAS_CUDA
// The current CUDA device's properties (gpu_properties_cuda.cpp; aborts on a CUDA error).
GpuProperties current_gpu_properties();
#endif

}  // namespace miniinfer::bench
