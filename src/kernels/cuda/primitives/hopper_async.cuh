// Hopper's asynchronous copies (cp.async into addressed shared memory, TMA) and the shared-memory
// barriers that count them, for the sm_90a kernels (grouped_gemm_sm90.cu,
// attention_prefill_sm90.cu). In a warp-specialised kernel producer threads fill a ring of
// shared-memory stages, consumer threads wait for a stage to be full and hand it back when done.
//   - an mbarrier is a 64-bit word in shared memory with an expected number of arrivals and a
//     phase bit. A phase completes when all expected arrivals (and, with expect_tx, all expected
//     bytes of bulk copies) have come in; the barrier then re-arms for the next phase.
//   - waiting names the parity of the phase waited for: `mbarrier_wait(bar, phase)` returns once
//     the phase of that parity has completed. On a fresh barrier, waiting for parity 1 returns at
//     once (the phase "before" phase 0 counts as complete): producers start with that parity on
//     the empty barriers, so the first pass through the ring does not wait.
//   - cp.async's (16-byte copies, generic proxy) arrive on a barrier when this thread's earlier
//     copies land (`cp_async_arrive_noinc`: one of the barrier's expected arrivals); a TMA tile
//     copy (async proxy) adds its bytes to the barrier's transaction count.
// sm_90a device code only, like wgmma.cuh.
#pragma once

#include <cstdint>

namespace miniinfer::cuda {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// 16 bytes global -> shared address `dst`, asynchronously; valid == false writes zeros.
__device__ __forceinline__ void cp_async_16_to(uint32_t dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(valid ? 16 : 0));
}
// 4 bytes global -> shared address `dst` (a scale beside its tile); valid == false writes zeros.
__device__ __forceinline__ void cp_async_4_to(uint32_t dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
                 "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_wait_all() {
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}
// Orders this thread's generic-proxy writes to shared memory (cp.async included) before later
// async-proxy reads of them (wgmma's operand fetches).
__device__ __forceinline__ void fence_proxy_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals));
}
// Makes initialised barriers visible to the async proxy (TMA) and to other threads, before the
// barrier (__syncthreads) that follows it.
__device__ __forceinline__ void mbarrier_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// One arrival that also expects `bytes` more of bulk copies in this phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "wait:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra wait;\n"
        "}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}
// One arrival on `bar` when all of this thread's earlier cp.async's have landed.
__device__ __forceinline__ void cp_async_arrive_noinc(uint32_t bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// TMA: the box at (c0 innermost, c1) of the 2-D tensor map `map` (a __grid_constant__ kernel
// parameter) into shared memory at `dst`, its bytes counted on `bar`.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void* map, int c0, int c1,
                                            uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
        "l"(map), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
}

// TMA: shared memory at `src` into the box at (c0, c1) of `map`; parts of the box outside the
// tensor are not written. Joins this thread's current bulk group (tma_store_commit).
__device__ __forceinline__ void tma_store_2d(const void* map, int c0, int c1, uint32_t src) {
    asm volatile(
        "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(map),
        "r"(c0), "r"(c1), "r"(src)
        : "memory");
}
__device__ __forceinline__ void tma_store_commit() {
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// This thread's committed TMA stores have read their shared memory (it may be written again).
__device__ __forceinline__ void tma_store_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
// ... and have completed.
__device__ __forceinline__ void tma_store_wait() {
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}
// Barrier `id` (1-15; 0 is __syncthreads') of `threads` threads, a multiple of 32.
__device__ __forceinline__ void named_barrier(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace miniinfer::cuda
