// Addressing the paged KV cache ([num_pages, page_size, num_kv_heads, head_dim]) from kernels.
#pragma once

#include <cstdint>

namespace miniinfer::cuda {

// log2(page_size) for a power of two, else -1 (the kernels then divide).
inline int page_shift_of(int64_t page_size) {
    if (page_size <= 0 || (page_size & (page_size - 1)) != 0) return -1;
    int shift = 0;
    while ((int64_t(1) << shift) < page_size) ++shift;
    return shift;
}

// Where a sequence's key lies: the index of its page in the block-table row, and its offset in
// that page. Power-of-two pages take a shift and a mask instead of an integer division.
__device__ __forceinline__ int page_index(int key, int page_size, int page_shift) {
    return page_shift >= 0 ? key >> page_shift : key / page_size;
}
__device__ __forceinline__ int page_offset(int key, int page_size, int page_shift) {
    return page_shift >= 0 ? key & (page_size - 1) : key % page_size;
}

// Cache row (page * page_size + offset) of a sequence's key; pages: its block-table row.
__device__ __forceinline__ int64_t cache_row(const int32_t* pages, int key, int page_size,
                                             int page_shift) {
    return int64_t(pages[page_index(key, page_size, page_shift)]) * page_size +
           page_offset(key, page_size, page_shift);
}

}  // namespace miniinfer::cuda
