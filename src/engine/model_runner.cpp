#include "engine/model_runner.h"

#include <algorithm>

#include "core/check.h"

namespace miniinfer {

void ModelRunner::launch(const Batch& batch, std::span<const SamplerInput> sampling) {
    const bool has_placeholders =
        std::any_of(batch.input_ids.begin(), batch.input_ids.end(), is_placeholder);
    std::vector<SampledToken> tokens;
    if (has_placeholders) {
        Batch resolved = batch;
        for (int32_t& id : resolved.input_ids)
            if (is_placeholder(id)) {
                MI_CHECK(placeholder_row(id) < last_tokens_.size(),
                         "placeholder {} refers to no row of the previous step", id);
                id = last_tokens_[placeholder_row(id)];
            }
        tokens = run(resolved, sampling);
    } else {
        tokens = run(batch, sampling);
    }
    last_tokens_.clear();
    for (const SampledToken& t : tokens) last_tokens_.push_back(t.token);
    launched_.push_back(std::move(tokens));
}

std::vector<SampledToken> ModelRunner::collect() {
    MI_CHECK(!launched_.empty(), "collect() without a launched step");
    std::vector<SampledToken> tokens = std::move(launched_.front());
    launched_.pop_front();
    return tokens;
}

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
