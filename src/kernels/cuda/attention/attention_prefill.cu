// Paged attention, prefill: FlashAttention-2's algorithm on tensor cores (mma.sync m16n8k16 bf16).
//
// One thread block owns 64 "packed" query rows of one (sequence, KV head): row r is query token
// r / group and query head kv_head * group + r % group, so the query heads that share a KV head
// (GQA) share every K/V tile this block loads. Each of the 4 warps owns 16 rows and walks the
// keys in tiles of 64: S = Q·Kᵀ (Q stays in registers), online softmax in fp32 (log2 domain), then
// O += P·V with P converted from the S accumulators straight into mma A fragments (the tile
// step, the tile loop and the epilogue are attention_tile.cuh's, shared with the flashinfer
// work kernel).
//
// K and V tiles are gathered from the paged cache row by row (a 64-key tile may span pages of
// any size) with cp.async, two tiles ahead of the one being computed.
// Keys past the last one this block needs are zero-filled, never read: the cache beyond a
// sequence's length may hold anything.
#include <cuda_bf16.h>

#include "core/cuda/cuda_check.h"
#include "kernels/cuda/attention/attention.h"
#include "kernels/cuda/attention/attention_prefill_sm90.h"
#include "kernels/cuda/attention/attention_tile.cuh"
#include "kernels/cuda/primitives/launch.cuh"

namespace miniinfer::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kBlockM = 64;  // packed query rows per block
constexpr int kBlockN = 64;  // keys per tile
constexpr int kWarps = kBlockM / 16;
constexpr int kThreads = kWarps * 32;

// q, out: [num_tokens, num_heads, head_dim]; k_cache, v_cache: [num_pages, page_size,
// num_kv_heads, head_dim]; query_start: [num_seqs + 1]; seq_lens: [num_seqs];
// block_table: [num_seqs, max_pages]. grid: (num_seqs, num_kv_heads, row tiles); each
// sequence's row tiles run last first (prefill_row_tile): under the causal mask they see
// the most keys, and starting them early keeps the light ones for the tail.
// Three blocks per SM (168 registers at head_dim 128, no spills): 12 warps to cover the barriers
// and the tile loads. At head_dim 256 one (its O rows alone take 128 registers a thread, and its
// K/V stages 135 KiB).
template <int kHeadDim, typename Cache>
__global__ void __launch_bounds__(kThreads, kHeadDim > 128 ? 1 : 3)
    prefill_kernel(const bf16* __restrict__ q, const Cache* __restrict__ k_cache,
                   const Cache* __restrict__ v_cache, float k_scale, float v_scale,
                   const int32_t* __restrict__ query_start, const int32_t* __restrict__ seq_lens,
                   const int32_t* __restrict__ block_table, int max_pages, int num_heads,
                   int num_kv_heads, int page_size, int page_shift, float scale_log2,
                   bf16* __restrict__ out) {
    pdl_wait();
    pdl_trigger();
    // +8 halves (16 B) per row: the 8 row addresses of one ldmatrix phase hit 8 different
    // 4-bank groups, so the tile reads are conflict-free.
    constexpr int kStride = kHeadDim + 8;
    // Two stages each of K and V: tile t + 2 loads while tile t + 1 is computed.
    extern __shared__ __align__(16) unsigned char smem[];
    bf16* k_tiles = reinterpret_cast<bf16*>(smem);    // [2, kBlockN, kStride]
    bf16* v_tiles = k_tiles + 2 * kBlockN * kStride;  // [2, kBlockN, kStride]

    const int seq = blockIdx.x, kv_head = blockIdx.y;
    const int group = num_heads / num_kv_heads;
    const int q_begin = query_start[seq];
    const int q_len = query_start[seq + 1] - q_begin;
    const int num_rows = q_len * group;
    const int row_begin = prefill_row_tile<kBlockM>(num_rows);
    if (row_begin < 0) return;
    const int seq_len = seq_lens[seq];
    const int prefix_len = seq_len - q_len;  // keys cached before this chunk
    // Keys this block needs: up to the last row's causal limit.
    const int last_row = min(row_begin + kBlockM, num_rows) - 1;
    const int num_keys = prefix_len + last_row / group + 1;
    const int min_limit = prefix_len + row_begin / group;  // smallest causal limit of the block
    const int32_t* pages = block_table + int64_t(seq) * max_pages;
    const int warp = threadIdx.x / 32;

    // This thread's two rows: Q as mma A fragments, loaded once, and the last key each may see.
    // Rows past the end compute on zeros and are not stored.
    int row_limit[2];
    uint32_t q_frag[kHeadDim / 16][4];
    load_q_fragments<kHeadDim, TileElem<Cache>>(q, q_begin, row_begin + warp * 16, num_rows, group,
                                                num_heads, kv_head, prefix_len, seq_len - 1, q_frag,
                                                row_limit);

    // Tile 0 holds key 0, which every row may see, so row_max is finite from the first tile on
    // (kMayBeEmpty false: no empty-row check).
    float o[kHeadDim / 8][4];  // O accumulators: 16 rows x head_dim per warp
    float row_max[2], row_sum[2];
    attend_tiles<kHeadDim, kBlockN, kThreads, false>(
        q_frag, row_limit, /*warp_active=*/true, k_tiles, v_tiles, k_cache, v_cache, k_scale,
        v_scale, pages,
        /*kv_begin=*/0, num_keys, min_limit, page_size, page_shift,
        int64_t(num_kv_heads) * kHeadDim, kv_head * kHeadDim, scale_log2, o, row_max, row_sum);

    finish_rows<false>(
        row_sum, row_begin + warp * 16, num_rows, [&](int i, int r, float, float inv_sum) {
            store_o_bf16<kHeadDim>(
                o, i, inv_sum,
                out + packed_row_index(q_begin, r, group, num_heads, kv_head) * kHeadDim);
        });
}

template <int kHeadDim, typename Cache>
void launch_prefill(const AttentionLaunch& a, dim3 grid, cudaStream_t stream) {
    constexpr size_t kSmemBytes = 4 * kBlockN * (kHeadDim + 8) * sizeof(bf16);  // 2 stages x K, V
    allow_shared_memory<prefill_kernel<kHeadDim, Cache>>(kSmemBytes);
    launch_kernel(prefill_kernel<kHeadDim, Cache>, grid, kThreads, kSmemBytes, stream,
                  static_cast<const bf16*>(a.q), static_cast<const Cache*>(a.k_cache),
                  static_cast<const Cache*>(a.v_cache), a.k_scale, a.v_scale, a.query_start,
                  a.seq_lens, a.block_table, int(a.max_pages), int(a.num_heads),
                  int(a.num_kv_heads), int(a.page_size), page_shift_of(a.page_size),
                  a.scale * 1.4426950408889634f,  // exp(x) = 2^(x log2 e)
                  static_cast<bf16*>(a.out));
    MI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void launch_attention_prefill(const AttentionLaunch& a, cudaStream_t stream) {
    const int64_t group = a.num_heads / a.num_kv_heads;
    const int64_t row_tiles = (a.max_query_len * group + kBlockM - 1) / kBlockM;
    if (row_tiles == 0 || a.num_seqs == 0) return;
    MI_LAUNCH_CHECK(
        a.num_seqs < (int64_t(1) << 31) && a.num_kv_heads <= 65535 && row_tiles <= 65535,
        "attention prefill: batch too large for one launch");
    const dim3 grid(unsigned(a.num_seqs), unsigned(a.num_kv_heads), unsigned(row_tiles));
    switch (a.head_dim) {
        case 64:
            if (a.fp8_cache)
                launch_prefill<64, uint8_t>(a, grid, stream);
            else
                launch_prefill<64, bf16>(a, grid, stream);
            break;
        case 128:
            if (attention_prefill_sm90_supported(a))  // H100 / H200: the wgmma kernel
                launch_attention_prefill_sm90(a, grid, stream);
            else if (a.fp8_cache)
                launch_prefill<128, uint8_t>(a, grid, stream);
            else
                launch_prefill<128, bf16>(a, grid, stream);
            break;
        case 256:
            if (a.fp8_cache)
                launch_prefill<256, uint8_t>(a, grid, stream);
            else
                launch_prefill<256, bf16>(a, grid, stream);
            break;
        default:
            MI_LAUNCH_CHECK(false, "attention prefill: head_dim must be 64, 128 or 256");
    }
}

}  // namespace miniinfer::cuda
