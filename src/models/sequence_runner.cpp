#include "models/sequence_runner.h"

#include <numeric>

#include "core/check.h"
#include "kernels/cpu/ops.h"

namespace miniinfer {

SequenceRunner::SequenceRunner(const QwenModel& model, int64_t max_len, int64_t page_size)
    : model_(model),
      max_len_(max_len),
      page_size_(page_size),
      kv_(model.config().num_kv_layers(), (max_len + page_size - 1) / page_size, page_size,
          model.num_local_kv_heads(), model.config().head_dim),
      block_table_(size_t(kv_.num_pages())) {
    if (model.config().num_linear_attention_layers() > 0) state_.emplace(model.config(), 1);
    // Pages in reverse order, so a test catches any code that assumes page i holds tokens
    // [i * page_size, (i + 1) * page_size).
    std::iota(block_table_.rbegin(), block_table_.rend(), 0);
}

Tensor SequenceRunner::append(std::span<const int32_t> ids, bool last_only) {
    if (ids.empty()) fail("no token ids given");
    const int64_t vocab = model_.config().vocab_size;
    for (int32_t id : ids)
        if (id < 0 || id >= vocab) fail("token id {} is outside the vocabulary [0, {})", id, vocab);
    const int64_t start = length(), n = int64_t(ids.size());
    if (start + n > max_len_)
        fail("sequence of {} tokens exceeds the maximum length {}", start + n, max_len_);

    std::vector<int32_t> positions(static_cast<size_t>(n)), slots(static_cast<size_t>(n)),
        logits_rows;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t pos = start + i;
        positions[size_t(i)] = int32_t(pos);
        slots[size_t(i)] =
            int32_t(block_table_[size_t(pos / page_size_)] * page_size_ + pos % page_size_);
        if (!last_only || i == n - 1) logits_rows.push_back(int32_t(i));
    }
    const int32_t query_start[2] = {0, int32_t(n)};
    const int32_t seq_len = int32_t(start + n), state_slot = 0;
    ForwardBatch batch{.input_ids = ids,
                       .positions = positions,
                       .query_start = query_start,
                       .seq_lens = std::span(&seq_len, 1),
                       .block_table = block_table_,
                       .max_pages = int64_t(block_table_.size()),
                       .slot_mapping = slots,
                       .logits_indices = logits_rows,
                       .state_slots = std::span(&state_slot, state_ ? 1 : 0)};
    Tensor logits = model_.forward(batch, kv_, state_ ? &*state_ : nullptr);
    tokens_.insert(tokens_.end(), ids.begin(), ids.end());
    return logits;
}

std::vector<int32_t> SequenceRunner::greedy(std::span<const int32_t> prompt, int64_t num_tokens,
                                            int64_t chunk) {
    if (chunk <= 0) chunk = int64_t(prompt.size());
    Tensor logits;
    for (size_t begin = 0; begin < prompt.size(); begin += size_t(chunk))
        logits =
            append(prompt.subspan(begin, std::min(prompt.size() - begin, size_t(chunk))), true);
    std::vector<int32_t> out;
    for (int64_t i = 0; i < num_tokens; ++i) {
        int32_t next = 0;
        cpu::argmax_rows(logits.data<float>(), 1, logits.size(1), &next);
        out.push_back(next);
        if (i + 1 < num_tokens) logits = append(std::span(&next, 1), true);
    }
    return out;
}

}  // namespace miniinfer
