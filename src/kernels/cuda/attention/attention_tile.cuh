// The FlashAttention-2 tile step that the mma.sync attention kernels run (the fa2 prefill,
// attention_prefill.cu; the fa2 decode for GQA groups of 4 to 16, attention_decode.cu; the
// flashinfer work kernel, attention_flashinfer.cu): one warp holds
// 16 "packed" query rows (row r: query token r / group, query head kv_head * group + r % group)
// and meets one tile of keys staged in shared memory:
//   load_q_fragments   Q of the thread's two rows as mma A fragments, loaded once
//   gather_kv_tile     a tile of K or V rows from the paged cache, cp.async, zeros past the end
//   widen_kv_tile      an FP8 cache's raw tile, once it has landed, widened to an f16 tile
//   qk_scores          S = Q·Kᵀ (16 rows x kKeys keys, fp32 accumulators)
//   online_softmax     scale to base 2, causal / range mask, running max and sum, O rescaled,
//                      S becomes P = 2^(S - max) (softmax_scores, then rescale_o)
//   accumulate_pv      O += P·V, P taken straight from the S accumulators as A fragments
// and, around it, what both kernels do with a block of 64 packed rows:
//   prefill_row_tile   which row tile of its sequence a prefill block takes (the grid's order:
//                      heaviest tiles first, a mixed step's decode rows spread among them)
//   kv_tile_ring       K/V tiles through a two-stage cp.async ring (FP8: raw tiles, widened
//                      to f16 before their step: the step then multiplies in f16), for a block
//                      or for one warp
//   attend_tiles       the tile loop: K/V tiles of keys [kv_begin, kv_end) through the ring,
//                      the tile step above on each warp's 16 rows
//   attend_narrow      the decode form of the loop: at most 16 packed rows, the block's warps
//                      splitting the keys (each through its own ring), states merged at the end
//   attend_narrow_heads  the same for one token's GQA group of at most 8 heads, the products
//                      transposed (heads as the mma's 8 columns: half the mma work)
//   finish_rows        the epilogue's common part: each row's softmax sum over its quad, rows
//                      past the end skipped, 1 / sum handed to a store (store_o_bf16, store_o_f32)
// Fragment layout (mma m16n8k16): a thread (gid = lane / 4, tig = lane % 4) holds rows gid and
// gid + 8, columns tig * 2 and tig * 2 + 1 of every 8-column block.
// Everything is inlined into the callers; constant arguments (fa2's kv_begin 0, warp_active true)
// fold away, so each kernel keeps the instruction mix it had with its own copy of the loop.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention/kv_fp8.cuh"
#include "kernels/cuda/attention/paged_kv.cuh"
#include "kernels/cuda/primitives/mma_bf16.cuh"
#include "kernels/cuda/primitives/reduce.cuh"

namespace miniinfer::cuda {

// 2^x by one MUFU.EX2 (exp2f adds a denormal-range fix-up around it): results below 2^-126 flush
// to zero, which a softmax weight next to the row's max (1) cannot tell from the exact value.
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// The first packed row of this block's tile in the prefill grid (blockIdx.x: sequence,
// blockIdx.z: row tile), negative when the sequence has no such tile. The GPU starts blocks in
// grid order (x fastest, z slowest), so z decides what runs early: z counts each sequence's
// tiles back from its own last, so z = 0 is every sequence's heaviest tile (its last rows see the
// most keys) and the lightest fill the tail; the one-tile sequences (a mixed step's decode rows)
// are spread over the first half of the grid (z = seq mod p, p the largest power of two up to
// gridDim.z / 2), so that their memory-bound blocks run beside the prompts' compute-bound ones
// instead of as a last wave of their own (bench/RESULTS.md#prefill-order). A power of two: a
// modulo by a runtime value cost the wgmma kernel a spilled register.
template <int kBlockM>
__device__ __forceinline__ int prefill_row_tile(int num_rows) {
    const int tiles = (num_rows + kBlockM - 1) / kBlockM;
    const int z = int(blockIdx.z), depth = int(gridDim.z);
    const unsigned spread_mask = (1u << (31 - __clz(max(depth / 2, 1)))) - 1;
    const int shift = tiles == 1 ? int(blockIdx.x & spread_mask) : 0;
    const int row_begin = (tiles - 1 - z + shift) * kBlockM;
    return row_begin < num_rows ? row_begin : -1;
}

// The 16-bit type the tile step multiplies in: bf16 for a bf16 cache; f16 for an FP8 cache,
// whose e4m3 values widen to f16 exactly at one conversion instruction per pair (to bf16 it takes
// five, which made the widening cost as much as the mma work). Q and P are then f16 too: finer
// than bf16 (11 significant bits against 8) over f16's range (|x| < 65504), ample for attention
// inputs (normalised q, probabilities in [0, 1]); the sums stay fp32.
template <typename Cache>
using TileElem = std::conditional_t<std::is_same_v<Cache, uint8_t>, __half, __nv_bfloat16>;

// The thread's rows r0 + gid and r0 + gid + 8 (r0: the warp's first packed row): Q fragments
// of Elem (zeros for rows >= num_rows) and the last key each row may see: its causal limit
// prefix_len + token, capped at last_key, which is also the limit of rows past the end.
// q: [num_tokens, num_heads, kHeadDim] bf16; q_begin: the sequence's first query token.
template <int kHeadDim, typename Elem = __nv_bfloat16>
__device__ __forceinline__ void load_q_fragments(const __nv_bfloat16* q, int q_begin, int r0,
                                                 int num_rows, int group, int num_heads,
                                                 int kv_head, int prefix_len, int last_key,
                                                 uint32_t (&q_frag)[kHeadDim / 16][4],
                                                 int (&limit)[2]) {
    const int lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int r = r0 + gid + 8 * i;
        const bool valid = r < num_rows;
        const int t = valid ? r / group : 0;
        limit[i] = min(valid ? prefix_len + t : last_key, last_key);
        const __nv_bfloat16* q_row =
            q + (int64_t(q_begin + t) * num_heads + kv_head * group + (valid ? r % group : 0)) *
                    kHeadDim;
        // A bf16 pair as Elem's pair (f16: through fp32, one rounding).
        auto pair = [&](int col) -> uint32_t {
            if (!valid) return 0u;
            const uint32_t bits = *reinterpret_cast<const uint32_t*>(q_row + col);
            if constexpr (std::is_same_v<Elem, __half>) {
                const float2 f =
                    __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits));
                return pack_f16(f.x, f.y);
            } else {
                return bits;
            }
        };
#pragma unroll
        for (int kc = 0; kc < kHeadDim / 16; ++kc) {
            const int col = kc * 16 + tig * 2;
            q_frag[kc][i] = pair(col);
            q_frag[kc][2 + i] = pair(col + 8);
        }
    }
}

// One 16-byte chunk of a K/V row into shared memory by cp.async (zero-filled when !valid; the
// caller commits and waits), starting at element col: 8 elements of a bf16 cache into a bf16
// tile row ([kHeadDim + 8] elements), or 16 e4m3 bytes of an FP8 cache into a raw row
// ([kHeadDim] bytes) that widen_kv_tile turns into f16 once it has landed.
template <int kHeadDim>
__device__ __forceinline__ void load_kv_chunk(__nv_bfloat16* tile, int r, int col,
                                              const __nv_bfloat16* cache, int64_t offset,
                                              bool valid) {
    cp_async_16(tile + r * (kHeadDim + 8) + col, cache + offset, valid);
}
template <int kHeadDim>
__device__ __forceinline__ void load_kv_chunk(uint8_t* raw, int r, int col, const uint8_t* cache,
                                              int64_t offset, bool valid) {
    cp_async_16(raw + r * kHeadDim + col, cache + offset, valid);
}

// Keys [key_begin, key_begin + kKeys) of one KV head into tile, spread over kThreads threads
// (t: this thread's index among them); keys from key_end on are zero-filled, never read (the
// cache past a sequence's length may hold anything). cache: [num_pages, page_size,
// num_kv_heads, kHeadDim] of Cache; tile: [kKeys, kHeadDim + 8] bf16 for a bf16 cache,
// [kKeys, kHeadDim] raw e4m3 bytes for an FP8 cache; pages: the sequence's block-table row;
// kv_row_stride = num_kv_heads * kHeadDim and head_offset = kv_head * kHeadDim, computed once by
// the caller.
template <int kHeadDim, int kKeys, int kThreads, typename Cache>
__device__ __forceinline__ void gather_kv_tile(Cache* tile, const Cache* cache,
                                               const int32_t* pages, int key_begin, int key_end,
                                               int page_size, int page_shift, int64_t kv_row_stride,
                                               int head_offset, int t) {
    constexpr int kChunkElems = 16 / sizeof(Cache);  // elements per 16-byte chunk
    constexpr int kChunks = kHeadDim / kChunkElems;  // chunks per row
    // A tile inside one page (every decode slice of 16 keys with pages of 16 or more, since the
    // slices start at multiples of 16): one block-table lookup for all its keys.
    const int in_page = page_shift >= 0 ? key_begin & (page_size - 1) : key_begin % page_size;
    if (in_page + kKeys <= page_size) {
        const int page_idx = page_shift >= 0 ? key_begin >> page_shift : key_begin / page_size;
        const int64_t base =
            (int64_t(pages[page_idx]) * page_size + in_page) * kv_row_stride + head_offset;
#pragma unroll
        for (int c = t; c < kKeys * kChunks; c += kThreads) {
            const int r = c / kChunks, col = (c % kChunks) * kChunkElems;
            load_kv_chunk<kHeadDim>(tile, r, col, cache, base + r * kv_row_stride + col,
                                    key_begin + r < key_end);
        }
        return;
    }
    for (int c = t; c < kKeys * kChunks; c += kThreads) {
        const int r = c / kChunks, col = (c % kChunks) * kChunkElems;
        const int key = key_begin + r;
        const bool valid = key < key_end;
        const int64_t offset =
            valid ? cache_row(pages, key, page_size, page_shift) * kv_row_stride + head_offset + col
                  : 0;
        load_kv_chunk<kHeadDim>(tile, r, col, cache, offset, valid);
    }
}

// An FP8 tile that has landed (raw: [kKeys, kHeadDim] e4m3 bytes) widened into the f16 tile
// the mma reads ([kKeys, kHeadDim + 8]), unscaled (the caller applies the cache's scales to the
// scores and the output); spread over kThreads threads (t: this thread's index), 16 bytes each.
// The caller orders it with barriers: after the cp.async wait, before the mma.
template <int kHeadDim, int kKeys, int kThreads>
__device__ __forceinline__ void widen_kv_tile(__half* tile, const uint8_t* raw, int t) {
    constexpr int kChunks = kHeadDim / 16;
    for (int c = t; c < kKeys * kChunks; c += kThreads) {
        const int r = c / kChunks, col = (c % kChunks) * 16;
        const uint4 bytes = *reinterpret_cast<const uint4*>(raw + r * kHeadDim + col);
        uint4* dst = reinterpret_cast<uint4*>(tile + r * (kHeadDim + 8) + col);
        dst[0] = e4m3x8_to_f16x8(make_uint2(bytes.x, bytes.y));
        dst[1] = e4m3x8_to_f16x8(make_uint2(bytes.z, bytes.w));
    }
}

// s = Q·Kᵀ for the kKeys keys of k_tile ([kKeys, kHeadDim + 8] Elem in shared memory).
template <int kHeadDim, int kKeys, typename Elem = __nv_bfloat16>
__device__ __forceinline__ void qk_scores(const uint32_t (&q_frag)[kHeadDim / 16][4],
                                          const Elem* k_tile, float (&s)[kKeys / 8][4]) {
    constexpr int kStride = kHeadDim + 8;
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
    for (int kc = 0; kc < kHeadDim / 16; ++kc) {
#pragma unroll
        for (int np = 0; np < kKeys / 16; ++np) {
            // Matrices (lane / 8): keys +0 / +8 (lane / 16) x dims +0 / +8 ((lane / 8) & 1)
            // -> b0, b1 of key tile 2np and of key tile 2np + 1.
            uint32_t b[4];
            ldmatrix_x4(b, k_tile + (np * 16 + (lane / 16) * 8 + lane % 8) * kStride + kc * 16 +
                               ((lane / 8) & 1) * 8);
            mma_16816<Elem>(s[2 * np], q_frag[kc], b[0], b[1]);
            mma_16816<Elem>(s[2 * np + 1], q_frag[kc], b[2], b[3]);
        }
    }
}

// One online-softmax step over the tile's scores (keys key_begin + column), O left alone:
// scores scaled to base 2, keys past a row's limit masked when need_mask (the caller knows
// whether any key of the tile can be past one), the running max / sum updated, s left holding
// P = 2^(s - max), and each row's factor for O (2^(old max - new max)) in correction.
// kMayBeEmpty: a row may have seen no key yet (max -inf); it then takes 0 as its reference, so
// its P and correction are exact zeros rather than NaN. Without it (fa2: tile 0 holds key 0,
// which every row sees) the check is left out. online_softmax applies the correction to O at
// once (rescale_o).
template <int kKeys, bool kMayBeEmpty>
__device__ __forceinline__ void softmax_scores(float (&s)[kKeys / 8][4], float (&row_max)[2],
                                               float (&row_sum)[2], float (&correction)[2],
                                               float scale_log2, bool need_mask, int key_begin,
                                               const int (&limit)[2]) {
    // Per score, in the common (unmasked) tile: a max, one FFMA (scale and shift in one), one
    // MUFU.EX2 and an add; the scale is applied to the max (scale_log2 > 0 keeps the order)
    // rather than to every score.
    const int tig = threadIdx.x % 4;
    if (need_mask) {
#pragma unroll
        for (int nt = 0; nt < kKeys / 8; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i)
                if (key_begin + nt * 8 + tig * 2 + i % 2 > limit[i / 2]) s[nt][i] = -INFINITY;
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        float raw_max = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < kKeys / 8; ++nt)
            raw_max = fmaxf(raw_max, fmaxf(s[nt][2 * i], s[nt][2 * i + 1]));
        // A row's scores live in the 4 threads of a quad.
        const float tile_max = fmaxf(row_max[i], quad_max(raw_max) * scale_log2);
        const float ref = (kMayBeEmpty && tile_max == -INFINITY) ? 0.f : tile_max;
        correction[i] = fast_exp2(row_max[i] - ref);
        row_max[i] = tile_max;
        float tile_sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                float& x = s[nt][2 * i + j];
                x = fast_exp2(fmaf(x, scale_log2, -ref));
                tile_sum += x;
            }
        }
        row_sum[i] = row_sum[i] * correction[i] + tile_sum;
    }
}

// O's rows (fragment rows 0: gid, 1: gid + 8) times their softmax correction; nothing when no
// row of the warp has a new max (every correction exactly 1: most tiles after the first few).
// Whole warps only.
template <int kHeadDim>
__device__ __forceinline__ void rescale_o(float (&o)[kHeadDim / 8][4],
                                          const float (&correction)[2]) {
    if (__all_sync(0xffffffffu, correction[0] == 1.f && correction[1] == 1.f)) return;
#pragma unroll
    for (int dt = 0; dt < kHeadDim / 8; ++dt) {
        o[dt][0] *= correction[0];
        o[dt][1] *= correction[0];
        o[dt][2] *= correction[1];
        o[dt][3] *= correction[1];
    }
}

// softmax_scores, then O rescaled at once.
template <int kHeadDim, int kKeys, bool kMayBeEmpty>
__device__ __forceinline__ void online_softmax(float (&s)[kKeys / 8][4], float (&row_max)[2],
                                               float (&row_sum)[2], float (&o)[kHeadDim / 8][4],
                                               float scale_log2, bool need_mask, int key_begin,
                                               const int (&limit)[2]) {
    float correction[2];
    softmax_scores<kKeys, kMayBeEmpty>(s, row_max, row_sum, correction, scale_log2, need_mask,
                                       key_begin, limit);
    rescale_o<kHeadDim>(o, correction);
}

// o += P·V for the kKeys keys of v_tile ([kKeys, kHeadDim + 8] Elem in shared memory).
template <int kHeadDim, int kKeys, typename Elem = __nv_bfloat16>
__device__ __forceinline__ void accumulate_pv(const float (&s)[kKeys / 8][4], const Elem* v_tile,
                                              float (&o)[kHeadDim / 8][4]) {
    constexpr int kStride = kHeadDim + 8;
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
        // The S accumulators of key tiles 2kk and 2kk + 1 are exactly the A fragment of P.
        const uint32_t p[4] = {pack_pair<Elem>(s[2 * kk][0], s[2 * kk][1]),
                               pack_pair<Elem>(s[2 * kk][2], s[2 * kk][3]),
                               pack_pair<Elem>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                               pack_pair<Elem>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (int dp = 0; dp < kHeadDim / 16; ++dp) {
            // Matrices (lane / 8), transposed: keys +0 / +8 ((lane / 8) & 1) x dims +0 / +8
            // (lane / 16) -> b0, b1 of dim tile 2dp and of dim tile 2dp + 1.
            uint32_t b[4];
            ldmatrix_x4_trans(b, v_tile + (kk * 16 + ((lane / 8) & 1) * 8 + lane % 8) * kStride +
                                     dp * 16 + (lane / 16) * 8);
            mma_16816<Elem>(o[2 * dp], p, b[0], b[1]);
            mma_16816<Elem>(o[2 * dp + 1], p, b[2], b[3]);
        }
    }
}

// The tile step on one warp's 16 rows: S = Q·Kᵀ, the online softmax (keys past the rows'
// limits masked when the tile reaches past min_limit, the smallest of them), O += P·V.
template <int kHeadDim, int kKeys, bool kMayBeEmpty, typename Elem>
__device__ __forceinline__ void attend_tile(const uint32_t (&q_frag)[kHeadDim / 16][4],
                                            const Elem* k_tile, const Elem* v_tile, int key_begin,
                                            int min_limit, const int (&limit)[2], float score_scale,
                                            float (&o)[kHeadDim / 8][4], float (&row_max)[2],
                                            float (&row_sum)[2]) {
    float s[kKeys / 8][4];
    qk_scores<kHeadDim, kKeys, Elem>(q_frag, k_tile, s);
    online_softmax<kHeadDim, kKeys, kMayBeEmpty>(
        s, row_max, row_sum, o, score_scale, key_begin + kKeys - 1 > min_limit, key_begin, limit);
    accumulate_pv<kHeadDim, kKeys, Elem>(s, v_tile, o);
}

// o *= scale (an FP8 cache's v_scale, applied once after the loop).
template <int kHeadDim>
__device__ __forceinline__ void scale_o(float (&o)[kHeadDim / 8][4], float scale) {
#pragma unroll
    for (int dt = 0; dt < kHeadDim / 8; ++dt)
#pragma unroll
        for (int j = 0; j < 4; ++j) o[dt][j] *= scale;
}

// Row r of a (sequence, KV head)'s packed rows as a row of a [num_tokens, num_heads, head_dim]
// tensor: token q_begin + r / group, head kv_head * group + r % group.
__device__ __forceinline__ int64_t packed_row_index(int q_begin, int r, int group, int num_heads,
                                                    int kv_head) {
    return int64_t(q_begin + r / group) * num_heads + kv_head * group + r % group;
}

// The two-stage cp.async ring both tile loops run: tiles it = 0 .. count - 1, of kKeys keys from
// key_of(it) (keys from kv_end on zero-filled), each loaded two tiles ahead of its step, by the
// kThreads threads that share k_tiles and v_tiles (two stages each of [kKeys, kHeadDim + 8] bf16;
// t: this thread's index among them) and sync() with each other (a block barrier or __syncwarp).
// step(key_begin, k_tile, v_tile) consumes tile it. Every thread of the group must call it; it
// ends with sync(), so the tiles may be refilled right after. One commit group per tile (its K
// and V), always committed (maybe empty), so that waiting for all but the newest group means
// waiting for this tile. An FP8 cache (Cache uint8_t): the raw e4m3 tiles take the ring instead,
// in the space of the second stages (stage s: its K then its V rows, [2, kKeys, kHeadDim] bytes,
// behind k_tiles for s = 0, behind v_tiles for s = 1), and each is widened into the first stages
// as f16 (unscaled; TileElem) just before its step, which frees its raw stage for tile it + 2.
// The tiles step() gets are TileElem<Cache>. started() runs once the first two tiles' loads
// are issued, before the first wait: loads of its own (the decode loop's Q) then overlap them.
template <int kHeadDim, int kKeys, int kThreads, typename Cache, class KeyOf, class Sync,
          class Step, class Started>
__device__ __forceinline__ void kv_tile_ring(__nv_bfloat16* k_tiles, __nv_bfloat16* v_tiles,
                                             const Cache* k_cache, const Cache* v_cache,
                                             const int32_t* pages, int count, KeyOf key_of,
                                             int kv_end, int page_size, int page_shift,
                                             int64_t kv_row_stride, int head_offset, int t,
                                             Sync sync, Step step, Started started) {
    constexpr int kTileElems = kKeys * (kHeadDim + 8);
    constexpr bool kFp8 = std::is_same_v<Cache, uint8_t>;
    // Where stage `stage`'s K and V land: the bf16 stages, or for FP8 the raw space behind them.
    auto k_dst = [&](int stage) -> Cache* {
        if constexpr (kFp8)
            return reinterpret_cast<uint8_t*>((stage == 0 ? k_tiles : v_tiles) + kTileElems);
        else
            return k_tiles + stage * kTileElems;
    };
    auto v_dst = [&](int stage) -> Cache* {
        if constexpr (kFp8)
            return k_dst(stage) + kKeys * kHeadDim;
        else
            return v_tiles + stage * kTileElems;
    };
    auto load = [&](int stage, int key_begin) {
        gather_kv_tile<kHeadDim, kKeys, kThreads>(k_dst(stage), k_cache, pages, key_begin, kv_end,
                                                  page_size, page_shift, kv_row_stride, head_offset,
                                                  t);
        gather_kv_tile<kHeadDim, kKeys, kThreads>(v_dst(stage), v_cache, pages, key_begin, kv_end,
                                                  page_size, page_shift, kv_row_stride, head_offset,
                                                  t);
    };
    for (int stage = 0; stage < 2; ++stage) {
        if (stage < count) load(stage, key_of(stage));
        cp_async_commit();
    }
    started();
    for (int it = 0; it < count; ++it) {
        cp_async_wait_all_but_one();  // K(it) and V(it) have landed
        sync();
        if constexpr (kFp8) {
            __half* k_tile = reinterpret_cast<__half*>(k_tiles);
            __half* v_tile = reinterpret_cast<__half*>(v_tiles);
            widen_kv_tile<kHeadDim, kKeys, kThreads>(k_tile, k_dst(it % 2), t);
            widen_kv_tile<kHeadDim, kKeys, kThreads>(v_tile, v_dst(it % 2), t);
            sync();  // the f16 tiles are whole, the raw stage is free
            if (it + 2 < count) load(it % 2, key_of(it + 2));
            cp_async_commit();
            step(key_of(it), static_cast<const __half*>(k_tile),
                 static_cast<const __half*>(v_tile));
            sync();  // every thread is done with the f16 tiles
        } else {
            step(key_of(it), static_cast<const __nv_bfloat16*>(k_tiles + (it % 2) * kTileElems),
                 static_cast<const __nv_bfloat16*>(v_tiles + (it % 2) * kTileElems));
            sync();  // every thread is done with this stage
            if (it + 2 < count) load(it % 2, key_of(it + 2));
            cp_async_commit();
        }
    }
}

// The tile loop of a block of kThreads / 32 warps, 16 packed rows each, over the keys
// [kv_begin, kv_end) of one KV head: o, row_max, row_sum start empty and leave holding each
// row's unnormalised output, running max and (thread-partial) sum. k_tiles, v_tiles: two stages
// each of [kKeys, kHeadDim + 8] bf16 in shared memory, filled through kv_tile_ring. min_limit:
// the smallest key limit of the block's rows (tiles below it need no mask). warp_active == false:
// the warp loads its share of every tile but skips the math (all its rows are past the end).
// Every thread of the block must call it (it holds block barriers); it ends with one, so the
// tiles may be refilled right after. Cache: bf16, or uint8_t for an FP8 cache (k_scale, v_scale:
// its scales, applied to the scores and to o; q_frag then holds f16, load_q_fragments with
// TileElem<Cache>).
template <int kHeadDim, int kKeys, int kThreads, bool kMayBeEmpty, typename Cache>
__device__ __forceinline__ void attend_tiles(
    const uint32_t (&q_frag)[kHeadDim / 16][4], const int (&row_limit)[2], bool warp_active,
    __nv_bfloat16* k_tiles, __nv_bfloat16* v_tiles, const Cache* k_cache, const Cache* v_cache,
    float k_scale, float v_scale, const int32_t* pages, int kv_begin, int kv_end, int min_limit,
    int page_size, int page_shift, int64_t kv_row_stride, int head_offset, float scale_log2,
    float (&o)[kHeadDim / 8][4], float (&row_max)[2], float (&row_sum)[2]) {
#pragma unroll
    for (int dt = 0; dt < kHeadDim / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.f;
    row_max[0] = row_max[1] = -INFINITY;
    row_sum[0] = row_sum[1] = 0.f;
    using Elem = TileElem<Cache>;
    constexpr bool kFp8 = std::is_same_v<Cache, uint8_t>;
    const float score_scale = kFp8 ? scale_log2 * k_scale : scale_log2;
    kv_tile_ring<kHeadDim, kKeys, kThreads>(
        k_tiles, v_tiles, k_cache, v_cache, pages, (kv_end - kv_begin + kKeys - 1) / kKeys,
        [&](int it) { return kv_begin + it * kKeys; }, kv_end, page_size, page_shift, kv_row_stride,
        head_offset, int(threadIdx.x), [] { __syncthreads(); },
        [&](int key_begin, const Elem* k_tile, const Elem* v_tile) {
            if (!warp_active) return;
            attend_tile<kHeadDim, kKeys, kMayBeEmpty>(q_frag, k_tile, v_tile, key_begin, min_limit,
                                                      row_limit, score_scale, o, row_max, row_sum);
        },
        [] {});
    if constexpr (kFp8) scale_o<kHeadDim>(o, v_scale);
}

// The narrow loops' merge of their warps' softmax states: warp w left, for each of its up to
// kRows rows, the unnormalised output (red_o [kWarps, kRows, o_stride] floats), the running max
// and the softmax sum (red_m, red_l [kWarps, kRows]); for every row r = row_begin + local below
// num_rows and dim d, store(local, r, d, acc, sum, max) of the merged state. Every thread of the
// block calls it, after a barrier that makes the states visible.
template <int kHeadDim, int kWarps, int kRows, typename Store>
__device__ __forceinline__ void merge_warp_states(const float* red_o, const float* red_m,
                                                  const float* red_l, int o_stride, int row_begin,
                                                  int num_rows, Store& store) {
    for (int idx = threadIdx.x; idx < kRows * kHeadDim; idx += kWarps * 32) {
        const int local = idx / kHeadDim, d = idx % kHeadDim;
        const int r = row_begin + local;
        if (r >= num_rows) break;  // idx only grows
        float m_all = -INFINITY;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, red_m[w * kRows + local]);
        const float ref = m_all == -INFINITY ? 0.f : m_all;
        float l_all = 0.f, a_all = 0.f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
            const float wt = exp2f(red_m[w * kRows + local] - ref);
            l_all += red_l[w * kRows + local] * wt;
            a_all += red_o[(w * kRows + local) * o_stride + d] * wt;
        }
        store(local, r, d, a_all, l_all, m_all);
    }
}

// The narrow (decode) tile loop: the at most 16 packed rows [row_begin, num_rows) of one
// (sequence, KV head) against its keys [kv_begin, kv_end), the block's kWarps warps splitting the
// keys instead of the rows: warp w walks every kWarps-th slice of 16 keys through its own
// double-buffered K/V slices (kv_tile_ring on the warp's lanes alone, no block barrier in the
// loop), and the warps' softmax states are merged through shared memory at the end. Same bytes
// per key as attend_tiles, a quarter of its mma work for a decode row. smem: kWarps x 2 stages x
// 16 keys x (kHeadDim + 8) bf16 of K slices, then as many of V; the merge reuses it (kWarps x 16
// x (kHeadDim + 2) floats). Then store(local, r, d, acc, sum, max) for every packed row r below
// num_rows (local = r - row_begin) and dim d: the row's unnormalised output at d (v_scale
// applied), its softmax sum (0: the row saw no key) and running max (base 2). prefix_len: the
// sequence's cached keys before its first query token. Every thread of the block calls it; it
// holds block barriers and leaves shared memory in use by the merge (a caller that reuses it
// needs a barrier first). Cache: bf16 or uint8_t (FP8: k_scale on the scores, v_scale on the
// output).
template <int kHeadDim, int kWarps, typename Cache, typename Store>
__device__ __forceinline__ void attend_narrow(
    __nv_bfloat16* smem, const __nv_bfloat16* q, int q_begin, int row_begin, int num_rows,
    int group, int num_heads, int kv_head, int prefix_len, int kv_begin, int kv_end,
    const Cache* k_cache, const Cache* v_cache, float k_scale, float v_scale, const int32_t* pages,
    int page_size, int page_shift, int64_t kv_row_stride, float scale_log2, Store&& store) {
    constexpr int kSub = 16;  // keys per warp step
    constexpr int kStride = kHeadDim + 8;
    using Elem = TileElem<Cache>;
    constexpr bool kFp8 = std::is_same_v<Cache, uint8_t>;
    const float score_scale = kFp8 ? scale_log2 * k_scale : scale_log2;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int gid = lane / 4, tig = lane % 4;
    __nv_bfloat16* warp_k = smem + warp * 2 * kSub * kStride;  // [2, kSub, kStride]
    __nv_bfloat16* warp_v = smem + (kWarps + warp) * 2 * kSub * kStride;
    // Keys past the range are masked like keys past a row's causal limit.
    const int min_limit = min(prefix_len + row_begin / group, kv_end - 1);
    int limit[2];
    uint32_t qf[kHeadDim / 16][4];  // loaded once the ring's first K/V loads are on their way
    const int num_subs = (kv_end - kv_begin + kSub - 1) / kSub;
    const int my_subs = num_subs > warp ? (num_subs - warp + kWarps - 1) / kWarps : 0;
    float acc[kHeadDim / 8][4];
#pragma unroll
    for (int dt = 0; dt < kHeadDim / 8; ++dt)
        acc[dt][0] = acc[dt][1] = acc[dt][2] = acc[dt][3] = 0.f;
    float mx[2] = {-INFINITY, -INFINITY}, sm[2] = {0.f, 0.f};
    kv_tile_ring<kHeadDim, kSub, 32>(
        warp_k, warp_v, k_cache, v_cache, pages, my_subs,
        [&](int it) { return kv_begin + (warp + kWarps * it) * kSub; }, kv_end, page_size,
        page_shift, kv_row_stride, kv_head * kHeadDim, lane, [] { __syncwarp(); },
        [&](int key0, const Elem* kt, const Elem* vt) {
            attend_tile<kHeadDim, kSub, true>(qf, kt, vt, key0, min_limit, limit, score_scale, acc,
                                              mx, sm);
        },
        [&] {
            load_q_fragments<kHeadDim, Elem>(q, q_begin, row_begin, num_rows, group, num_heads,
                                             kv_head, prefix_len, kv_end - 1, qf, limit);
        });
    if constexpr (kFp8) scale_o<kHeadDim>(acc, v_scale);

    // Merge the warps' states through shared memory (the K/V slices are free once every warp is
    // past its loop; its remaining cp.async groups are empty).
    __syncthreads();
    float* red_o = reinterpret_cast<float*>(smem);  // [kWarps, 16, kHeadDim]
    float* red_m = red_o + kWarps * 16 * kHeadDim;  // [kWarps, 16]
    float* red_l = red_m + kWarps * 16;             // [kWarps, 16]
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const float sum = quad_sum(sm[i]);
        const int local = gid + 8 * i;
        float* o_row = red_o + (warp * 16 + local) * kHeadDim;
#pragma unroll
        for (int dt = 0; dt < kHeadDim / 8; ++dt)
            *reinterpret_cast<float2*>(o_row + dt * 8 + tig * 2) =
                make_float2(acc[dt][2 * i], acc[dt][2 * i + 1]);
        if (tig == 0) {
            red_m[warp * 16 + local] = mx[i];
            red_l[warp * 16 + local] = sum;
        }
    }
    __syncthreads();
    merge_warp_states<kHeadDim, kWarps, 16>(red_o, red_m, red_l, kHeadDim, row_begin, num_rows,
                                            store);
}

// attend_narrow for one decode query token whose GQA group of at most 8 heads shares the KV
// head, with the products transposed so that the heads are the mma's 8 columns instead of 8 of
// 16 rows (half of which attend_narrow spends on padding): Sᵀ = K·Qᵀ (16 keys x 8 heads, K from
// shared memory as the A operand, Qᵀ's fragments in registers), the online softmax per head
// (column) over the keys (rows: a reduction over the lanes of one fragment column), then
// Oᵀ = Vᵀ·Pᵀ (head_dim x 8 heads, Vᵀ through ldmatrix.trans, Pᵀ turned from accumulator into B
// operand by movmatrix). Half the mma work and half the accumulator registers of attend_narrow
// at the same bytes. Same contract as attend_narrow with row_begin 0 and num_rows = group <= 8
// (one query token: every head's limit is prefix_len; the store's local == r); smem the same
// (the merge takes kWarps x 8 x (kHeadDim + 6) floats).
template <int kHeadDim, int kWarps, typename Cache, typename Store>
__device__ __forceinline__ void attend_narrow_heads(
    __nv_bfloat16* smem, const __nv_bfloat16* q, int q_begin, int group, int num_heads, int kv_head,
    int prefix_len, int kv_begin, int kv_end, const Cache* k_cache, const Cache* v_cache,
    float k_scale, float v_scale, const int32_t* pages, int page_size, int page_shift,
    int64_t kv_row_stride, float scale_log2, Store&& store) {
    constexpr int kSub = 16;  // keys per warp step
    constexpr int kStride = kHeadDim + 8;
    constexpr int kMTiles = kHeadDim / 16;  // Oᵀ row tiles
    using Elem = TileElem<Cache>;
    constexpr bool kFp8 = std::is_same_v<Cache, uint8_t>;
    const float score_scale = kFp8 ? scale_log2 * k_scale : scale_log2;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int gid = lane / 4, tig = lane % 4;
    __nv_bfloat16* warp_k = smem + warp * 2 * kSub * kStride;  // [2, kSub, kStride]
    __nv_bfloat16* warp_v = smem + (kWarps + warp) * 2 * kSub * kStride;
    // The one query token sees keys up to prefix_len; past the range they are masked too.
    const int last_key = min(prefix_len, kv_end - 1);
    // Qᵀ as B fragments: load_q_fragments' rows gid (head gid) are exactly B's column gid
    // (q_frag[kc][0]: dims kc * 16 + 2 tig, + 1; q_frag[kc][2]: the same + 8). Its rows gid + 8
    // (past 8 heads) stay zero and unused.
    int limit[2];
    uint32_t qf[kHeadDim / 16][4];
    const int num_subs = (kv_end - kv_begin + kSub - 1) / kSub;
    const int my_subs = num_subs > warp ? (num_subs - warp + kWarps - 1) / kWarps : 0;
    float acc[kMTiles][4];  // Oᵀ: dims mt * 16 + gid (+ 8) x heads 2 tig, 2 tig + 1
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) acc[mt][0] = acc[mt][1] = acc[mt][2] = acc[mt][3] = 0.f;
    float mx[2] = {-INFINITY, -INFINITY}, sm[2] = {0.f, 0.f};  // heads 2 tig + j
    kv_tile_ring<kHeadDim, kSub, 32>(
        warp_k, warp_v, k_cache, v_cache, pages, my_subs,
        [&](int it) { return kv_begin + (warp + kWarps * it) * kSub; }, kv_end, page_size,
        page_shift, kv_row_stride, kv_head * kHeadDim, lane, [] { __syncwarp(); },
        [&](int key0, const Elem* kt, const Elem* vt) {
            // Sᵀ: s[0], s[1]: key gid, heads 2 tig, 2 tig + 1; s[2], s[3]: key gid + 8.
            float s[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int kc = 0; kc < kHeadDim / 16; ++kc) {
                uint32_t a[4];  // K rows lane % 16, dims kc * 16 + (lane / 16) * 8
                ldmatrix_x4(a, kt + (lane % 16) * kStride + kc * 16 + (lane / 16) * 8);
                mma_16816<Elem>(s, a, qf[kc][0], qf[kc][2]);
            }
            const bool need_mask = key0 + kSub - 1 > last_key;
            float p[4];
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                float lo = s[j] * score_scale, hi = s[2 + j] * score_scale;
                if (need_mask) {
                    if (key0 + gid > last_key) lo = -INFINITY;
                    if (key0 + gid + 8 > last_key) hi = -INFINITY;
                }
                float tile_max = fmaxf(mx[j], fmaxf(lo, hi));
#pragma unroll
                for (int o = 4; o < 32; o *= 2)  // over the 8 lanes of column 2 tig + j
                    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, o));
                const float ref = tile_max == -INFINITY ? 0.f : tile_max;
                const float correction = exp2f(mx[j] - ref);
                mx[j] = tile_max;
                p[j] = exp2f(lo - ref);
                p[2 + j] = exp2f(hi - ref);
                sm[j] = sm[j] * correction + p[j] + p[2 + j];
#pragma unroll
                for (int mt = 0; mt < kMTiles; ++mt) {
                    acc[mt][j] *= correction;
                    acc[mt][2 + j] *= correction;
                }
            }
            // Pᵀ as B: keys 2 tig, 2 tig + 1 (and + 8) of head gid.
            const uint32_t b0 = movmatrix_trans(pack_pair<Elem>(p[0], p[1]));
            const uint32_t b1 = movmatrix_trans(pack_pair<Elem>(p[2], p[3]));
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt) {
                // Matrices (lane / 8): dims +0 / +8 ((lane / 8) & 1) x keys +0 / +8 (lane / 16),
                // transposed: Vᵀ's a0 .. a3.
                uint32_t a[4];
                ldmatrix_x4_trans(a, vt + ((lane / 16) * 8 + lane % 8) * kStride + mt * 16 +
                                         ((lane / 8) & 1) * 8);
                mma_16816<Elem>(acc[mt], a, b0, b1);
            }
        },
        [&] {
            load_q_fragments<kHeadDim, Elem>(q, q_begin, 0, group, group, num_heads, kv_head,
                                             prefix_len, last_key, qf, limit);
        });
    if constexpr (kFp8)
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[mt][j] *= v_scale;

    // Merge the warps' states through shared memory (as attend_narrow).
    __syncthreads();
    // [kWarps, 8, kOStride]: 4 floats of padding a row, so that the 4 heads a warp's lanes write
    // at once (2 tig + j) fall in different banks.
    constexpr int kOStride = kHeadDim + 4;
    float* red_o = reinterpret_cast<float*>(smem);
    float* red_m = red_o + kWarps * 8 * kOStride;  // [kWarps, 8]
    float* red_l = red_m + kWarps * 8;             // [kWarps, 8]
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const int h = 2 * tig + j;
        float sum = sm[j];
#pragma unroll
        for (int o = 4; o < 32; o *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        float* o_row = red_o + (warp * 8 + h) * kOStride;
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
            o_row[mt * 16 + gid] = acc[mt][j];
            o_row[mt * 16 + gid + 8] = acc[mt][2 + j];
        }
        if (gid == 0) {
            red_m[warp * 8 + h] = mx[j];
            red_l[warp * 8 + h] = sum;
        }
    }
    __syncthreads();
    merge_warp_states<kHeadDim, kWarps, 8>(red_o, red_m, red_l, kOStride, 0, group, store);
}

// The epilogue's common part for the thread's rows r0 + gid and r0 + gid + 8 (r0: the warp's
// first packed row): the row's sum over its quad, rows >= num_rows skipped, then
// store(i, r, sum, inv_sum) for fragment row i (0: gid, 1: gid + 8) and packed row r.
// kMayBeEmpty: a row that saw no key (sum 0) gets inv_sum 0, so it stores zeros, not NaN.
template <bool kMayBeEmpty, typename Store>
__device__ __forceinline__ void finish_rows(const float (&row_sum)[2], int r0, int num_rows,
                                            Store&& store) {
    const int gid = (threadIdx.x % 32) / 4;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const float sum = quad_sum(row_sum[i]);
        const int r = r0 + gid + 8 * i;
        if (r >= num_rows) continue;
        const float inv_sum = kMayBeEmpty ? (sum > 0.f ? 1.f / sum : 0.f) : 1.f / sum;
        store(i, r, sum, inv_sum);
    }
}

// Fragment row i of o times inv_sum, as bf16 into out_row ([kHeadDim]).
template <int kHeadDim>
__device__ __forceinline__ void store_o_bf16(const float (&o)[kHeadDim / 8][4], int i,
                                             float inv_sum, __nv_bfloat16* out_row) {
    const int tig = threadIdx.x % 4;
#pragma unroll
    for (int dt = 0; dt < kHeadDim / 8; ++dt)
        *reinterpret_cast<uint32_t*>(out_row + dt * 8 + tig * 2) =
            pack_bf16(o[dt][2 * i] * inv_sum, o[dt][2 * i + 1] * inv_sum);
}

// Fragment row i of o times inv_sum, as f32 into out_row ([kHeadDim]).
template <int kHeadDim>
__device__ __forceinline__ void store_o_f32(const float (&o)[kHeadDim / 8][4], int i, float inv_sum,
                                            float* out_row) {
    const int tig = threadIdx.x % 4;
#pragma unroll
    for (int dt = 0; dt < kHeadDim / 8; ++dt)
        *reinterpret_cast<float2*>(out_row + dt * 8 + tig * 2) =
            make_float2(o[dt][2 * i] * inv_sum, o[dt][2 * i + 1] * inv_sum);
}

}  // namespace miniinfer::cuda
