// What Hopper's warpgroup MMA (wgmma) reaches on this GPU for the shapes our sm_90a kernels
// issue, through the same wrappers (wgmma.cuh: wgmma_ss, wgmma_rs): the prefill attention's S =
// Q·Kᵀ (A from registers, m64n64k16 over 64-key tiles, or m64n128k16 over 128-key ones) and O +=
// P·V (m64n128k16, B read transposed), the expert GEMMs' m64n256k16 (both operands in shared
// memory), and the FP8 GEMM's m64n128k32 e4m3 (fp8_gemm_sm90.cu: the card's FP8 rate). Not a
// test: it prints a table, asserts nothing. Usage: bench_wgmma.
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

#include "bench_timing.h"

#include "kernels/cuda/primitives/hopper_async.cuh"
#include "kernels/cuda/primitives/mma_bf16.cuh"
#include "kernels/cuda/primitives/wgmma.cuh"

namespace {

enum Kind { kRsKMajor, kRsTransposed, kSs, kSsE4m3 };

// k of one instruction: 16 for bf16, 32 for e4m3 (the same 32 bytes of a row).
constexpr int k_of(Kind kind) {
    return kind == kSsE4m3 ? 32 : 16;
}
using miniinfer::cuda::kWgmmaAtomBytes;
using miniinfer::cuda::kWgmmaRowBytes;

// One warpgroup: `iters` k64 steps of m64 × N × k64 into the same accumulators.
template <int N, Kind kKind>
__global__ void __launch_bounds__(128) wgmma_loop(int iters, bool serial, float* sink) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace miniinfer::cuda;
    extern __shared__ uint8_t smem_raw[];
    const uint32_t raw = smem_u32(smem_raw);
    const uint32_t a_base = (raw + kWgmmaAtomBytes - 1) & ~uint32_t(kWgmmaAtomBytes - 1);
    const uint32_t b_base = a_base + 64 * kWgmmaRowBytes;  // A: 64 rows of 128 bytes
    uint8_t* zero_from = smem_raw + (a_base - raw);
    for (int i = int(threadIdx.x); i < (64 + N) * kWgmmaRowBytes; i += 128) zero_from[i] = 0;
    fence_proxy_async_shared();  // the zeros, before wgmma reads them
    __syncthreads();
    float d[N / 8][4];
#pragma unroll
    for (int j = 0; j < N / 8; ++j) d[j][0] = d[j][1] = d[j][2] = d[j][3] = 0.f;
    uint32_t a[4] = {0, 0, 0, 0};
    for (int it = 0; it < iters; ++it) {
        wgmma_fence();
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            if constexpr (kKind == kSsE4m3)
                wgmma_ss_e4m3_n128(d, smem_desc(a_base) + 2 * s, smem_desc(b_base) + 2 * s, true);
            else if constexpr (kKind == kSs)
                wgmma_ss<N>(d, smem_desc(a_base) + 2 * s, smem_desc(b_base) + 2 * s);
            else if constexpr (kKind == kRsKMajor)
                wgmma_rs<N, __nv_bfloat16, false>(d, a, smem_desc(b_base) + 2 * s);
            else  // B as V of P·V: k16 slice s two atoms on, 64 n per 64 k rows (8 KB)
                wgmma_rs<N, __nv_bfloat16, true>(
                    d, a, smem_desc_mn(b_base + s * 2 * kWgmmaAtomBytes, 8192));
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

template <int N, Kind kKind>
int run(const char* name, int sms, float* sink) {
    const int smem = (64 + N) * kWgmmaRowBytes + kWgmmaAtomBytes;
    MI_BENCH_CHECK(cudaFuncSetAttribute(wgmma_loop<N, kKind>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    constexpr int kIters = 20000;
    for (const bool serial : {false, true}) {
        std::printf("%-34s %-9s", name, serial ? "serial" : "pipelined");
        for (const int per_sm : {1, 2, 3}) {
            const float ms = best_ms(
                [&] { wgmma_loop<N, kKind><<<sms * per_sm, 128, smem>>>(kIters, serial, sink); });
            const double flops = double(sms) * per_sm * kIters * 4 * 2.0 * 64 * N * k_of(kKind);
            std::printf("  %2d/SM %6.1f TFLOP/s", per_sm, flops / (double(ms) * 1e9));
        }
        std::printf("\n");
        MI_BENCH_CHECK(cudaGetLastError());
    }
    return 0;
}

}  // namespace

int main() {
    int sms = 0;
    MI_BENCH_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cudaDeviceProp prop{};
    MI_BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major != 9 || prop.minor != 0) {
        std::printf("%s: not an sm_90 device, nothing to measure\n", prop.name);
        return 0;
    }
    float* sink = nullptr;
    MI_BENCH_CHECK(cudaMalloc(&sink, sizeof(float)));
    std::printf("%s, %d SMs; bf16 (e4m3 where named) in, fp32 accumulate, dense TFLOP/s\n",
                prop.name, sms);
    int failed = 0;
    failed |= run<64, kRsKMajor>("S, 64-key tile: RS m64n64k16", sms, sink);
    failed |= run<128, kRsKMajor>("S, 128-key tile: RS m64n128k16", sms, sink);
    failed |= run<128, kRsTransposed>("P.V: RS m64n128k16, B transposed", sms, sink);
    failed |= run<64, kSs>("SS m64n64k16", sms, sink);
    failed |= run<128, kSs>("SS m64n128k16", sms, sink);
    failed |= run<256, kSs>("expert GEMM: SS m64n256k16", sms, sink);
    failed |= run<128, kSsE4m3>("FP8 GEMM: SS m64n128k32 e4m3", sms, sink);
    MI_BENCH_CHECK(cudaDeviceSynchronize());
    return failed;
}
