// Paged prefill attention on Hopper's warpgroup MMA (wgmma), head_dim 128: the fa2
// prefill kernel (attention_prefill.cu) with its two matrix products moved from mma.sync, which
// reaches about half of the H200's tensor-core rate, to wgmma. Same grid, same rows, same online
// softmax, same epilogue (attention_tile.cuh); sm_90a only, chosen by launch_attention_prefill.
//
// A CTA is one warpgroup (128 threads, 4 warps) owning 64 packed query rows (row r: query token
// r / group, head kv_head * group + r % group), warp w rows 16 w .. 16 w + 15 — the rows a wgmma
// of m = 64 gives each warp, in mma.sync's fragment layout, so the fa2 code for Q fragments,
// softmax and stores applies as it is:
//   - Q stays in registers (load_q_fragments): the A operand of S = Q·Kᵀ, 8 k16 slices of the
//     128 dims.
//   - K and V tiles of 64 keys travel by cp.async, two stages ahead, into shared memory with the
//     128-byte swizzle (wgmma.cuh): a tile is two halves of 64 dims, each 64 key rows of 128
//     bytes. For S = Q·Kᵀ (m64n64k16) K is a K-major B operand: keys are n, dims k. For
//     O += P·V (m64n128k16) V is an MN-major B operand read transposed: keys are k (8 rows per
//     atom, atoms 1024 bytes apart), dims n (the second half 8192 bytes on).
//   - S (32 fp32 per thread) goes through online_softmax; P, packed to bf16 from S's registers,
//     is the A operand of P·V straight from registers; O (64 fp32 per thread) accumulates across
//     tiles in the wgmma's own registers.
// Per tile: wait for its copies, fence them to the async proxy, barrier; 8 wgmmas for S, wait;
// softmax (O rescaled in registers); 4 wgmmas for P·V, wait; barrier; copies of tile + 2.
// An FP8 cache: the raw e4m3 tiles take the two-stage ring instead (in the second stage's space:
// raw K then raw V, 8 KB each, per stage), and each is widened to f16 into the first stage's
// swizzled tiles just before its step (attention_tile.cuh's TileElem: Q and P are f16 too, the
// products f16 wgmmas); k_scale joins the softmax scale, v_scale multiplies O at the end.
// Not yet overlapped: softmax and the MMAs run one after the other (FlashAttention-3 ping-pongs
// two warpgroups to hide one behind the other).
#include "kernels/cuda/attention/attention_prefill_sm90.h"

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "core/cuda/cuda_check.h"
#include "kernels/cuda/attention/attention_tile.cuh"
#include "kernels/cuda/primitives/hopper_async.cuh"
#include "kernels/cuda/primitives/launch.cuh"
#include "kernels/cuda/primitives/wgmma.cuh"

namespace miniinfer::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kHeadDim = 128;
constexpr int kBlockM = 64;                           // packed query rows per CTA: one wgmma m
constexpr int kBlockN = 64;                           // keys per tile
constexpr int kThreads = 128;                         // one warpgroup
constexpr int kHalfBytes = kBlockN * kWgmmaRowBytes;  // 64 dims of 64 keys: 8 KB
constexpr int kTileBytes = 2 * kHalfBytes;            // K or V tile: 16 KB
constexpr int kStageBytes = 2 * kTileBytes;           // K then V
constexpr int kSmemBytes = 2 * kStageBytes + kWgmmaAtomBytes;  // two stages, + 1024-alignment
static_assert(kHeadDim == 2 * 64 && kBlockN % 16 == 0);
static_assert(kBlockM == 64 && kThreads == 128, "one warpgroup: a wgmma m of 64 rows, 16 per warp");

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

constexpr int kRowsPerThread = kBlockN / 16;  // rows of a tile a thread copies: t / 8 + 16 i

// The block-table entries of the pages holding this thread's rows of keys [key_begin,
// key_begin + kBlockN) (-1 from key_end on), read a tile ahead of the copies that use them: a
// read of the block table is a global load, which the copies would otherwise wait for.
__device__ __forceinline__ void stage_pages(int (&page)[kRowsPerThread], const int32_t* pages,
                                            int key_begin, int key_end, int page_size,
                                            int page_shift) {
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
        const int key = key_begin + int(threadIdx.x) / 8 + 16 * i;
        page[i] = key < key_end ? pages[page_index(key, page_size, page_shift)] : -1;
    }
}

// Keys [key_begin, key_begin + kBlockN) of one KV head, K and V, into the stage at shared
// address `stage` (K tile, then V tile; each two 64-dim halves of kBlockN swizzled 128-byte
// rows), from the pages stage_pages found; keys past the end zero-filled. Thread t copies 16-byte
// chunk t % 8 of rows t / 8 + 16 i of both halves: 8 neighbouring threads read one row's 128
// bytes.
__device__ __forceinline__ void load_kv_stage(uint32_t stage, const bf16* k_cache,
                                              const bf16* v_cache,
                                              const int (&page)[kRowsPerThread], int key_begin,
                                              int page_size, int page_shift, int64_t kv_row_stride,
                                              int head_offset) {
    const int chunk = int(threadIdx.x) % 8, row0 = int(threadIdx.x) / 8;
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
        const int r = row0 + 16 * i;
        const bool valid = page[i] >= 0;
        const int64_t row =
            int64_t(page[i]) * page_size + page_offset(key_begin + r, page_size, page_shift);
        const int64_t base = valid ? row * kv_row_stride + head_offset : 0;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const uint32_t dst = uint32_t(half * kHalfBytes) + swizzled(r, chunk);
            const int64_t src = base + half * 64 + chunk * 8;
            cp_async_16_to(stage + dst, k_cache + src, valid);
            cp_async_16_to(stage + kTileBytes + dst, v_cache + src, valid);
        }
    }
}

// FP8: keys [key_begin, key_begin + kBlockN) of one KV head as raw e4m3 rows (128 bytes each,
// unswizzled) into shared address `raw`: K rows, then V rows 8 KB on, from the pages stage_pages
// found; zeros past the end. Thread t copies 16-byte chunk t % 8 of rows t / 8 + 16 i.
__device__ __forceinline__ void load_raw_stage(uint32_t raw, const uint8_t* k_cache,
                                               const uint8_t* v_cache,
                                               const int (&page)[kRowsPerThread], int key_begin,
                                               int page_size, int page_shift, int64_t kv_row_stride,
                                               int head_offset) {
    const int chunk = int(threadIdx.x) % 8, row0 = int(threadIdx.x) / 8;
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
        const int r = row0 + 16 * i;
        const bool valid = page[i] >= 0;
        const int64_t row =
            int64_t(page[i]) * page_size + page_offset(key_begin + r, page_size, page_shift);
        const int64_t src = valid ? row * kv_row_stride + head_offset + chunk * 16 : 0;
        const uint32_t dst = uint32_t(r * kHeadDim + chunk * 16);
        cp_async_16_to(raw + dst, k_cache + src, valid);
        cp_async_16_to(raw + uint32_t(kBlockN * kHeadDim) + dst, v_cache + src, valid);
    }
}

// FP8: a raw stage that has landed (shared address `raw`, as load_raw_stage leaves it) widened
// to f16 into the swizzled K and V tiles at shared address `tiles` (unscaled). Thread t widens
// the chunks it copied: 16 dims each, the swizzle chunks 2 c and 2 c + 1 of half c / 4.
__device__ __forceinline__ void widen_raw_stage(uint8_t* smem_base, uint32_t smem_base_addr,
                                                uint32_t raw, uint32_t tiles) {
    const int chunk = int(threadIdx.x) % 8, row0 = int(threadIdx.x) / 8;
    auto at = [&](uint32_t addr) { return smem_base + (addr - smem_base_addr); };
#pragma unroll
    for (int i = 0; i < kBlockN / 16; ++i) {
        const int r = row0 + 16 * i;
        const uint32_t src = uint32_t(r * kHeadDim + chunk * 16);
        const uint32_t dst0 = uint32_t((chunk / 4) * kHalfBytes) + swizzled(r, 2 * (chunk % 4));
        const uint32_t dst1 = uint32_t((chunk / 4) * kHalfBytes) + swizzled(r, 2 * (chunk % 4) + 1);
#pragma unroll
        for (int kv = 0; kv < 2; ++kv) {  // K, then V
            const uint4 bytes =
                *reinterpret_cast<const uint4*>(at(raw + uint32_t(kv * kBlockN * kHeadDim) + src));
            const uint32_t tile = tiles + uint32_t(kv * kTileBytes);
            *reinterpret_cast<uint4*>(at(tile + dst0)) =
                e4m3x8_to_f16x8(make_uint2(bytes.x, bytes.y));
            *reinterpret_cast<uint4*>(at(tile + dst1)) =
                e4m3x8_to_f16x8(make_uint2(bytes.z, bytes.w));
        }
    }
}

// The kernel's two products, each a batch of wgmmas waited for before it returns.

// s = Q·Kᵀ over the K tile at shared address k_tile: k16 slice kc of the dims is 32 bytes into
// a row of half kc / 4.
template <typename Elem>
__device__ __forceinline__ void score_tile(float (&s)[kBlockN / 8][4],
                                           const uint32_t (&q_frag)[kHeadDim / 16][4],
                                           uint32_t k_tile) {
#pragma unroll
    for (int nt = 0; nt < kBlockN / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
    wgmma_fence();
#pragma unroll
    for (int kc = 0; kc < kHeadDim / 16; ++kc)
        wgmma_rs<64, Elem, false>(
            s, q_frag[kc], smem_desc(k_tile + uint32_t((kc / 4) * kHalfBytes + (kc % 4) * 32)));
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int nt = 0; nt < kBlockN / 8; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) wgmma_fence_operand(s[nt][i]);
}

// o += P·V over the V tile at shared address v_tile, P the softmax weights online_softmax left
// in s: P's k16 slice kk (keys 16 kk ..) is s's n8 blocks 2 kk and 2 kk + 1; V's is its rows
// 16 kk .., two atoms (2048 bytes) per slice.
template <typename Elem>
__device__ __forceinline__ void accumulate_tile(float (&o)[kHeadDim / 8][4],
                                                const float (&s)[kBlockN / 8][4], uint32_t v_tile) {
    uint32_t p[kBlockN / 16][4];
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
        p[kk][0] = pack_pair<Elem>(s[2 * kk][0], s[2 * kk][1]);
        p[kk][1] = pack_pair<Elem>(s[2 * kk][2], s[2 * kk][3]);
        p[kk][2] = pack_pair<Elem>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        p[kk][3] = pack_pair<Elem>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
        wgmma_rs<128, Elem, true>(
            o, p[kk],
            smem_desc_mn(v_tile + uint32_t(kk * 2 * kWgmmaAtomBytes), uint32_t(kHalfBytes)));
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int dt = 0; dt < kHeadDim / 8; ++dt)
#pragma unroll
        for (int i = 0; i < 4; ++i) wgmma_fence_operand(o[dt][i]);
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i) wgmma_fence_operand(p[kk][i]);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// q, k_cache, v_cache, query_start, seq_lens, block_table, out: as prefill_kernel's
// (attention_prefill.cu), head_dim 128; Cache bf16, or uint8_t for an FP8 cache (k_scale,
// v_scale its scales). Grid: (num_seqs, num_kv_heads, row tiles of 64 packed rows), each
// sequence's last row tile first (prefill_row_tile).
// Three CTAs an SM with a bf16 cache (at most 170 registers, 3 x 65 KB of shared memory), so
// that one CTA's softmax overlaps another's wgmmas; two with FP8 (its widening takes registers).
template <typename Cache>
__global__ void __launch_bounds__(kThreads, std::is_same_v<Cache, uint8_t> ? 2 : 3)
    prefill_sm90_kernel(const bf16* __restrict__ q, const Cache* __restrict__ k_cache,
                        const Cache* __restrict__ v_cache, float k_scale, float v_scale,
                        const int32_t* __restrict__ query_start,
                        const int32_t* __restrict__ seq_lens,
                        const int32_t* __restrict__ block_table, int max_pages, int num_heads,
                        int num_kv_heads, int page_size, int page_shift, float scale_log2,
                        bf16* __restrict__ out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    pdl_wait();
    pdl_trigger();
    const int seq = blockIdx.x, kv_head = blockIdx.y;
    const int group = num_heads / num_kv_heads;
    const int q_begin = query_start[seq];
    const int q_len = query_start[seq + 1] - q_begin;
    const int num_rows = q_len * group;
    const int row_begin = prefill_row_tile<kBlockM>(num_rows);
    if (row_begin < 0) return;
    const int seq_len = seq_lens[seq];
    const int prefix_len = seq_len - q_len;  // keys cached before this chunk
    const int last_row = min(row_begin + kBlockM, num_rows) - 1;
    const int num_keys = prefix_len + last_row / group + 1;  // up to the last row's limit
    const int min_limit = prefix_len + row_begin / group;    // the smallest causal limit
    const int32_t* pages = block_table + int64_t(seq) * max_pages;
    const int64_t kv_row_stride = int64_t(num_kv_heads) * kHeadDim;
    const int warp = int(threadIdx.x) / 32;

    using Elem = TileElem<Cache>;  // what the wgmmas multiply: bf16, or f16 for an FP8 cache
    constexpr bool kFp8 = std::is_same_v<Cache, uint8_t>;
    int row_limit[2];
    uint32_t q_frag[kHeadDim / 16][4];
    load_q_fragments<kHeadDim, Elem>(q, q_begin, row_begin + warp * 16, num_rows, group, num_heads,
                                     kv_head, prefix_len, seq_len - 1, q_frag, row_limit);

    extern __shared__ uint8_t smem_raw[];
    const uint32_t ring =
        (smem_u32(smem_raw) + kWgmmaAtomBytes - 1) & ~uint32_t(kWgmmaAtomBytes - 1);
    // FP8: raw stage s at ring + kStageBytes + s * 16 KB; the f16 tiles at ring.
    auto raw_stage = [&](int stage) {
        return ring + uint32_t(kStageBytes + stage * 2 * kBlockN * kHeadDim);
    };
    int page[kRowsPerThread];  // the block-table entries of the next tile to load
    auto load = [&](int stage, int key_begin) {
        if constexpr (kFp8) {
            load_raw_stage(raw_stage(stage), k_cache, v_cache, page, key_begin, page_size,
                           page_shift, kv_row_stride, kv_head * kHeadDim);
        } else {
            load_kv_stage(ring + uint32_t(stage * kStageBytes), k_cache, v_cache, page, key_begin,
                          page_size, page_shift, kv_row_stride, kv_head * kHeadDim);
        }
    };
    // The pages of the tile starting at key_begin, ahead of its load.
    auto find_pages = [&](int key_begin) {
        stage_pages(page, pages, key_begin, num_keys, page_size, page_shift);
    };
    const float score_scale = kFp8 ? scale_log2 * k_scale : scale_log2;

    float o[kHeadDim / 8][4];  // the P·V accumulators: 16 rows x 128 dims per warp
#pragma unroll
    for (int dt = 0; dt < kHeadDim / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};

    const int num_tiles = (num_keys + kBlockN - 1) / kBlockN;
    for (int stage = 0; stage < 2; ++stage) {  // one commit group per tile, empty or not
        if (stage < num_tiles) {
            find_pages(stage * kBlockN);
            load(stage, stage * kBlockN);
        }
        cp_async_commit();
    }
    // FP8 loads tile t + 2 at the top of step t (its raw stage is free once tile t is widened),
    // so it reads that tile's pages one step earlier, during step t - 1.
    if (kFp8 && num_tiles > 2) find_pages(2 * kBlockN);
    for (int tile = 0; tile < num_tiles; ++tile) {
        const int key_begin = tile * kBlockN;
        const uint32_t k_tile = ring + uint32_t((kFp8 ? 0 : tile % 2) * kStageBytes);
        const uint32_t v_tile = k_tile + kTileBytes;
        cp_async_wait_all_but_one();  // this thread's copies of tile `tile` have landed
        if constexpr (kFp8) {
            // Each thread widens the chunks it copied itself: no barrier needed before.
            widen_raw_stage(smem_raw, smem_u32(smem_raw), raw_stage(tile % 2), ring);
            fence_proxy_async_shared();  // the f16 writes, before wgmma's reads
            __syncthreads();             // everyone's; the raw stage is free
            if (tile + 2 < num_tiles) load(tile % 2, key_begin + 2 * kBlockN);
            cp_async_commit();
            if (tile + 3 < num_tiles) find_pages(key_begin + 3 * kBlockN);  // read during the step
        } else {
            fence_proxy_async_shared();  // ... and are visible to wgmma's reads
            __syncthreads();             // everyone's
            if (tile + 2 < num_tiles) find_pages(key_begin + 2 * kBlockN);  // read during the step
        }

        float s[kBlockN / 8][4];
        score_tile<Elem>(s, q_frag, k_tile);
        // Tile 0 holds key 0, which every row sees: no empty rows (kMayBeEmpty false). Only
        // tiles reaching past the smallest limit need the mask.
        online_softmax<kHeadDim, kBlockN, false>(s, row_max, row_sum, o, score_scale,
                                                 key_begin + kBlockN - 1 > min_limit, key_begin,
                                                 row_limit);

        accumulate_tile<Elem>(o, s, v_tile);

        __syncthreads();  // every warp's wgmmas are done with this stage (FP8: the f16 tiles)
        if constexpr (!kFp8) {
            if (tile + 2 < num_tiles) load(tile % 2, key_begin + 2 * kBlockN);
            cp_async_commit();
        }
    }
    cp_async_wait_all();
    if constexpr (kFp8) {
#pragma unroll
        for (int dt = 0; dt < kHeadDim / 8; ++dt)
#pragma unroll
            for (int i = 0; i < 4; ++i) o[dt][i] *= v_scale;
    }

    finish_rows<false>(
        row_sum, row_begin + warp * 16, num_rows, [&](int i, int r, float, float inv_sum) {
            store_o_bf16<kHeadDim>(
                o, i, inv_sum,
                out + packed_row_index(q_begin, r, group, num_heads, kv_head) * kHeadDim);
        });
#else
    __trap();  // built without sm_90a features: the launcher refuses such devices
#endif
}

template <typename Cache>
void launch_sm90(const AttentionLaunch& a, dim3 grid, cudaStream_t stream) {
    allow_shared_memory<prefill_sm90_kernel<Cache>>(kSmemBytes);
    launch_kernel(prefill_sm90_kernel<Cache>, grid, kThreads, kSmemBytes, stream,
                  static_cast<const bf16*>(a.q), static_cast<const Cache*>(a.k_cache),
                  static_cast<const Cache*>(a.v_cache), a.k_scale, a.v_scale, a.query_start,
                  a.seq_lens, a.block_table, int(a.max_pages), int(a.num_heads),
                  int(a.num_kv_heads), int(a.page_size), page_shift_of(a.page_size),
                  a.scale * 1.4426950408889634f,  // exp(x) = 2^(x log2 e)
                  static_cast<bf16*>(a.out));
}

}  // namespace

bool attention_prefill_sm90_supported(const AttentionLaunch& a) {
    static const bool device_ok = [] {
        int device = 0, major = 0, minor = 0;
        MI_CUDA_CHECK(cudaGetDevice(&device));
        MI_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
        MI_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
        return major == 9 && minor == 0;
    }();
    return device_ok && a.head_dim == kHeadDim;
}

void launch_attention_prefill_sm90(const AttentionLaunch& a, dim3 grid, cudaStream_t stream) {
    MI_LAUNCH_CHECK(attention_prefill_sm90_supported(a),
                    "attention prefill (wgmma): needs an sm_90 device and head_dim 128");
    if (a.fp8_cache)
        launch_sm90<uint8_t>(a, grid, stream);
    else
        launch_sm90<bf16>(a, grid, stream);
}

}  // namespace miniinfer::cuda
