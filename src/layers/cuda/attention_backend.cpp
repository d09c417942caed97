#include "layers/cuda/attention_backend.h"

#include <algorithm>
#include <climits>
#include <numeric>

#include "core/check.h"
#include "core/cuda/device_buffer.h"
#include "core/cuda/pinned_upload.h"
#include "kernels/cuda/attention/attention_flashinfer.h"

namespace miniinfer::cuda {
namespace {

// fa2's plan: the step's Σ seq_lens and longest seq_len, copied to the device for the decode's
// split choice (attention.h: AttentionParams::decode_lengths), so that a replayed graph splits by
// the replay's lengths; and from kOrderMinSeqs sequences on the order in which the decode takes
// them, longest first (AttentionParams::decode_order) unless tuning.decode_longest_first is off.
class Fa2Backend final : public AttentionBackend {
  public:
    Fa2Backend(const AttentionShape& s, const Tuning& tuning)
        : workspace_(attention_workspace_bytes(s.max_tokens, s.num_heads, s.head_dim)),
          table_(size_t(2 + s.max_seqs) * sizeof(int32_t)),
          max_seqs_(s.max_seqs),
          // head_dim 256 decodes in the prefill kernel, which takes no QKV step.
          qkv_step_(s.head_dim != 256 &&
                    cuda::decode_supports_qkv_step(s.num_heads, s.num_kv_heads)),
          tuning_(tuning) {}
    const char* name() const override { return "fa2"; }
    void plan(std::span<const int32_t>, std::span<const int32_t> seq_lens,
              cudaStream_t stream) override {
        int64_t total = 0;
        int32_t longest = 0;
        for (const int32_t len : seq_lens) total += len, longest = std::max(longest, len);
        auto* host = static_cast<int32_t*>(table_.fill());
        host[0] = int32_t(std::min<int64_t>(total, INT32_MAX));
        host[1] = longest;
        const auto n = int64_t(seq_lens.size());
        ordered_ = tuning_.decode_longest_first && n >= kOrderMinSeqs && n <= max_seqs_;
        planned_seqs_ = n;
        if (ordered_) {
            int32_t* order = host + 2;
            std::iota(order, order + n, 0);
            std::stable_sort(order, order + n,
                             [&](int32_t a, int32_t b) { return seq_lens[a] > seq_lens[b]; });
        }
        table_.upload(size_t(2 + (ordered_ ? n : 0)) * sizeof(int32_t), stream);
        planned_ = true;
    }
    void run(const AttentionParams& p, cudaStream_t stream) override {
        AttentionParams q = p;
        q.decode_min_keys = tuning_.decode_min_keys;
        q.decode_cluster_splits = tuning_.decode_cluster_splits;
        if (planned_) q.decode_lengths = static_cast<const int32_t*>(table_.device());
        if (ordered_ && p.num_seqs == planned_seqs_)
            q.decode_order = static_cast<const int32_t*>(table_.device()) + 2;
        paged_attention(q, workspace_.data(), workspace_.bytes(), stream);
    }
    // Up to tuning.decode_qkv_max_seqs sequences, where the decode kernel can
    // (kernels/cuda/attention/attention.h: decode_supports_qkv_step). The step in the decode
    // removes a kernel boundary, worth most at batch 1; in a large batch it delays every block's
    // first K/V loads by its own latency (bench/RESULTS.md#decode-qkv-step).
    bool decode_takes_qkv_step(int64_t num_seqs) const override {
        return qkv_step_ && num_seqs <= tuning_.decode_qkv_max_seqs;
    }

  private:
    // Below this many sequences the grid holds few blocks per SM and the order changes little.
    static constexpr int64_t kOrderMinSeqs = 16;

    DeviceBuffer workspace_;
    PinnedUpload table_;  // int32 [2 + max_seqs]: Σ seq_lens, longest seq_len, the order
    int64_t max_seqs_;
    bool qkv_step_;  // the decode kernel of these heads takes the QKV step
    Tuning tuning_;
    bool planned_ = false;  // run() without a plan() splits by the bounds
    bool ordered_ = false;  // the table holds an order for this step
    int64_t planned_seqs_ = 0;
};

class FlashInferBackend final : public AttentionBackend {
  public:
    explicit FlashInferBackend(const AttentionShape& s)
        : attention_(s.max_tokens, s.max_seqs, s.num_heads, s.num_kv_heads, s.head_dim,
                     s.page_size) {}
    const char* name() const override { return "flashinfer"; }
    void plan(std::span<const int32_t> query_start, std::span<const int32_t> seq_lens,
              cudaStream_t stream) override {
        attention_.plan(query_start, seq_lens, stream);
    }
    void run(const AttentionParams& p, cudaStream_t stream) override { attention_.run(p, stream); }

  private:
    FlashInferAttention attention_;
};

}  // namespace

std::unique_ptr<AttentionBackend> make_attention_backend(const std::string& name,
                                                         const AttentionShape& shape,
                                                         const Tuning& tuning) {
    if (name == "auto" || name == "fa2") return std::make_unique<Fa2Backend>(shape, tuning);
    if (name == "flashinfer") return std::make_unique<FlashInferBackend>(shape);
    fail("attention_backend '{}' is not supported (auto, fa2, flashinfer)", name);
}

}  // namespace miniinfer::cuda
