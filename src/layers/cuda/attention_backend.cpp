#include "layers/cuda/attention_backend.h"

#include "core/check.h"
#include "core/cuda/device_buffer.h"
#include "kernels/cuda/attention_flashinfer.h"

namespace miniinfer::cuda {
namespace {

class Fa2Backend final : public AttentionBackend {
  public:
    explicit Fa2Backend(const AttentionShape& s)
        : workspace_(attention_workspace_bytes(s.max_tokens, s.num_heads, s.head_dim)) {}
    const char* name() const override { return "fa2"; }
    void plan(std::span<const int32_t>, std::span<const int32_t>, cudaStream_t) override {}
    void run(const AttentionParams& p, cudaStream_t stream) override {
        paged_attention(p, workspace_.data(), workspace_.bytes(), stream);
    }

  private:
    DeviceBuffer workspace_;
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
                                                         const AttentionShape& shape) {
    if (name == "auto" || name == "fa2") return std::make_unique<Fa2Backend>(shape);
    if (name == "flashinfer") return std::make_unique<FlashInferBackend>(shape);
    fail("attention_backend '{}' is not supported (auto, fa2, flashinfer)", name);
}

}  // namespace miniinfer::cuda
