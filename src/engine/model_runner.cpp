#include "engine/model_runner.h"

#include "core/check.h"

namespace miniinfer {

CpuModelRunner::CpuModelRunner(QwenModel model, int64_t num_pages, int64_t page_size)
    : model_(std::move(model)),
      kv_(model_.config().num_layers, num_pages, page_size, model_.config().num_kv_heads,
          model_.config().head_dim) {}

std::vector<SampledToken> CpuModelRunner::run(const Batch& b,
                                              std::span<const SamplerInput> sampling) {
    MI_CHECK(sampling.size() == b.logits_indices.size(), "{} sampling inputs for {} logits rows",
             sampling.size(), b.logits_indices.size());
    ForwardBatch fb{b.input_ids,   b.positions, b.query_start,  b.seq_lens,
                    b.block_table, b.max_pages, b.slot_mapping, b.logits_indices};
    Tensor logits = model_.forward(fb, kv_);  // [num_sampling, vocab]
    if (sampling.empty()) return {};
    std::vector<SamplerInput> inputs(sampling.begin(), sampling.end());
    const int64_t vocab = logits.size(1);
    for (size_t i = 0; i < inputs.size(); ++i)
        inputs[i].logits =
            std::span<const float>(logits.data<float>() + int64_t(i) * vocab, size_t(vocab));
    return sample_batch(inputs);
}

}  // namespace miniinfer
