// SequenceRunner: feeds one token sequence through a QwenModel, a chunk at a time, keeping its
// K/V in its own paged KvCache (pages handed out in order) and a hybrid's state in its own
// one-slot StateCache. The smallest correct driver of
// the model: `miniinfer logits` and the model tests use it; the engine's scheduler replaces
// it for many sequences at once.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "models/qwen_model.h"

namespace miniinfer {

class SequenceRunner {
  public:
    // Room for max_len tokens in pages of page_size.
    SequenceRunner(const QwenModel& model, int64_t max_len, int64_t page_size = 16);

    // Appends `ids` (a prefill chunk, or one decode token) and returns logits for every new
    // position ([ids.size(), vocab]) or, with last_only, for the last one ([1, vocab]).
    // Errors: ids empty, out of the vocabulary, or past max_len.
    Tensor append(std::span<const int32_t> ids, bool last_only = false);

    int64_t length() const { return int64_t(tokens_.size()); }

    // Greedy continuation of `prompt` by num_tokens tokens (EOS not special).
    std::vector<int32_t> greedy(std::span<const int32_t> prompt, int64_t num_tokens,
                                int64_t chunk = 0);

  private:
    const QwenModel& model_;
    int64_t max_len_, page_size_;
    KvCache kv_;
    std::optional<StateCache> state_;  // a hybrid's, in slot 0
    std::vector<int32_t> block_table_;
    std::vector<int32_t> tokens_;
};

}  // namespace miniinfer
