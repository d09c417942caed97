// What the CUDA-runtime-only benchmark programs (bench_read_bandwidth.cu, bench_wgmma.cu) share:
// a check of each runtime call, and the best time of a few launches. The op benchmarks
// (bench_cuda_ops) time through gpu_testing.h instead.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>

// Inside a function returning int: the call's error, printed, returns 1.
#define MI_BENCH_CHECK(x)                                                    \
    do {                                                                     \
        const cudaError_t e = (x);                                           \
        if (e != cudaSuccess) {                                              \
            std::printf("CUDA error: %s (%s)\n", cudaGetErrorString(e), #x); \
            return 1;                                                        \
        }                                                                    \
    } while (0)

// The best of `runs` timed calls of launch() (on the default stream, between events) after
// `warmups` untimed ones, ms.
template <class Launch>
float best_ms(Launch launch, int warmups = 3, int runs = 10) {
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    for (int i = 0; i < warmups; ++i) launch();
    float best = 1e30f;
    for (int i = 0; i < runs; ++i) {
        cudaEventRecord(start);
        launch();
        cudaEventRecord(stop);
        cudaEventSynchronize(stop);
        float ms = 0;
        cudaEventElapsedTime(&ms, start, stop);
        best = ms < best ? ms : best;
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return best;
}
