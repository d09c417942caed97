// bench --profile-kernels' host side: kernel names as the table shows them, and the table.
// (The CUPTI recording itself runs on a GPU: tests/gpu/test_cuda_model.cpp.)
#include <gtest/gtest.h>

#include "core/check.h"
#include "engine/kernel_profiler.h"

using namespace miniinfer;

TEST(KernelProfiler, DisplayNamesDropNamespacesAndParameters) {
    // miniinfer::cuda::(anonymous namespace)::gemv_kernel<1, 1, float>(float const*, float*,
    // long, int), as g++ and nvcc mangle it.
    EXPECT_EQ(kernel_display_name("_ZN9miniinfer4cuda12_GLOBAL__N_111gemv_kernelILi1ELi1EfEEvPKT1_"
                                  "PS3_li"),
              "gemv_kernel<1, 1, float>");
    // Names that are not mangled (cuBLAS's kernels) stay as they are.
    EXPECT_EQ(kernel_display_name("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"),
              "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64");
    const std::string long_name(150, 'k');
    EXPECT_EQ(kernel_display_name(long_name).size(), 100u);
    EXPECT_EQ(kernel_display_name(long_name).substr(97), "...");
}

TEST(KernelProfiler, TableShowsTheTopKernelsAndTheRest) {
    const std::vector<KernelTime> times = {
        {"gemv_kernel<1, 1, float>", 300, 6000.0, 3000.0},
        {"decode_kernel<128, 2, __nv_bfloat16>", 28, 3000.0, 1500.0},
        {"silu_mul_kernel<8>", 28, 1000.0, 500.0}};
    const std::string table = format_kernel_times(times, 2);
    EXPECT_NE(table.find("356 kernel launches, 10.0 ms of kernel time, 5.0 ms of it exposed"),
              std::string::npos)
        << table;
    EXPECT_NE(table.find(
                  "| gemv_kernel<1, 1, float> | 300 | 6.00 | 60.0% | 20.0 | 3.00 | 60.0% | 10.0 |"),
              std::string::npos)
        << table;
    EXPECT_NE(table.find("| decode_kernel<128, 2, __nv_bfloat16> | 28 | 3.00 | 30.0% | 107.1 | "
                         "1.50 | 30.0% | 53.6 |"),
              std::string::npos)
        << table;
    EXPECT_NE(table.find("| (1 others) | 28 | 1.00 | 10.0% | | 0.50 | 10.0% | |"),
              std::string::npos)
        << table;
    EXPECT_EQ(table.find("silu_mul_kernel"), std::string::npos) << table;
    // All of them: no "others" row.
    EXPECT_EQ(format_kernel_times(times, 10).find("others"), std::string::npos);
}

// Exposed time: what a stream waits for. Kernels overlapping the one before (programmatic
// dependent launch) count from that one's end; a gap before a kernel counts for none; streams
// are apart; the input's order does not matter.
TEST(KernelProfiler, ExposedTimeCountsOnlyWhatTheStreamWaitsFor) {
    const std::vector<KernelRecord> records = {
        {"b", 1, 1'500, 4'000},  // starts 500 ns before a ends: 2,000 exposed of 2,500
        {"a", 1, 0, 2'000},      // first on its stream: all of it
        {"a", 1, 5'000, 6'000},  // after a 1,000 ns gap: its own 1,000
        {"c", 1, 5'200, 5'900},  // inside the one before: none exposed
        {"c", 1, 5'950, 6'500},  // counts from a's end (6,000), not c's: 500
        {"b", 2, 1'000, 2'000},  // another stream: all of it
    };
    const std::vector<KernelTime> times = sum_kernel_records(records);
    ASSERT_EQ(times.size(), 3u);
    EXPECT_EQ(times[0].name, "b");  // most duration first: 3,500 ns
    EXPECT_EQ(times[0].calls, 2);
    EXPECT_DOUBLE_EQ(times[0].total_us, 3.5);
    EXPECT_DOUBLE_EQ(times[0].exposed_us, 3.0);
    EXPECT_EQ(times[1].name, "a");
    EXPECT_DOUBLE_EQ(times[1].total_us, 3.0);
    EXPECT_DOUBLE_EQ(times[1].exposed_us, 3.0);
    EXPECT_EQ(times[2].name, "c");
    EXPECT_DOUBLE_EQ(times[2].total_us, 1.25);
    EXPECT_DOUBLE_EQ(times[2].exposed_us, 0.5);
}

#ifndef MINIINFER_HAS_CUDA
TEST(KernelProfiler, CpuBuildSaysItNeedsCuda) {
    try {
        KernelProfiler profiler;
        FAIL() << "a CPU-only build started a kernel profiler";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("needs a CUDA build"), std::string::npos) << e.what();
    }
}
#endif
