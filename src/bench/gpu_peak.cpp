#include "bench/gpu_peak.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <limits>
#include <vector>

namespace miniinfer::bench {
namespace {

constexpr double kUnknown = std::numeric_limits<double>::infinity();

// Memory bandwidth from NVIDIA's spec sheets; the matrix rate dense bf16, as measured on the H100
// and H200 SXM (an 8192^3 product on random data: ~790 TFLOP/s on both, against 989 on paper,
// docs/BENCHMARKS.md), else the spec sheet's. A card matches the first entry whose words all
// appear among its name's words: the specific variants come before the plain name.
struct KnownGpu {
    std::array<std::string_view, 3> words;  // "" for none
    double hbm_bytes_per_s, matmul_flops;
};
constexpr KnownGpu kKnownGpus[] = {
    {{"H100", "PCIE"}, 2.0e12, 756e12},            // "NVIDIA H100 PCIe"
    {{"H100", "NVL"}, 3.9e12, 835e12},             // "NVIDIA H100 NVL"
    {{"H100"}, 3.35e12, 790e12},                   // "NVIDIA H100 80GB HBM3" (SXM)
    {{"H200", "NVL"}, 4.8e12, 835e12},             // "NVIDIA H200 NVL"
    {{"H200"}, 4.8e12, 790e12},                    // "NVIDIA H200" (SXM)
    {{"A100", "80GB", "PCIE"}, 1.935e12, 312e12},  // "NVIDIA A100 80GB PCIe"
    {{"A100", "80GB"}, 2.039e12, 312e12},          // "NVIDIA A100-SXM4-80GB"
    {{"A100"}, 1.555e12, 312e12},                  // "NVIDIA A100-SXM4-40GB", "...-PCIE-40GB"
    {{"L40S"}, 0.864e12, 362e12},                  // "NVIDIA L40S"
};

// The upper-cased words of a CUDA device name, split at spaces and dashes.
std::vector<std::string> name_words(std::string_view name) {
    std::vector<std::string> words(1);
    for (char c : name) {
        if (c == ' ' || c == '-') {
            if (!words.back().empty()) words.emplace_back();
        } else {
            words.back() += char(std::toupper(static_cast<unsigned char>(c)));
        }
    }
    return words;
}

// Dense bf16 tensor-core FLOP per SM per clock, by compute capability (0: not known).
double bf16_flop_per_sm_clock(int major, int minor) {
    if (major == 8) return minor == 0 ? 2048 : minor == 6 || minor == 9 ? 1024 : 0;
    if (major == 9 && minor == 0) return 4096;
    if (major == 10 && minor == 0) return 8192;
    return 0;
}

std::string rate(double value, double unit, const char* format, const char* what) {
    return value == kUnknown ? fmt::format("{} unknown", what)
                             : fmt::format(fmt::runtime(format), value / unit);
}

}  // namespace

std::optional<SolHardware> known_gpu(std::string_view name) {
    const std::vector<std::string> words = name_words(name);
    for (const KnownGpu& gpu : kKnownGpus)
        if (std::all_of(gpu.words.begin(), gpu.words.end(), [&](std::string_view w) {
                return w.empty() || std::find(words.begin(), words.end(), w) != words.end();
            }))
            return SolHardware{.hbm_bytes_per_s = gpu.hbm_bytes_per_s,
                               .matmul_flops = gpu.matmul_flops};
    return std::nullopt;
}

GpuPeak gpu_peak(const GpuProperties& p) {
    if (std::optional<SolHardware> known = known_gpu(p.name)) return {p.name, *known, "table"};
    const double bandwidth =
        2.0 * double(p.memory_clock_khz) * 1e3 * double(p.memory_bus_width_bits) / 8;
    const double flops = double(p.num_sms) * double(p.sm_clock_khz) * 1e3 *
                         bf16_flop_per_sm_clock(p.compute_major, p.compute_minor);
    return {p.name,
            {.hbm_bytes_per_s = bandwidth > 0 ? bandwidth : kUnknown,
             .matmul_flops = flops > 0 ? flops : kUnknown},
            "from device properties"};
}

std::string describe(const GpuPeak& peak) {
    return fmt::format("SOL: {}, {}, {} ({})", peak.name,
                       rate(peak.hardware.hbm_bytes_per_s, 1e12, "{:.3g} TB/s", "memory bandwidth"),
                       rate(peak.hardware.matmul_flops, 1e12, "{:.0f} TFLOP/s bf16", "matrix rate"),
                       peak.source);
}

}  // namespace miniinfer::bench
