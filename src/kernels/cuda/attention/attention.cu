// Paged attention dispatcher (backend fa2): validates the tensors (check_attention_params, which
// the flashinfer backend shares), then picks prefill or decode kernels by the batch shape. The
// compile-time instances (head_dim 64/128; decode heads per block 1/2/4/8) are chosen in the two
// launchers.
#include "kernels/cuda/attention/attention.h"

#include <algorithm>

#include "core/cuda/cuda_check.h"
#include "kernels/cuda/primitives/check_tensor.h"

namespace miniinfer::cuda {

void check_attention_params(const AttentionParams& p) {
    constexpr int64_t kAny = kAnySize;
    // q: [num_tokens, num_heads, head_dim]; k_cache, v_cache: [num_pages, page_size, num_kv_heads,
    // head_dim]; query_start: [num_seqs + 1]; seq_lens: [num_seqs]; block_table: [num_seqs,
    // max_pages]; out: [num_tokens, num_heads * head_dim]
    check_cuda_tensor(p.q, DType::kBF16, "paged attention: q", {kAny, kAny, kAny});
    // The cache: bf16, or e4m3 bytes (an FP8 cache, both tensors alike).
    const DType cache = p.k_cache && p.k_cache->dtype() == DType::kU8 ? DType::kU8 : DType::kBF16;
    check_cuda_tensor(p.k_cache, cache, "paged attention: k_cache", {kAny, kAny, kAny, kAny});
    check_cuda_tensor(p.v_cache, cache, "paged attention: v_cache", {kAny, kAny, kAny, kAny});
    MI_LAUNCH_CHECK(cache == DType::kBF16 || (p.k_scale > 0.f && p.v_scale > 0.f),
                    "paged attention: an FP8 cache needs positive k_scale and v_scale");
    check_cuda_tensor(p.query_start, DType::kI32, "paged attention: query_start", {kAny});
    check_cuda_tensor(p.seq_lens, DType::kI32, "paged attention: seq_lens", {kAny});
    check_cuda_tensor(p.block_table, DType::kI32, "paged attention: block_table", {kAny, kAny});
    check_cuda_tensor(p.out, DType::kBF16, "paged attention: out", {kAny, kAny});
    const int64_t num_tokens = p.q->size(0), num_heads = p.q->size(1), head_dim = p.q->size(2);
    const int64_t num_kv_heads = p.k_cache->size(2);
    MI_LAUNCH_CHECK(head_dim == 64 || head_dim == 128 || head_dim == 256,
                    "paged attention: head_dim must be 64, 128 or 256");
    MI_LAUNCH_CHECK(
        p.k_cache->size(3) == head_dim && p.v_cache->shape() == p.k_cache->shape(),
        "paged attention: k_cache/v_cache must be [num_pages, page_size, num_kv_heads, head_dim]");
    MI_LAUNCH_CHECK(num_kv_heads > 0 && num_heads % num_kv_heads == 0,
                    "paged attention: num_heads must be a multiple of num_kv_heads");
    MI_LAUNCH_CHECK(p.query_start->size(0) == p.num_seqs + 1 && p.seq_lens->size(0) == p.num_seqs &&
                        p.block_table->size(0) >= p.num_seqs,
                    "paged attention: query_start / seq_lens / block_table do not match num_seqs");
    MI_LAUNCH_CHECK(p.out->size(0) == num_tokens && p.out->size(1) == num_heads * head_dim,
                    "paged attention: out must be [num_tokens, num_heads * head_dim]");
    MI_LAUNCH_CHECK(
        p.max_query_len >= 0 && p.max_query_len <= num_tokens && p.max_seq_len >= p.max_query_len,
        "paged attention: bad max_query_len / max_seq_len bounds");
    if (const DecodeQkvStep* f = p.qkv_step) {
        MI_LAUNCH_CHECK(p.max_query_len <= 1, "paged attention: qkv_step is for decode steps only");
        check_cuda_tensor(f->qkv, DType::kBF16, "paged attention: qkv_step.qkv",
                          {num_tokens, (num_heads + 2 * num_kv_heads) * head_dim});
        MI_LAUNCH_CHECK((f->q_norm == nullptr) == (f->k_norm == nullptr),
                        "paged attention: qkv_step needs both norms or neither");
        if (f->q_norm) {
            check_cuda_tensor(f->q_norm, DType::kBF16, "paged attention: qkv_step.q_norm",
                              {head_dim});
            check_cuda_tensor(f->k_norm, DType::kBF16, "paged attention: qkv_step.k_norm",
                              {head_dim});
        }
        check_cuda_tensor(f->positions, DType::kI32, "paged attention: qkv_step.positions",
                          {num_tokens});
        check_cuda_tensor(f->inv_freq, DType::kF32, "paged attention: qkv_step.inv_freq",
                          {head_dim / 2});
        check_cuda_tensor(f->slot_mapping, DType::kI32, "paged attention: qkv_step.slot_mapping",
                          {num_tokens});
        MI_LAUNCH_CHECK(f->rope_scale > 0.f,
                        "paged attention: qkv_step.rope_scale must be positive");
    }
}

AttentionLaunch make_attention_launch(const AttentionParams& p) {
    AttentionLaunch a{};
    a.num_tokens = p.q->size(0);
    a.num_heads = p.q->size(1);
    a.head_dim = p.q->size(2);
    a.page_size = p.k_cache->size(1);
    a.num_kv_heads = p.k_cache->size(2);
    a.num_seqs = p.num_seqs;
    a.max_query_len = p.max_query_len;
    a.max_seq_len = p.max_seq_len;
    a.max_pages = p.block_table->size(1);
    a.scale = p.scale;
    a.q = p.q->raw();
    a.k_cache = p.k_cache->raw();
    a.v_cache = p.v_cache->raw();
    a.query_start = p.query_start->data<int32_t>();
    a.seq_lens = p.seq_lens->data<int32_t>();
    a.block_table = p.block_table->data<int32_t>();
    a.out = p.out->raw();
    a.fp8_cache = p.k_cache->dtype() == DType::kU8;
    a.k_scale = p.k_scale;
    a.v_scale = p.v_scale;
    a.decode_lengths = p.decode_lengths;
    a.decode_order = p.decode_order;
    a.decode_cluster_splits = p.decode_cluster_splits;
    a.decode_min_keys = std::max(p.decode_min_keys, 1);
    if (const DecodeQkvStep* f = p.qkv_step) {
        a.qkv_step = {.qkv = f->qkv->raw(),
                      .q_norm = f->q_norm ? f->q_norm->raw() : nullptr,
                      .k_norm = f->k_norm ? f->k_norm->raw() : nullptr,
                      .eps = f->eps,
                      .positions = f->positions->data<int32_t>(),
                      .inv_freq = f->inv_freq->data<float>(),
                      .slot_mapping = f->slot_mapping->data<int32_t>(),
                      .k_inv_scale = 1.f / p.k_scale,
                      .v_inv_scale = 1.f / p.v_scale,
                      .rope_scale = f->rope_scale};
    }
    return a;
}

void paged_attention(const AttentionParams& p, void* workspace, size_t workspace_bytes,
                     cudaStream_t stream) {
    check_attention_params(p);
    const AttentionLaunch a = make_attention_launch(p);
    if (a.num_tokens == 0 || a.num_seqs == 0 || a.max_query_len == 0) return;
    if (a.max_query_len == 1 &&
        attention_decode_supported(a.head_dim, a.fp8_cache, a.num_heads / a.num_kv_heads)) {
        launch_attention_decode(a, workspace, workspace ? workspace_bytes : 0, stream);
    } else {
        launch_attention_prefill(a, stream);
    }
}

}  // namespace miniinfer::cuda
