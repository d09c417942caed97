// Hopper's warpgroup MMA (wgmma) and the shared-memory operand layout it reads, shared by the
// sm_90a kernels (grouped_gemm_sm90.cu, attention_prefill_sm90.cu; the copies that fill the
// operands are hopper_async.cuh's). Only defined for sm_90a device code
// (__CUDA_ARCH_FEAT_SM90_ALL): callers guard their bodies the same way.
//
// Shared-memory operands use the 128-byte swizzle: operand rows of 128 bytes stacked densely,
// 16-byte chunk c of row r stored at chunk c ^ (r % 8) (`swizzled`); 8 rows = 1024 bytes is one
// swizzle atom, and atoms must be 1024-byte aligned (the hardware applies the XOR to address
// bits [4, 7) from bits [7, 10)). The same XOR makes the cp.async stores conflict-free.
//   - K-major operand (k contiguous: A of x · wᵀ, or K of Q·Kᵀ): a row is 64 bf16 of k; rows
//     of m / n stack 1024 bytes per 8 (stride byte offset), the k16 slices of a row start 32
//     bytes apart (the descriptor's start address advances by 2 per slice).
//   - MN-major operand (n contiguous: V of P·V, whose rows are keys = k): a row is 64 bf16 of n
//     for one k; 8 k rows make an atom, the next 8 k rows 1024 bytes on (stride byte offset),
//     the next 64 n another `mn_block_bytes` on (leading byte offset). The wgmma reads it with
//     its transpose flag set.
#pragma once

#include <cstdint>

namespace miniinfer::cuda {

inline constexpr int kWgmmaRowBytes = 128;    // one swizzle row: 64 bf16
inline constexpr int kWgmmaAtomBytes = 1024;  // 8 rows

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving reads or writes of a register a wgmma still owns (an
// accumulator, an A fragment) across the wgmma_wait that hands it back: an empty asm that
// "uses and sets" it, after the wait.
__device__ __forceinline__ void wgmma_fence_operand(float& r) {
    asm volatile("" : "+f"(r)::"memory");
}
__device__ __forceinline__ void wgmma_fence_operand(uint32_t& r) {
    asm volatile("" : "+r"(r)::"memory");
}

// Descriptor of a K-major operand at shared address `addr` (1024-aligned atom base, plus 32 bytes
// per k16 slice): 8-row × 128-byte atoms, 128-byte swizzle, atoms 1024 bytes apart along m / n.
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr) {
    return uint64_t((addr & 0x3ffff) >> 4)         // bits 0-13: start address
           | uint64_t(1) << 16                     // bits 16-29: leading byte offset (unused)
           | uint64_t(kWgmmaAtomBytes >> 4) << 32  // bits 32-45: stride byte offset
           | uint64_t(1) << 62;                    // bits 62-63: 128-byte swizzle
}

// Descriptor of an MN-major operand at shared address `addr` (1024-aligned: the atom of its first
// 8 k rows): 128-byte swizzle, the next 8 k rows 1024 bytes on, the next 64 n mn_block_bytes on.
__device__ __forceinline__ uint64_t smem_desc_mn(uint32_t addr, uint32_t mn_block_bytes) {
    return uint64_t((addr & 0x3ffff) >> 4)                   // bits 0-13: start address
           | uint64_t((mn_block_bytes >> 4) & 0x3fff) << 16  // bits 16-29: leading byte offset
           | uint64_t(kWgmmaAtomBytes >> 4) << 32            // bits 32-45: stride byte offset
           | uint64_t(1) << 62;                              // bits 62-63: 128-byte swizzle
}

// Swizzled byte offset of 16-byte chunk `chunk` of row `row` in a tile of 128-byte rows.
__device__ __forceinline__ uint32_t swizzled(int row, int chunk) {
    return uint32_t(row * kWgmmaRowBytes + ((chunk ^ (row % 8)) << 4));
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace miniinfer::cuda
