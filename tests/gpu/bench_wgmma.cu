// What Hopper's warpgroup MMA (wgmma) reaches on this GPU for the shapes our sm_90a kernels
// issue: the prefill attention's S = Q·Kᵀ (A from registers, m64n64k16 over 64-key tiles, or
// m64n128k16 over 128-key ones) and O += P·V (m64n128k16, B read transposed), the expert GEMMs'
// m64n256k16 (both operands in shared memory). Not a test: it prints a table, asserts nothing.
// Usage: bench_wgmma.
//
// Each CTA is one warpgroup looping over k64 steps (4 wgmmas of k16 each, one commit group) on
// zeroed operands; 1 to 3 CTAs an SM. "pipelined" waits for all but the last group (the next
// step's wgmmas queue behind the running ones); "serial" waits for each group before issuing the
// next, as the prefill kernel does between S and the softmax. Why: the wgmma prefill attention
// runs at 300-380 TFLOP/s (under half of the H200's dense bf16 rate), and neither warp
// specialisation nor ping-pong moved it (session 25); if m64n64k16 itself runs well below
// m64n128k16, the 64-key tiles are the limit.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <type_traits>

#include "kernels/cuda/wgmma.cuh"

namespace {

#define CHECK(x)                                                             \
    do {                                                                     \
        const cudaError_t e = (x);                                           \
        if (e != cudaSuccess) {                                              \
            std::printf("CUDA error: %s (%s)\n", cudaGetErrorString(e), #x); \
            return 1;                                                        \
        }                                                                    \
    } while (0)

enum Kind { kRsKMajor, kRsTransposed, kSs };
using miniinfer::cuda::kWgmmaAtomBytes;
using miniinfer::cuda::kWgmmaRowBytes;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
using namespace miniinfer::cuda;

#define MI_D4(j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
// d[64 × 64] += a · b, A from registers (a[4]: mma.sync's A fragment), B from shared memory
// (b_desc; kTransB: MN-major, read transposed).
template <bool kTransB>
__device__ __forceinline__ void wgmma_rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b_desc,
                                         std::integral_constant<int, 64>) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31"
        "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n"
        "}\n"
        : MI_D4(0), MI_D4(1), MI_D4(2), MI_D4(3), MI_D4(4), MI_D4(5), MI_D4(6), MI_D4(7)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1), "n"(kTransB ? 1 : 0)
        : "memory");
}
// d[64 × 64] += a · b, both from shared memory, both K-major.
__device__ __forceinline__ void wgmma_ss(float (&d)[8][4], uint64_t a_desc, uint64_t b_desc,
                                         std::integral_constant<int, 64>) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, p, 1, 1, 0, 0;\n"
        "}\n"
        : MI_D4(0), MI_D4(1), MI_D4(2), MI_D4(3), MI_D4(4), MI_D4(5), MI_D4(6), MI_D4(7)
        : "l"(a_desc), "l"(b_desc), "r"(1)
        : "memory");
}

// d[64 × 128] += a · b, A from registers (a[4]: mma.sync's A fragment), B from shared memory
// (b_desc; kTransB: MN-major, read transposed).
template <bool kTransB>
__device__ __forceinline__ void wgmma_rs(float (&d)[16][4], const uint32_t (&a)[4], uint64_t b_desc,
                                         std::integral_constant<int, 128>) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, "
        "%40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, "
        "%56, %57, %58, %59, %60, %61, %62, %63"
        "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n"
        "}\n"
        : MI_D4(0), MI_D4(1), MI_D4(2), MI_D4(3), MI_D4(4), MI_D4(5), MI_D4(6), MI_D4(7), MI_D4(8),
          MI_D4(9), MI_D4(10), MI_D4(11), MI_D4(12), MI_D4(13), MI_D4(14), MI_D4(15)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1), "n"(kTransB ? 1 : 0)
        : "memory");
}
// d[64 × 128] += a · b, both from shared memory, both K-major.
__device__ __forceinline__ void wgmma_ss(float (&d)[16][4], uint64_t a_desc, uint64_t b_desc,
                                         std::integral_constant<int, 128>) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, "
        "%40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, "
        "%56, %57, %58, %59, %60, %61, %62, %63"
        "}, %64, %65, p, 1, 1, 0, 0;\n"
        "}\n"
        : MI_D4(0), MI_D4(1), MI_D4(2), MI_D4(3), MI_D4(4), MI_D4(5), MI_D4(6), MI_D4(7), MI_D4(8),
          MI_D4(9), MI_D4(10), MI_D4(11), MI_D4(12), MI_D4(13), MI_D4(14), MI_D4(15)
        : "l"(a_desc), "l"(b_desc), "r"(1)
        : "memory");
}

// d[64 × 256] += a · b, A from registers (a[4]: mma.sync's A fragment), B from shared memory
// (b_desc; kTransB: MN-major, read transposed).
template <bool kTransB>
__device__ __forceinline__ void wgmma_rs(float (&d)[32][4], const uint32_t (&a)[4], uint64_t b_desc,
                                         std::integral_constant<int, 256>) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, "
        "%40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, "
        "%56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, "
        "%72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, "
        "%88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, "
        "%104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, "
        "%120, %121, %122, %123, %124, %125, %126, %127"
        "}, {%128, %129, %130, %131}, %132, p, 1, 1, %134;\n"
        "}\n"
        : MI_D4(0), MI_D4(1), MI_D4(2), MI_D4(3), MI_D4(4), MI_D4(5), MI_D4(6), MI_D4(7), MI_D4(8),
          MI_D4(9), MI_D4(10), MI_D4(11), MI_D4(12), MI_D4(13), MI_D4(14), MI_D4(15), MI_D4(16),
          MI_D4(17), MI_D4(18), MI_D4(19), MI_D4(20), MI_D4(21), MI_D4(22), MI_D4(23), MI_D4(24),
          MI_D4(25), MI_D4(26), MI_D4(27), MI_D4(28), MI_D4(29), MI_D4(30), MI_D4(31)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1), "n"(kTransB ? 1 : 0)
        : "memory");
}
// d[64 × 256] += a · b, both from shared memory, both K-major.
__device__ __forceinline__ void wgmma_ss(float (&d)[32][4], uint64_t a_desc, uint64_t b_desc,
                                         std::integral_constant<int, 256>) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, "
        "%40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, "
        "%56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, "
        "%72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, "
        "%88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, "
        "%104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, "
        "%120, %121, %122, %123, %124, %125, %126, %127"
        "}, %128, %129, p, 1, 1, 0, 0;\n"
        "}\n"
        : MI_D4(0), MI_D4(1), MI_D4(2), MI_D4(3), MI_D4(4), MI_D4(5), MI_D4(6), MI_D4(7), MI_D4(8),
          MI_D4(9), MI_D4(10), MI_D4(11), MI_D4(12), MI_D4(13), MI_D4(14), MI_D4(15), MI_D4(16),
          MI_D4(17), MI_D4(18), MI_D4(19), MI_D4(20), MI_D4(21), MI_D4(22), MI_D4(23), MI_D4(24),
          MI_D4(25), MI_D4(26), MI_D4(27), MI_D4(28), MI_D4(29), MI_D4(30), MI_D4(31)
        : "l"(a_desc), "l"(b_desc), "r"(1)
        : "memory");
}
#undef MI_D4
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// One warpgroup: `iters` k64 steps of m64 × N × k64 into the same accumulators.
template <int N, Kind kKind>
__global__ void __launch_bounds__(128) wgmma_loop(int iters, bool serial, float* sink) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ uint8_t smem_raw[];
    const uint32_t raw = uint32_t(__cvta_generic_to_shared(smem_raw));
    const uint32_t a_base = (raw + kWgmmaAtomBytes - 1) & ~uint32_t(kWgmmaAtomBytes - 1);
    const uint32_t b_base = a_base + 64 * kWgmmaRowBytes;  // A: 64 rows of 128 bytes
    uint8_t* zero_from = smem_raw + (a_base - raw);
    for (int i = int(threadIdx.x); i < (64 + N) * kWgmmaRowBytes; i += 128) zero_from[i] = 0;
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    float d[N / 8][4];
#pragma unroll
    for (int j = 0; j < N / 8; ++j) d[j][0] = d[j][1] = d[j][2] = d[j][3] = 0.f;
    uint32_t a[4] = {0, 0, 0, 0};
    for (int it = 0; it < iters; ++it) {
        wgmma_fence();
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            if constexpr (kKind == kSs)
                wgmma_ss(d, smem_desc(a_base) + 2 * s, smem_desc(b_base) + 2 * s,
                         std::integral_constant<int, N>{});
            else if constexpr (kKind == kRsKMajor)
                wgmma_rs<false>(d, a, smem_desc(b_base) + 2 * s, std::integral_constant<int, N>{});
            else  // B as V of P·V: k16 slice s two atoms on, 64 n per 64 k rows (8 KB)
                wgmma_rs<true>(d, a, smem_desc_mn(b_base + s * 2 * kWgmmaAtomBytes, 8192),
                               std::integral_constant<int, N>{});
        }
        wgmma_commit();
        if (serial)
            wgmma_wait<0>();
        else
            wgmma_wait<1>();
    }
    wgmma_wait<0>();
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < N / 8; ++j) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            wgmma_fence_operand(d[j][i]);
            acc += d[j][i];
        }
    }
    if (acc != 0.f) *sink = acc;  // zeros in, zeros out: never written, keeps the products
#else
    if (threadIdx.x == 0 && iters < 0) *sink = 0.f;  // built without sm_90a: nothing to measure
#endif
}

// The best of 5 timed launches after 2 warm-ups, ms.
template <class Launch>
float best_ms(Launch launch) {
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    for (int i = 0; i < 2; ++i) launch();
    float best = 1e30f;
    for (int i = 0; i < 5; ++i) {
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

template <int N, Kind kKind>
int run(const char* name, int sms, float* sink) {
    const int smem = (64 + N) * kWgmmaRowBytes + kWgmmaAtomBytes;
    CHECK(cudaFuncSetAttribute(wgmma_loop<N, kKind>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               smem));
    constexpr int kIters = 20000;
    for (const bool serial : {false, true}) {
        std::printf("%-34s %-9s", name, serial ? "serial" : "pipelined");
        for (const int per_sm : {1, 2, 3}) {
            const float ms = best_ms(
                [&] { wgmma_loop<N, kKind><<<sms * per_sm, 128, smem>>>(kIters, serial, sink); });
            const double flops = double(sms) * per_sm * kIters * 4 * 2.0 * 64 * N * 16;
            std::printf("  %2d/SM %6.1f TFLOP/s", per_sm, flops / (double(ms) * 1e9));
        }
        std::printf("\n");
        CHECK(cudaGetLastError());
    }
    return 0;
}

}  // namespace

int main() {
    int sms = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cudaDeviceProp prop{};
    CHECK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major != 9 || prop.minor != 0) {
        std::printf("%s: not an sm_90 device, nothing to measure\n", prop.name);
        return 0;
    }
    float* sink = nullptr;
    CHECK(cudaMalloc(&sink, sizeof(float)));
    std::printf("%s, %d SMs; bf16 in, fp32 accumulate, dense TFLOP/s\n", prop.name, sms);
    int failed = 0;
    failed |= run<64, kRsKMajor>("S, 64-key tile: RS m64n64k16", sms, sink);
    failed |= run<128, kRsKMajor>("S, 128-key tile: RS m64n128k16", sms, sink);
    failed |= run<128, kRsTransposed>("P.V: RS m64n128k16, B transposed", sms, sink);
    failed |= run<64, kSs>("SS m64n64k16", sms, sink);
    failed |= run<128, kSs>("SS m64n128k16", sms, sink);
    failed |= run<256, kSs>("expert GEMM: SS m64n256k16", sms, sink);
    CHECK(cudaDeviceSynchronize());
    return failed;
}
