// Paged attention, backend flashinfer: the planner (host) and the two kernels it feeds (the
// persistent work kernel and the merge of split row tiles). See attention_flashinfer.h.
//
// Plan buffer (int32), copied to the device in one piece each step:
//   [0] num_items  [1] num_merges  [2] offset of the merge list  [3] unused
//   [4, 4 + G + 1)          cta_indptr: items of block b are [cta_indptr[b], cta_indptr[b + 1])
//   then num_items x kItemInts:  seq, kv_head, row_begin, kv_begin, kv_end, partial_base
//                                (partial_base < 0: the item covers its whole row tile and writes
//                                the output; else its rows go to workspace slots partial_base + r)
//   then num_merges x kMergeInts: seq, kv_head, row_begin, num_chunks, partial_base
//                                (chunk j of that row tile wrote slots partial_base + j * 64 + r)
// A "packed row" r of (sequence, KV head) is query token r / group, query head
// kv_head * group + r % group (as in the fa2 prefill): the GQA group shares every K/V tile.
#include "kernels/cuda/attention/attention_flashinfer.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <queue>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "kernels/cuda/attention/attention_prefill_sm90.h"
#include "kernels/cuda/attention/attention_tile.cuh"
#include "kernels/cuda/primitives/launch.cuh"

namespace miniinfer::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kBlockM = 64;  // packed query rows per work item
constexpr int kBlockN = 64;  // keys per tile
constexpr int kWarps = kBlockM / 16;
constexpr int kThreads = kWarps * 32;
constexpr int kHeaderInts = 4;
constexpr int kItemInts = 6;
constexpr int kMergeInts = 5;
constexpr int64_t kMinChunk = 128;  // keys; below this a chunk's fixed cost outweighs parallelism

template <int kHeadDim>
constexpr size_t smem_bytes() {
    return 4 * kBlockN * (kHeadDim + 8) * sizeof(bf16);  // 2 stages x (K, V) tiles
}

// q: [num_tokens, num_heads, head_dim]; k_cache, v_cache: [num_pages, page_size, num_kv_heads,
// head_dim]; query_start: [num_seqs + 1]; seq_lens: [num_seqs]; block_table: [num_seqs,
// max_pages]; plan: see the top of the file; out: [num_tokens, num_heads, head_dim];
// partial_o: [slots, head_dim] f32; partial_lse: [slots] f32 (base 2).
// grid: the fixed number of blocks the plan was made for; each walks its own item list.
// The wide path's tile loop and epilogue are the fa2 prefill's (attention_tile.cuh: attend_tiles,
// finish_rows) over the key range [kv_begin, kv_end) of the item instead of all the keys of the
// row tile, so a row may see no key at all in a chunk (its online-softmax state then stays
// empty: max -inf, sum 0). The narrow (decode) path splits keys across warps and is its own.
// Cache: bf16, or uint8_t for an FP8 cache (k_scale, v_scale: its scales), whose raw slices and
// tiles take the same cp.async ring and are widened to f16 just before use, the tile step then
// multiplying in f16 (attention_tile.cuh: TileElem, widen_kv_tile).
template <int kHeadDim, typename Cache>
__global__ void __launch_bounds__(kThreads, 3)
    work_kernel(const bf16* __restrict__ q, const Cache* __restrict__ k_cache,
                const Cache* __restrict__ v_cache, float k_scale, float v_scale,
                const int32_t* __restrict__ query_start, const int32_t* __restrict__ seq_lens,
                const int32_t* __restrict__ block_table, const int32_t* __restrict__ plan,
                int max_pages, int num_heads, int num_kv_heads, int page_size, int page_shift,
                float scale_log2, bf16* __restrict__ out, float* __restrict__ partial_o,
                float* __restrict__ partial_lse) {
    pdl_wait();
    pdl_trigger();
    constexpr int kStride = kHeadDim + 8;  // +16 B per row: conflict-free ldmatrix
    extern __shared__ __align__(16) unsigned char smem[];
    bf16* k_tiles = reinterpret_cast<bf16*>(smem);    // [2, kBlockN, kStride]
    bf16* v_tiles = k_tiles + 2 * kBlockN * kStride;  // [2, kBlockN, kStride]

    const int32_t* cta_indptr = plan + kHeaderInts;
    const int32_t* items = cta_indptr + gridDim.x + 1;
    const int group = num_heads / num_kv_heads;
    const int64_t kv_row_stride = int64_t(num_kv_heads) * kHeadDim;
    const int warp = threadIdx.x / 32, tig = threadIdx.x % 4;  // tig: mma fragment column
    using Elem = TileElem<Cache>;                              // what the tile step multiplies in

    const int item_end = cta_indptr[blockIdx.x + 1];
    for (int w = cta_indptr[blockIdx.x]; w < item_end; ++w) {
        const int32_t* item = items + int64_t(w) * kItemInts;
        const int seq = item[0], kv_head = item[1], row_begin = item[2];
        const int kv_begin = item[3], kv_end = item[4], partial_base = item[5];
        const int q_begin = query_start[seq];
        const int q_len = query_start[seq + 1] - q_begin;
        const int num_rows = q_len * group;
        const int prefix_len = seq_lens[seq] - q_len;
        const int32_t* pages = block_table + int64_t(seq) * max_pages;
        // Keys past the chunk are masked like keys past a row's causal limit.
        const int min_limit = min(prefix_len + row_begin / group, kv_end - 1);
        const bool warp_active = row_begin + warp * 16 < num_rows;  // uniform per warp

        if (num_rows - row_begin <= 16) {
            // Narrow item (decode: up to 16 packed rows): the 4 warps share the same 16 rows
            // and split the keys instead (attention_tile.cuh: attend_narrow).
            attend_narrow<kHeadDim, kWarps>(
                k_tiles, q, q_begin, row_begin, num_rows, group, num_heads, kv_head, prefix_len,
                kv_begin, kv_end, k_cache, v_cache, k_scale, v_scale, pages, page_size, page_shift,
                kv_row_stride, scale_log2,
                [&](int local, int r, int d, float a_all, float l_all, float m_all) {
                    if (partial_base < 0) {
                        out[packed_row_index(q_begin, r, group, num_heads, kv_head) * kHeadDim +
                            d] = __float2bfloat16(a_all / l_all);
                    } else {
                        const int64_t slot = int64_t(partial_base) + local;
                        partial_o[slot * kHeadDim + d] = l_all > 0.f ? a_all / l_all : 0.f;
                        if (d == 0)
                            partial_lse[slot] = l_all > 0.f ? m_all + log2f(l_all) : -INFINITY;
                    }
                });
            __syncthreads();  // shared memory is reused by the next item
            continue;
        }

        int row_limit[2];
        uint32_t q_frag[kHeadDim / 16][4];
        load_q_fragments<kHeadDim, Elem>(q, q_begin, row_begin + warp * 16, num_rows, group,
                                         num_heads, kv_head, prefix_len, kv_end - 1, q_frag,
                                         row_limit);
        // The fa2 prefill's tile loop over the item's keys. A warp whose 16 rows are all past
        // the end (decode: 1 to 8 packed rows use only warp 0) loads its share of the tiles but
        // skips the math. Unlike fa2 a row may have seen no key yet (its chunk starts past its
        // causal limit): kMayBeEmpty keeps such a row's state empty. The loop ends with a block
        // barrier, so the next item may refill the tiles.
        float o[kHeadDim / 8][4];
        float row_max[2], row_sum[2];
        attend_tiles<kHeadDim, kBlockN, kThreads, true>(
            q_frag, row_limit, warp_active, k_tiles, v_tiles, k_cache, v_cache, k_scale, v_scale,
            pages, kv_begin, kv_end, min_limit, page_size, page_shift, kv_row_stride,
            kv_head * kHeadDim, scale_log2, o, row_max, row_sum);

        finish_rows<true>(
            row_sum, row_begin + warp * 16, num_rows, [&](int i, int r, float sum, float inv_sum) {
                if (partial_base < 0) {
                    store_o_bf16<kHeadDim>(
                        o, i, inv_sum,
                        out + packed_row_index(q_begin, r, group, num_heads, kv_head) * kHeadDim);
                } else {
                    const int64_t slot = int64_t(partial_base) + (r - row_begin);
                    store_o_f32<kHeadDim>(o, i, inv_sum, partial_o + slot * kHeadDim);
                    if (tig == 0)
                        partial_lse[slot] = sum > 0.f ? row_max[i] + log2f(sum) : -INFINITY;
                }
            });
    }
}

// Merges the chunks of each split row tile: out = Σ 2^(lse_j - M) o_j / Σ 2^(lse_j - M), chunks
// with no visible key (lse -inf) skipped. grid: the fixed block count, striding over the merge
// list; block: kThreads.
template <int kHeadDim>
__global__ void __launch_bounds__(kThreads)
    merge_kernel(const int32_t* __restrict__ plan, const int32_t* __restrict__ query_start,
                 int num_heads, int num_kv_heads, const float* __restrict__ partial_o,
                 const float* __restrict__ partial_lse, bf16* __restrict__ out) {
    pdl_wait();
    pdl_trigger();
    const int num_merges = plan[1];
    const int32_t* merges = plan + plan[2];
    const int group = num_heads / num_kv_heads;
    for (int m = blockIdx.x; m < num_merges; m += gridDim.x) {
        const int32_t* merge = merges + int64_t(m) * kMergeInts;
        const int seq = merge[0], kv_head = merge[1], row_begin = merge[2];
        const int num_chunks = merge[3], base = merge[4];
        const int q_begin = query_start[seq];
        const int num_rows = (query_start[seq + 1] - q_begin) * group;
        for (int idx = threadIdx.x; idx < kBlockM * kHeadDim; idx += kThreads) {
            const int local = idx / kHeadDim, d = idx % kHeadDim;
            const int r = row_begin + local;
            if (r >= num_rows) break;  // idx only grows
            float lse_max = -INFINITY;
            for (int j = 0; j < num_chunks; ++j)
                lse_max = fmaxf(lse_max, partial_lse[base + j * kBlockM + local]);
            float sum = 0.f, acc = 0.f;
            for (int j = 0; j < num_chunks; ++j) {
                const int64_t slot = int64_t(base) + j * kBlockM + local;
                const float lse = partial_lse[slot];
                if (lse == -INFINITY) continue;  // no key of this chunk is visible to the row
                const float w = exp2f(lse - lse_max);
                sum += w;
                acc += w * partial_o[slot * kHeadDim + d];
            }
            out[packed_row_index(q_begin, r, group, num_heads, kv_head) * kHeadDim + d] =
                __float2bfloat16(acc / sum);
        }
    }
}

// The compile-time instances (head_dim 64 and 128, bf16 and FP8 caches), chosen in one place:
// each opted into its shared memory once; the grid is sized by the fewer resident blocks of the
// two cache types (a persistent grid larger than what fits would only queue).
template <int kHeadDim>
int configure_and_occupancy() {
    static const int blocks_per_sm = [] {
        int fewest = 1 << 30;
        for (const void* kernel : {reinterpret_cast<const void*>(work_kernel<kHeadDim, bf16>),
                                   reinterpret_cast<const void*>(work_kernel<kHeadDim, uint8_t>)}) {
            MI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               int(smem_bytes<kHeadDim>())));
            int n = 0;
            MI_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads,
                                                                        smem_bytes<kHeadDim>()));
            fewest = std::min(fewest, n);
        }
        return fewest;
    }();
    return blocks_per_sm;
}

struct LaunchArgs {
    const bf16* q;
    const void *k_cache, *v_cache;  // bf16, or e4m3 bytes (fp8_cache)
    bool fp8_cache;
    float k_scale, v_scale;
    const int32_t *query_start, *seq_lens, *block_table, *plan;
    int max_pages, num_heads, num_kv_heads, page_size, page_shift;
    float scale_log2;
    bf16* out;
    float *partial_o, *partial_lse;
    unsigned grid;
};

template <int kHeadDim, typename Cache>
void launch_work(const LaunchArgs& a, cudaStream_t stream) {
    launch_kernel(work_kernel<kHeadDim, Cache>, a.grid, kThreads, smem_bytes<kHeadDim>(), stream,
                  a.q, static_cast<const Cache*>(a.k_cache), static_cast<const Cache*>(a.v_cache),
                  a.k_scale, a.v_scale, a.query_start, a.seq_lens, a.block_table, a.plan,
                  a.max_pages, a.num_heads, a.num_kv_heads, a.page_size, a.page_shift, a.scale_log2,
                  a.out, a.partial_o, a.partial_lse);
    MI_CUDA_CHECK(cudaGetLastError());
}

template <int kHeadDim>
void launch(const LaunchArgs& a, cudaStream_t stream) {
    if (a.fp8_cache)
        launch_work<kHeadDim, uint8_t>(a, stream);
    else
        launch_work<kHeadDim, bf16>(a, stream);
    launch_kernel(merge_kernel<kHeadDim>, a.grid, kThreads, 0, stream, a.plan, a.query_start,
                  a.num_heads, a.num_kv_heads, a.partial_o, a.partial_lse, a.out);
    MI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

FlashInferAttention::FlashInferAttention(int64_t max_tokens, int64_t max_seqs, int64_t num_heads,
                                         int64_t num_kv_heads, int64_t head_dim, int64_t page_size)
    : max_tokens_(max_tokens),
      max_seqs_(max_seqs),
      num_heads_(num_heads),
      num_kv_heads_(num_kv_heads),
      head_dim_(head_dim),
      page_size_(page_size) {
    MI_LAUNCH_CHECK(head_dim == 64 || head_dim == 128, "flashinfer: head_dim must be 64 or 128");
    MI_LAUNCH_CHECK(num_kv_heads > 0 && num_heads % num_kv_heads == 0,
                    "flashinfer: num_heads must be a multiple of num_kv_heads");
    MI_LAUNCH_CHECK(max_tokens > 0 && max_seqs > 0 && page_size > 0,
                    "flashinfer: max_tokens, max_seqs and page_size must be positive");
    const int num_sms = sm_count();
    const int blocks_per_sm =
        head_dim == 64 ? configure_and_occupancy<64>() : configure_and_occupancy<128>();
    num_ctas_ = int64_t(num_sms) * std::max(blocks_per_sm, 1);
    AttentionLaunch shape{};
    shape.head_dim = head_dim;
    hopper_prefill_supported_ = attention_prefill_sm90_supported(shape);
    const int64_t group = num_heads / num_kv_heads;
    // Unsplit items: Σ_s ceil(q_len_s · group / 64) per KV head <= tokens · group / 64 + seqs.
    // A split plan has at most num_ctas_ items, all of them possibly chunks.
    max_items_ = std::max(num_ctas_,
                          ((max_tokens * group + kBlockM - 1) / kBlockM + max_seqs) * num_kv_heads);
    max_partial_rows_ = num_ctas_ * kBlockM;
    plan_ints_ =
        size_t(kHeaderInts + num_ctas_ + 1 + max_items_ * kItemInts + num_ctas_ * kMergeInts);
    MI_LAUNCH_CHECK(plan_ints_ < (size_t(1) << 31), "flashinfer: plan too large");
    plan_ = std::make_unique<PinnedUpload>(plan_ints_ * sizeof(int32_t));
    std::fill_n(static_cast<int32_t*>(plan_->fill()), plan_ints_, 0);
    // An empty plan until the first plan(): run() then does nothing.
    MI_CUDA_CHECK(cudaMemset(plan_->device(), 0, plan_ints_ * sizeof(int32_t)));
    partial_o_ = DeviceBuffer(size_t(max_partial_rows_) * size_t(head_dim) * sizeof(float));
    partial_lse_ = DeviceBuffer(size_t(max_partial_rows_) * sizeof(float));
}

FlashInferAttention::~FlashInferAttention() = default;

void FlashInferAttention::plan(std::span<const int32_t> query_start,
                               std::span<const int32_t> seq_lens, cudaStream_t stream) {
    const int64_t num_seqs = int64_t(seq_lens.size());
    MI_LAUNCH_CHECK(int64_t(query_start.size()) == num_seqs + 1 && num_seqs <= max_seqs_,
                    "flashinfer plan: query_start must be [num_seqs + 1], num_seqs <= max_seqs");
    MI_LAUNCH_CHECK(query_start[0] == 0 && query_start[size_t(num_seqs)] <= max_tokens_,
                    "flashinfer plan: query_start must start at 0 and end at <= max_tokens");
    const int64_t group = num_heads_ / num_kv_heads_;

    // Row tiles: (seq, row_begin, keys needed), the same for every KV head.
    struct Unit {
        int32_t seq, row_begin, num_keys;
    };
    std::vector<Unit> units;
    int64_t max_keys = 0;
    bool any_prefill = false;  // some sequence has more than one query row
    for (int64_t s = 0; s < num_seqs; ++s) {
        const int64_t q_len = query_start[size_t(s) + 1] - query_start[size_t(s)];
        const int64_t seq_len = seq_lens[size_t(s)];
        any_prefill = any_prefill || q_len > 1;
        MI_LAUNCH_CHECK(q_len >= 0 && seq_len >= q_len,
                        "flashinfer plan: query_start must not decrease and seq_lens >= q_len");
        const int64_t prefix = seq_len - q_len, rows = q_len * group;
        for (int64_t rb = 0; rb < rows; rb += kBlockM) {
            const int64_t last = std::min(rb + kBlockM, rows) - 1;
            const int64_t keys = prefix + last / group + 1;
            units.push_back({int32_t(s), int32_t(rb), int32_t(keys)});
            max_keys = std::max(max_keys, keys);
        }
    }

    // Chunk size: none while the unsplit units fill the grid; else the smallest multiple of 64
    // (>= kMinChunk) whose chunks still fit in one wave of num_ctas_ blocks.
    auto items_for = [&](int64_t chunk) {
        int64_t n = 0;
        for (const Unit& u : units) n += (u.num_keys + chunk - 1) / chunk;
        return n * num_kv_heads_;
    };
    int64_t chunk = 0;
    const int64_t unsplit = int64_t(units.size()) * num_kv_heads_;
    if (unsplit > 0 && unsplit < num_ctas_ && max_keys > kMinChunk) {
        int64_t lo = kMinChunk / kBlockN, hi = (max_keys + kBlockN - 1) / kBlockN;  // in tiles
        while (lo < hi) {
            const int64_t mid = (lo + hi) / 2;
            if (items_for(mid * kBlockN) <= num_ctas_)
                hi = mid;
            else
                lo = mid + 1;
        }
        if (lo * kBlockN < max_keys) chunk = lo * kBlockN;
    }

    // Items and merges.
    struct Item {
        int32_t seq, kv_head, row_begin, kv_begin, kv_end, partial_base;
    };
    std::vector<Item> items;
    std::vector<int32_t> merges;
    int64_t partial_rows = 0;
    for (const Unit& u : units) {
        const int64_t n = chunk > 0 ? (u.num_keys + chunk - 1) / chunk : 1;
        for (int32_t h = 0; h < int32_t(num_kv_heads_); ++h) {
            if (n == 1) {
                items.push_back({u.seq, h, u.row_begin, 0, u.num_keys, -1});
                continue;
            }
            merges.insert(merges.end(), {u.seq, h, u.row_begin, int32_t(n), int32_t(partial_rows)});
            for (int64_t j = 0; j < n; ++j)
                items.push_back({u.seq, h, u.row_begin, int32_t(j * chunk),
                                 int32_t(std::min<int64_t>(u.num_keys, (j + 1) * chunk)),
                                 int32_t(partial_rows + j * kBlockM)});
            partial_rows += n * kBlockM;
        }
    }
    MI_LAUNCH_CHECK(int64_t(items.size()) <= max_items_ && partial_rows <= max_partial_rows_,
                    "flashinfer plan: the plan outgrew its workspace (a planner bug)");
    hopper_prefill_ = hopper_prefill_supported_ && any_prefill && chunk == 0;

    // Longest processing time first: each item, heaviest first, to the least loaded block.
    // Cost: its key tiles plus one for the fixed work (Q load, epilogue).
    std::vector<int64_t> cost(items.size());
    for (size_t i = 0; i < items.size(); ++i)
        cost[i] = (items[i].kv_end - items[i].kv_begin + kBlockN - 1) / kBlockN + 1;
    std::vector<int32_t> order(items.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return cost[size_t(a)] > cost[size_t(b)]; });
    using Load = std::pair<int64_t, int32_t>;  // (load, block)
    std::priority_queue<Load, std::vector<Load>, std::greater<Load>> loads;
    for (int32_t b = 0; b < int32_t(num_ctas_); ++b) loads.push({0, b});
    std::vector<int32_t> block_of(items.size());
    std::vector<int32_t> count(size_t(num_ctas_) + 1, 0);
    for (int32_t i : order) {
        auto [load, b] = loads.top();
        loads.pop();
        block_of[size_t(i)] = b;
        ++count[size_t(b) + 1];
        loads.push({load + cost[size_t(i)], b});
    }

    // The previous plan's copy must have left the pinned buffer before it is overwritten (the
    // planning above overlapped it).
    int32_t* host_plan = static_cast<int32_t*>(plan_->fill());

    // Write the plan: header, per-block index, items (heaviest first within a block), merges.
    int32_t* indptr = host_plan + kHeaderInts;
    indptr[0] = 0;
    for (int64_t b = 0; b < num_ctas_; ++b) indptr[b + 1] = indptr[b] + count[size_t(b) + 1];
    int32_t* item_out = indptr + num_ctas_ + 1;
    std::vector<int32_t> fill(indptr, indptr + num_ctas_);
    for (int32_t i : order) {
        const Item& it = items[size_t(i)];
        int32_t* dst = item_out + int64_t(fill[size_t(block_of[size_t(i)])]++) * kItemInts;
        dst[0] = it.seq, dst[1] = it.kv_head, dst[2] = it.row_begin;
        dst[3] = it.kv_begin, dst[4] = it.kv_end, dst[5] = it.partial_base;
    }
    const int64_t merge_offset = kHeaderInts + num_ctas_ + 1 + int64_t(items.size()) * kItemInts;
    const int64_t num_merges = int64_t(merges.size()) / kMergeInts;
    std::copy(merges.begin(), merges.end(), host_plan + merge_offset);
    const size_t used = size_t(merge_offset) + merges.size();
    host_plan[0] = int32_t(items.size());
    host_plan[1] = int32_t(num_merges);
    host_plan[2] = int32_t(merge_offset);
    host_plan[3] = 0;
    plan_->upload(used * sizeof(int32_t), stream);
    planned_items_ = int64_t(items.size());
    planned_merges_ = num_merges;
    planned_chunk_ = chunk;
}

void FlashInferAttention::run(const AttentionParams& p, cudaStream_t stream) {
    check_attention_params(p);
    MI_LAUNCH_CHECK(p.qkv_step == nullptr, "flashinfer: the decode's qkv_step is fa2's alone");
    MI_LAUNCH_CHECK(
        p.q->size(1) == num_heads_ && p.q->size(2) == head_dim_ && p.q->size(0) <= max_tokens_,
        "flashinfer: q does not match the constructed heads / head_dim / max_tokens");
    MI_LAUNCH_CHECK(p.k_cache->size(1) == page_size_ && p.k_cache->size(2) == num_kv_heads_ &&
                        p.k_cache->size(3) == head_dim_ && p.v_cache->shape() == p.k_cache->shape(),
                    "flashinfer: k_cache/v_cache do not match the constructed page size / heads");
    MI_LAUNCH_CHECK(p.out->size(0) == p.q->size(0) && p.out->size(1) == num_heads_ * head_dim_,
                    "flashinfer: out must be [num_tokens, num_heads * head_dim]");
    if (hopper_prefill_) {
        const AttentionLaunch prefill = make_attention_launch(p);
        if (prefill.num_tokens > 0 && prefill.max_query_len > 0)
            launch_attention_prefill(prefill, stream);
        return;
    }
    LaunchArgs a{};
    a.q = static_cast<const bf16*>(p.q->raw());
    a.k_cache = p.k_cache->raw();
    a.v_cache = p.v_cache->raw();
    a.fp8_cache = p.k_cache->dtype() == DType::kU8;
    a.k_scale = p.k_scale;
    a.v_scale = p.v_scale;
    a.query_start = p.query_start->data<int32_t>();
    a.seq_lens = p.seq_lens->data<int32_t>();
    a.block_table = p.block_table->data<int32_t>();
    a.plan = static_cast<const int32_t*>(plan_->device());
    a.max_pages = int(p.block_table->size(1));
    a.num_heads = int(num_heads_);
    a.num_kv_heads = int(num_kv_heads_);
    a.page_size = int(page_size_);
    a.page_shift = page_shift_of(page_size_);
    a.scale_log2 = p.scale * 1.4426950408889634f;  // exp(x) = 2^(x log2 e)
    a.out = static_cast<bf16*>(p.out->raw());
    a.partial_o = static_cast<float*>(partial_o_.data());
    a.partial_lse = static_cast<float*>(partial_lse_.data());
    a.grid = unsigned(num_ctas_);
    if (head_dim_ == 64)
        launch<64>(a, stream);
    else
        launch<128>(a, stream);
}

}  // namespace miniinfer::cuda
