// What the model tests share: Hugging Face's reference outputs of a fixture, steps of several
// sequences in one ForwardBatch, and the check that such a step gives each sequence's logits
// alone.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/json.h"
#include "loader/safetensors.h"
#include "models/qwen_model.h"
#include "models/sequence_runner.h"

namespace miniinfer::testing {

// tools/make_fixtures.py's reference.json and reference.safetensors of a fixture.
struct Reference {
    std::vector<std::vector<int32_t>> prompts, greedy;
    std::vector<std::vector<int64_t>> positions;  // the prompt positions with logits
    std::vector<Tensor> logits;                   // [positions, vocab] f32
    std::vector<Tensor> greedy_logits;  // [greedy length, vocab] before each greedy token, or none
};

inline Reference load_reference(const std::filesystem::path& dir) {
    const Json json = read_json_file(dir / "reference.json");
    SafetensorsFile file = SafetensorsFile::open(dir / "reference.safetensors");
    Reference ref;
    for (size_t p = 0; p < json["prompts"].size(); ++p) {
        const Json& prompt = json["prompts"][p];
        const std::string i = std::to_string(p);
        ref.prompts.push_back(prompt["ids"].get<std::vector<int32_t>>());
        ref.greedy.push_back(prompt["greedy"].get<std::vector<int32_t>>());
        ref.positions.push_back(prompt["logits_positions"].get<std::vector<int64_t>>());
        ref.logits.push_back(file.tensor("logits." + i));
        if (file.contains("greedy_logits." + i))
            ref.greedy_logits.push_back(file.tensor("greedy_logits." + i));
    }
    return ref;
}

// Sequences 0 .. num_seqs - 1 in one KvCache (and, for a hybrid, one StateCache): sequence i
// holds pages [i max_pages, (i + 1) max_pages) of the cache's pages taken in reverse order (so
// that no code may assume page order) and state slot num_seqs - 1 - i.
class MixedSteps {
  public:
    MixedSteps(const QwenModel& model, int num_seqs, int64_t max_pages, int64_t page_size)
        : model_(model),
          num_seqs_(num_seqs),
          max_pages_(max_pages),
          page_size_(page_size),
          kv_(model.config().num_kv_layers(), num_seqs * max_pages, page_size,
              model.config().num_kv_heads, model.config().head_dim),
          table_(size_t(num_seqs * max_pages)) {
        std::iota(table_.rbegin(), table_.rend(), 0);
        if (model.config().num_linear_attention_layers() > 0)
            state_.emplace(model.config(), num_seqs);
    }

    // One step: each part is (sequence, its tokens from position `start`); returns the logits
    // of each part's last token, in order.
    struct Part {
        int seq;
        std::span<const int32_t> tokens;
        int start;
    };
    Tensor step(const std::vector<Part>& parts) {
        std::vector<int32_t> ids, pos, qs = {0}, lens, slots, rows, bt, state_slots;
        for (const Part& part : parts) {
            for (size_t j = 0; j < part.tokens.size(); ++j) {
                const int p = part.start + int(j);
                ids.push_back(part.tokens[j]);
                pos.push_back(p);
                slots.push_back(table_[size_t(part.seq * max_pages_ + p / page_size_)] *
                                    int32_t(page_size_) +
                                p % int32_t(page_size_));
            }
            qs.push_back(int32_t(ids.size()));
            lens.push_back(part.start + int(part.tokens.size()));
            rows.push_back(int32_t(ids.size()) - 1);
            bt.insert(bt.end(), table_.begin() + part.seq * max_pages_,
                      table_.begin() + (part.seq + 1) * max_pages_);
            state_slots.push_back(num_seqs_ - 1 - part.seq);
        }
        const ForwardBatch batch{ids, pos, qs, lens, bt, max_pages_, slots, rows, state_slots};
        return model_.forward(batch, kv_, state_ ? &*state_ : nullptr);
    }

    StateCache& state() { return *state_; }

  private:
    const QwenModel& model_;
    int num_seqs_;
    int64_t max_pages_, page_size_;
    KvCache kv_;
    std::optional<StateCache> state_;
    std::vector<int32_t> table_;
};

// Three sequences alone (a's rows after its first `split`; b whole; a[:12] decoding token 12)
// and together, in one cache (first a[:split] and a[:12] as one step, then a's rest, b's prompt
// and c's decode token as one mixed step): the same logits within 1e-4. A hybrid's b first finds
// a stale state in its slot, which a sequence starting at position 0 must not read.
inline void expect_mixed_step_equals_separate_runs(const QwenModel& model,
                                                   std::span<const int32_t> a,
                                                   std::span<const int32_t> b, int split) {
    const int64_t vocab = model.config().vocab_size, page_size = 4;
    const int64_t max_len = int64_t(std::max(a.size(), b.size()));
    SequenceRunner ra(model, max_len, page_size), rb(model, max_len, page_size),
        rc(model, max_len, page_size);
    ra.append(a.first(size_t(split)));
    const Tensor la = ra.append(a.subspan(size_t(split)));
    const Tensor lb = rb.append(b);
    rc.append(a.first(12));
    const Tensor lc = rc.append(a.subspan(12, 1));

    MixedSteps steps(model, 3, (max_len + page_size - 1) / page_size, page_size);
    if (model.config().num_linear_attention_layers() > 0) steps.state().copy(2, 1);
    steps.step({{0, a.first(size_t(split)), 0}, {2, a.first(12), 0}});
    const Tensor mixed =
        steps.step({{0, a.subspan(size_t(split)), split}, {1, b, 0}, {2, a.subspan(12, 1), 12}});
    const Tensor* alone[3] = {&la, &lb, &lc};
    for (int s = 0; s < 3; ++s) {
        const float* x = alone[s]->data<float>() + (alone[s]->size(0) - 1) * vocab;
        const float* y = mixed.data<float>() + s * vocab;
        for (int64_t v = 0; v < vocab; ++v)
            ASSERT_NEAR(x[v], y[v], 1e-4) << "sequence " << s << " token " << v;
    }
}

// Teacher-forced over `ref`'s greedy sequence `p`: the logit error of `model` against `base`
// (the same checkpoint run another way), and how many greedy positions keep the reference's token
// (all, and those whose top two in `base` are more than `clear_gap` nats apart).
struct Agreement {
    float max_delta = 0, max_abs = 0;
    int64_t positions = 0, agree = 0, clear = 0, clear_agree = 0;
};
inline Agreement teacher_forced(const QwenModel& model, const QwenModel& base, const Reference& ref,
                                size_t p, float clear_gap = 0.5f) {
    const int64_t vocab = model.config().vocab_size;
    std::vector<int32_t> seq = ref.prompts[p];
    seq.insert(seq.end(), ref.greedy[p].begin(), ref.greedy[p].end());
    const int64_t n = int64_t(seq.size()) - 1, first = int64_t(ref.prompts[p].size()) - 1;
    const std::span<const int32_t> input(seq.data(), size_t(n));
    SequenceRunner a(base, n), b(model, n);
    const Tensor la = a.append(input), lb = b.append(input);
    Agreement r;
    for (int64_t t = 0; t < n; ++t) {
        const float* x = la.data<float>() + t * vocab;
        const float* y = lb.data<float>() + t * vocab;
        for (int64_t v = 0; v < vocab; ++v) {
            r.max_abs = std::max(r.max_abs, std::fabs(x[v]));
            r.max_delta = std::max(r.max_delta, std::fabs(x[v] - y[v]));
        }
        if (t < first) continue;
        std::vector<float> sorted(x, x + vocab);
        std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
        const bool same = std::max_element(y, y + vocab) - y == seq[size_t(t) + 1];
        ++r.positions;
        r.agree += same;
        if (sorted[0] - sorted[1] > clear_gap) {
            ++r.clear;
            r.clear_agree += same;
        }
    }
    return r;
}

}  // namespace miniinfer::testing
