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
    const std::vector<KernelTime> times = {{"gemv_kernel<1, 1, float>", 300, 6000.0},
                                           {"decode_kernel<128, 2, __nv_bfloat16>", 28, 3000.0},
                                           {"silu_mul_kernel<8>", 28, 1000.0}};
    const std::string table = format_kernel_times(times, 2);
    EXPECT_NE(table.find("356 kernel launches, 10.0 ms of kernel time"), std::string::npos)
        << table;
    EXPECT_NE(table.find("| gemv_kernel<1, 1, float> | 300 | 6.00 | 60.0% | 20.0 |"),
              std::string::npos)
        << table;
    EXPECT_NE(table.find("| decode_kernel<128, 2, __nv_bfloat16> | 28 | 3.00 | 30.0% | 107.1 |"),
              std::string::npos)
        << table;
    EXPECT_NE(table.find("| (1 others) | 28 | 1.00 | 10.0% | |"), std::string::npos) << table;
    EXPECT_EQ(table.find("silu_mul_kernel"), std::string::npos) << table;
    // All of them: no "others" row.
    EXPECT_EQ(format_kernel_times(times, 10).find("others"), std::string::npos);
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
