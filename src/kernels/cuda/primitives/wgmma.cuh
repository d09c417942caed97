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

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

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

// The warpgroup MMAs the kernels issue: d[64 × N] += a[64 × 16] · b[16 × N] for one warpgroup,
// bf16 or f16 operands, fp32 accumulators in mma.sync's layout repeated along n (thread l of warp
// w of the warpgroup holds d[j][i] = D[16 w + l / 4 + 8 (i / 2)][8 j + 2 (l % 4) + i % 2]).
// Every call accumulates (the scale-d predicate is the constant 1): zero d for a fresh product.
//   wgmma_ss<N>(d, a_desc, b_desc): A and B K-major in shared memory (smem_desc), bf16; N 64,
//     128 or 256 (the expert GEMMs' tiles).
//   wgmma_rs<N, Elem, kTransB>(d, a, b_desc): A from registers (a[4]: mma.sync's A fragment of
//     the warp's 16 rows), B in shared memory, K-major (smem_desc) or with kTransB MN-major read
//     transposed (smem_desc_mn); Elem __nv_bfloat16 or __half for both; N 64 or 128 (the prefill
//     attention's S = Q·Kᵀ and O += P·V).
// Issue them between wgmma_fence() and wgmma_commit(); d and a belong to the tensor cores until
// the matching wgmma_wait (then wgmma_fence_operand each).
#define MI_WGMMA_D4(j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define MI_WGMMA_D32(j)                                                         \
    MI_WGMMA_D4(j), MI_WGMMA_D4(j + 1), MI_WGMMA_D4(j + 2), MI_WGMMA_D4(j + 3), \
        MI_WGMMA_D4(j + 4), MI_WGMMA_D4(j + 5), MI_WGMMA_D4(j + 6), MI_WGMMA_D4(j + 7)
#define MI_WGMMA_R0_31                         \
    "%0, %1, %2, %3, %4, %5, %6, %7, "         \
    "%8, %9, %10, %11, %12, %13, %14, %15, "   \
    "%16, %17, %18, %19, %20, %21, %22, %23, " \
    "%24, %25, %26, %27, %28, %29, %30, %31"
#define MI_WGMMA_R32_63                        \
    "%32, %33, %34, %35, %36, %37, %38, %39, " \
    "%40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, " \
    "%56, %57, %58, %59, %60, %61, %62, %63"
#define MI_WGMMA_R64_127                               \
    "%64, %65, %66, %67, %68, %69, %70, %71, "         \
    "%72, %73, %74, %75, %76, %77, %78, %79, "         \
    "%80, %81, %82, %83, %84, %85, %86, %87, "         \
    "%88, %89, %90, %91, %92, %93, %94, %95, "         \
    "%96, %97, %98, %99, %100, %101, %102, %103, "     \
    "%104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, " \
    "%120, %121, %122, %123, %124, %125, %126, %127"
// One wgmma with both operands from shared memory: N, its accumulator registers REGS (the first
// N / 2 operands), the descriptors' operand numbers A_DESC and B_DESC, the predicate's P.
// clang-format off
#define MI_WGMMA_SS(N, REGS, A_DESC, B_DESC, P, ...)                                              \
    asm volatile("{\n"                                                                           \
                 ".reg .pred p;\n"                                                               \
                 "setp.ne.b32 p, %" P ", 0;\n"                                                   \
                 "wgmma.mma_async.sync.aligned.m64n" N "k16.f32.bf16.bf16 "                      \
                 "{" REGS "}, %" A_DESC ", %" B_DESC ", p, 1, 1, 0, 0;\n"                         \
                 "}\n"                                                                           \
                 : __VA_ARGS__                                                                   \
                 : "l"(a_desc), "l"(b_desc), "r"(1)                                              \
                 : "memory")
// One wgmma with A from registers: as MI_WGMMA_SS, TYPE the element type ("bf16" or "f16"), A0-A3
// A's four operand numbers, then B's descriptor, the predicate and B's layout (TRANS).
#define MI_WGMMA_RS(N, TYPE, REGS, A0, A1, A2, A3, B_DESC, P, TRANS, ...)                          \
    asm volatile("{\n"                                                                           \
                 ".reg .pred p;\n"                                                               \
                 "setp.ne.b32 p, %" P ", 0;\n"                                                   \
                 "wgmma.mma_async.sync.aligned.m64n" N "k16.f32." TYPE "." TYPE " "               \
                 "{" REGS "}, {%" A0 ", %" A1 ", %" A2 ", %" A3 "}, %" B_DESC ", p, 1, 1, %" TRANS \
                 ";\n"                                                                           \
                 "}\n"                                                                           \
                 : __VA_ARGS__                                                                   \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1),              \
                   "n"(kTransB ? 1 : 0)                                                          \
                 : "memory")
// clang-format on

template <int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 8][4], uint64_t a_desc, uint64_t b_desc) {
    static_assert(N == 64 || N == 128 || N == 256, "wgmma_ss: n of 64, 128 or 256");
    if constexpr (N == 64)
        MI_WGMMA_SS("64", MI_WGMMA_R0_31, "32", "33", "34", MI_WGMMA_D32(0));
    else if constexpr (N == 128)
        MI_WGMMA_SS("128", MI_WGMMA_R0_31 ", " MI_WGMMA_R32_63, "64", "65", "66", MI_WGMMA_D32(0),
                    MI_WGMMA_D32(8));
    else
        MI_WGMMA_SS("256", MI_WGMMA_R0_31 ", " MI_WGMMA_R32_63 ", " MI_WGMMA_R64_127, "128", "129",
                    "130", MI_WGMMA_D32(0), MI_WGMMA_D32(8), MI_WGMMA_D32(16), MI_WGMMA_D32(24));
}

template <int N, typename Elem, bool kTransB>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 8][4], const uint32_t (&a)[4],
                                         uint64_t b_desc) {
    static_assert(N == 64 || N == 128, "wgmma_rs: n of 64 or 128");
    constexpr bool kF16 = std::is_same_v<Elem, __half>;
    static_assert(kF16 || std::is_same_v<Elem, __nv_bfloat16>, "wgmma_rs: bf16 or f16");
    if constexpr (N == 64 && kF16)
        MI_WGMMA_RS("64", "f16", MI_WGMMA_R0_31, "32", "33", "34", "35", "36", "37", "38",
                    MI_WGMMA_D32(0));
    else if constexpr (N == 64)
        MI_WGMMA_RS("64", "bf16", MI_WGMMA_R0_31, "32", "33", "34", "35", "36", "37", "38",
                    MI_WGMMA_D32(0));
    else if constexpr (kF16)
        MI_WGMMA_RS("128", "f16", MI_WGMMA_R0_31 ", " MI_WGMMA_R32_63, "64", "65", "66", "67", "68",
                    "69", "70", MI_WGMMA_D32(0), MI_WGMMA_D32(8));
    else
        MI_WGMMA_RS("128", "bf16", MI_WGMMA_R0_31 ", " MI_WGMMA_R32_63, "64", "65", "66", "67",
                    "68", "69", "70", MI_WGMMA_D32(0), MI_WGMMA_D32(8));
}
// d[64 × N] (+)= a[64 × 32] · b[32 × N] with e4m3 operands, both K-major in shared memory
// (smem_desc: a 128-byte row is 128 elements of k, a k32 slice 32 bytes, so the descriptors
// advance by 2 per slice as for bf16's k16). accumulate == false overwrites d (a fresh product
// without zeroing it first). N 128: the block-scaled FP8 GEMM's tile (fp8_gemm_sm90.cu).
__device__ __forceinline__ void wgmma_ss_e4m3_n128(float (&d)[16][4], uint64_t a_desc,
                                                   uint64_t b_desc, bool accumulate) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
        "{" MI_WGMMA_R0_31 ", " MI_WGMMA_R32_63
        "}, %64, %65, p, 1, 1;\n"
        "}\n"
        : MI_WGMMA_D32(0), MI_WGMMA_D32(8)
        : "l"(a_desc), "l"(b_desc), "r"(accumulate ? 1 : 0)
        : "memory");
}
#undef MI_WGMMA_RS
#undef MI_WGMMA_SS
#undef MI_WGMMA_R64_127
#undef MI_WGMMA_R32_63
#undef MI_WGMMA_R0_31
#undef MI_WGMMA_D32
#undef MI_WGMMA_D4

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace miniinfer::cuda
