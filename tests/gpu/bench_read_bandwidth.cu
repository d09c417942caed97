// What this GPU's memory reads reach, against a device-to-device copy: the ceiling for kernels
// that only read (decode attention, GEMVs, the decode-size expert GEMMs). Not a test: it prints
// a table, asserts nothing. Usage: bench_read_bandwidth (4 GiB of device memory).
//
// A copy counts bytes read + written; on the H200 it made 4.28 TB/s where reads alone made 4.53
// to 4.55 (session 27), so kernels measured against the copy rate ("% copy" in bench_cuda_ops)
// look 6% nearer their ceiling than they are. Rows:
//   - contiguous: every thread 16-byte loads, kInFlight of them issued before any is used;
//   - KV-shaped: reads of one head's chunk (128 or 256 bytes: head_dim 64 or 128 in bf16) of
//     every row of a [rows, heads, chunk] array, a block per (head, part of the rows), as the
//     decode reads a paged K/V cache.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "bench_timing.h"

namespace {

// The loaded words folded into one, written only if it takes an impossible value (so the loads
// stay).
__device__ __forceinline__ void keep(unsigned acc, unsigned* sink) {
    if (acc == 0x9e3779b9u) *sink = acc;
}

template <int kInFlight>
__global__ void read_contiguous(const uint4* __restrict__ p, size_t n, unsigned* sink) {
    const size_t stride = size_t(gridDim.x) * blockDim.x;
    unsigned acc = 0;
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += stride * kInFlight) {
        uint4 v[kInFlight];
#pragma unroll
        for (int u = 0; u < kInFlight; ++u)
            v[u] = i + u * stride < n ? __ldg(p + i + u * stride) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < kInFlight; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    keep(acc, sink);
}

// p: [rows, heads, chunk_vecs] 16-byte vectors; block b reads head b % heads of its part of
// the rows, a lane a vector, blockDim.x / chunk_vecs rows at once, kInFlight of those steps
// issued before any is used.
template <int kInFlight>
__global__ void read_heads(const uint4* __restrict__ p, size_t rows, int chunk_vecs, int heads,
                           unsigned* sink) {
    const int head = int(blockIdx.x) % heads;
    const size_t parts = gridDim.x / heads, part = blockIdx.x / heads;
    const size_t per_part = (rows + parts - 1) / parts;
    const size_t r0 = part * per_part, r1 = r0 + per_part < rows ? r0 + per_part : rows;
    const int rows_at_once = int(blockDim.x) / chunk_vecs;
    const int my_row = int(threadIdx.x) / chunk_vecs, my_vec = int(threadIdx.x) % chunk_vecs;
    unsigned acc = 0;
    for (size_t r = r0 + my_row; r < r1; r += size_t(rows_at_once) * kInFlight) {
        uint4 v[kInFlight];
#pragma unroll
        for (int u = 0; u < kInFlight; ++u) {
            const size_t row = r + size_t(u) * rows_at_once;
            v[u] = row < r1 ? __ldg(p + (row * heads + head) * chunk_vecs + my_vec)
                            : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < kInFlight; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    keep(acc, sink);
}

}  // namespace

int main() {
    const size_t bytes = size_t(4) << 30;
    void *src = nullptr, *dst = nullptr;
    unsigned* sink = nullptr;
    MI_BENCH_CHECK(cudaMalloc(&src, bytes));
    MI_BENCH_CHECK(cudaMalloc(&dst, bytes));
    MI_BENCH_CHECK(cudaMalloc(&sink, sizeof(unsigned)));
    MI_BENCH_CHECK(cudaMemset(src, 1, bytes));
    int sms = 0;
    MI_BENCH_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cudaDeviceProp prop{};
    MI_BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("%s, %d SMs\n", prop.name, sms);
    const auto gb_s = [](size_t moved, float ms) { return double(moved) / (double(ms) * 1e6); };

    float ms = best_ms([&] { cudaMemcpyAsync(dst, src, bytes / 2, cudaMemcpyDeviceToDevice); });
    std::printf("%-44s %8.1f GB/s\n", "copy 2 GiB (read + written)", gb_s(bytes, ms));
    const auto* vecs = static_cast<const uint4*>(src);
    for (const int blocks_per_sm : {4, 8, 16}) {
        ms = best_ms(
            [&] { read_contiguous<4><<<sms * blocks_per_sm, 256>>>(vecs, bytes / 16, sink); });
        std::printf("read contiguous, 4 in flight, %2d blocks/SM      %8.1f GB/s\n", blocks_per_sm,
                    gb_s(bytes, ms));
        ms = best_ms(
            [&] { read_contiguous<8><<<sms * blocks_per_sm, 256>>>(vecs, bytes / 16, sink); });
        std::printf("read contiguous, 8 in flight, %2d blocks/SM      %8.1f GB/s\n", blocks_per_sm,
                    gb_s(bytes, ms));
    }
    for (const int heads : {8, 4}) {
        for (const int chunk : {256, 128}) {
            const int chunk_vecs = chunk / 16;
            const size_t rows = bytes / (size_t(heads) * chunk);
            const int blocks = sms * 16 / heads * heads;
            ms = best_ms(
                [&] { read_heads<8><<<blocks, 128>>>(vecs, rows, chunk_vecs, heads, sink); });
            std::printf("read KV-shaped, %d heads x %3d-byte chunks        %8.1f GB/s\n", heads,
                        chunk, gb_s(bytes, ms));
        }
    }
    MI_BENCH_CHECK(cudaGetLastError());
    MI_BENCH_CHECK(cudaDeviceSynchronize());
    cudaFree(src);
    cudaFree(dst);
    cudaFree(sink);
    return 0;
}
