// The hybrid models (Qwen3.5, Qwen3.5-MoE, Qwen3-Next) on the CPU against Hugging Face's own
// outputs (tools/make_fixtures.py: fp32 on the fixtures' bf16 weights): logits within 1e-4 of
// the largest, prompts whole or in chunks, decode steps carrying the Gated DeltaNet state,
// several sequences in one step, and the engine's greedy outputs whatever the batching,
// chunking, preemption or number of state slots.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/json.h"
#include "engine/llm_engine.h"
#include "engine/request_inputs.h"
#include "engine_testing.h"
#include "kernels/cpu/ops.h"
#include "loader/safetensors.h"
#include "model_testing.h"
#include "models/sequence_runner.h"

using namespace miniinfer;
using miniinfer::testing::greedy;

namespace {
const std::filesystem::path kFixtures = MINIINFER_FIXTURES;
constexpr float kRelativeTolerance = 1e-4f;  // of the largest |logit|

using miniinfer::testing::Reference;

Reference load_reference(const std::string& name) {
    return miniinfer::testing::load_reference(kFixtures / name);
}

// max |ours - theirs| / max |theirs| over rows [0, rows) of both.
float relative_error(const Tensor& ours, const Tensor& theirs, int64_t rows) {
    const int64_t vocab = theirs.size(1);
    float max_delta = 0, max_abs = 0;
    for (int64_t i = 0; i < rows * vocab; ++i) {
        max_delta = std::max(max_delta, std::fabs(ours.data<float>()[i] - theirs.data<float>()[i]));
        max_abs = std::max(max_abs, std::fabs(theirs.data<float>()[i]));
    }
    return max_delta / max_abs;
}

class HybridFixture : public ::testing::TestWithParam<std::string> {};

// Every prompt position's logits, the prompt whole and in chunks of 5 and of 48 (the delta
// rule's 64-token chunks then start mid-prompt).
TEST_P(HybridFixture, PromptLogitsMatchHuggingFace) {
    const std::string name = GetParam();
    QwenModel model = QwenModel::load(kFixtures / name);
    const Reference ref = load_reference(name);
    for (size_t p = 0; p < ref.prompts.size(); ++p) {
        const std::vector<int32_t>& ids = ref.prompts[p];
        for (size_t chunk : {ids.size(), size_t(5), size_t(48)}) {
            SequenceRunner runner(model, int64_t(ids.size()), chunk == 5 ? 3 : 16);
            std::vector<Tensor> parts;
            for (size_t b = 0; b < ids.size(); b += chunk)
                parts.push_back(
                    runner.append(std::span(ids).subspan(b, std::min(chunk, ids.size() - b))));
            Tensor logits =
                Tensor::zeros({int64_t(ids.size()), model.config().vocab_size}, DType::kF32);
            int64_t at = 0;
            for (const Tensor& t : parts) {
                std::copy_n(t.data<float>(), t.numel(), logits.data<float>() + at);
                at += t.numel();
            }
            const float err = relative_error(logits, ref.logits[p], int64_t(ids.size()));
            EXPECT_LE(err, kRelativeTolerance) << name << " prompt " << p << " chunk " << chunk;
            if (chunk == ids.size())
                std::printf("[ %s prompt %zu: %zu tokens, max |dlogit| %.2e of the largest ]\n",
                            name.c_str(), p, ids.size(), double(err));
        }
    }
}

// Decode: after the prompt, Hugging Face's greedy tokens one at a time, each step continuing
// the state of the last; the logits before each token match its no-cache logits, and the
// argmax is its greedy token.
TEST_P(HybridFixture, DecodeStepsMatchHuggingFace) {
    const std::string name = GetParam();
    QwenModel model = QwenModel::load(kFixtures / name);
    const Reference ref = load_reference(name);
    const int64_t vocab = model.config().vocab_size;
    for (size_t p = 0; p < ref.prompts.size(); ++p) {
        const std::vector<int32_t>& greedy = ref.greedy[p];
        SequenceRunner runner(model, int64_t(ref.prompts[p].size() + greedy.size()));
        Tensor steps = Tensor::zeros({int64_t(greedy.size()), vocab}, DType::kF32);
        Tensor logits = runner.append(ref.prompts[p], true);
        for (size_t i = 0; i < greedy.size(); ++i) {
            std::copy_n(logits.data<float>(), vocab, steps.data<float>() + int64_t(i) * vocab);
            int32_t next = 0;
            cpu::argmax_rows(logits.data<float>(), 1, vocab, &next);
            EXPECT_EQ(next, greedy[i]) << name << " prompt " << p << " step " << i;
            if (i + 1 < greedy.size()) logits = runner.append(std::span(&greedy[i], 1), true);
        }
        const float err = relative_error(steps, ref.greedy_logits[p], int64_t(greedy.size()));
        EXPECT_LE(err, kRelativeTolerance) << name << " prompt " << p;
        std::printf("[ %s prompt %zu: %zu decode steps, max |dlogit| %.2e of the largest ]\n",
                    name.c_str(), p, greedy.size(), double(err));
    }
}

// Several sequences in one step (a prefill, a chunk continuing a state, a decode) give each
// sequence's logits alone: the varlen batch and the state slots are right.
TEST_P(HybridFixture, MixedBatchEqualsSeparateRuns) {
    QwenModel model = QwenModel::load(kFixtures / GetParam());
    const Reference ref = load_reference(GetParam());
    // a: 200 tokens, its last 70 after a 130-token prefix (over a delta-rule chunk boundary);
    // b: 7 tokens.
    miniinfer::testing::expect_mixed_step_equals_separate_runs(model, ref.prompts[3],
                                                               ref.prompts[1], 130);
}

// The engine: Hugging Face's greedy continuations of every prompt (one of 200 tokens), however
// the steps are batched and chunked, under preemption (recomputed from a fresh state), and with
// fewer state slots than requests (admission waits for a slot).
TEST_P(HybridFixture, EngineGreedyMatchesHuggingFaceInEveryBatchingMode) {
    const Reference ref = load_reference(GetParam());
    struct Mode {
        const char* name;
        int64_t budget, num_pages, page_size, state_slots;
        int copies;
    };
    for (Mode m : {Mode{"together", 2048, 128, 16, 0, 1},
                   {"chunked budget 5", 5, 128, 16, 0, 1},
                   {"chunked budget 48", 48, 128, 16, 0, 1},
                   {"two state slots", 2048, 400, 4, 2, 2},
                   {"tiny pool (preemption)", 2048, 70, 4, 0, 3}}) {
        EngineConfig c;
        c.model_dir = (kFixtures / GetParam()).string();
        c.max_model_len = 240;
        c.max_num_batched_tokens = m.budget;
        c.num_pages = m.num_pages;
        c.page_size = m.page_size;
        c.num_state_slots = m.state_slots;
        LLMEngine engine(c);
        std::vector<Prompt> all;
        std::vector<std::vector<int32_t>> expected;
        for (int k = 0; k < m.copies; ++k)
            for (size_t p = 0; p < ref.prompts.size(); ++p) {
                all.push_back(Prompt::from_ids(ref.prompts[p]));
                expected.push_back(ref.greedy[p]);
            }
        const std::vector<RequestOutput> outs = engine.generate(all, greedy(32));
        ASSERT_EQ(outs.size(), expected.size()) << m.name;
        for (size_t i = 0; i < outs.size(); ++i)
            EXPECT_EQ(outs[i].token_ids, expected[i]) << GetParam() << " " << m.name << " " << i;
        if (m.num_pages == 70) {
            EXPECT_GE(engine.scheduler().num_preemptions(), 1) << m.name;
            std::printf("[ %s %s: %lld preemptions ]\n", GetParam().c_str(), m.name,
                        (long long)engine.scheduler().num_preemptions());
        }
    }
}

// The prefix cache: a resent prompt and a conversation's next turn resume from the state
// snapshot of their longest cached prefix (at most one snapshot interval short of it) and
// generate what an engine without the cache generates (Hugging Face's tokens where known).
TEST_P(HybridFixture, PrefixCacheHitsRestoreTheState) {
    const Reference ref = load_reference(GetParam());
    auto config = [&](bool caching) {
        EngineConfig c;
        c.model_dir = (kFixtures / GetParam()).string();
        c.max_model_len = 320;
        c.num_pages = 128;
        c.enable_prefix_caching = caching;
        return c;
    };
    LLMEngine cached(config(true)), plain(config(false));
    const std::vector<int32_t>& prompt = ref.prompts[3];  // 200 tokens
    const RequestOutput first = cached.generate({Prompt::from_ids(prompt)}, greedy(32))[0];
    EXPECT_EQ(first.token_ids, ref.greedy[3]);
    EXPECT_EQ(first.num_cached_tokens, 0);
    // The same prompt: the prefill's snapshot after 192 tokens (the last multiple of 64).
    const RequestOutput again = cached.generate({Prompt::from_ids(prompt)}, greedy(32))[0];
    EXPECT_EQ(again.token_ids, ref.greedy[3]);
    EXPECT_EQ(again.num_cached_tokens, 192);
    // Two more turns, each resending the conversation so far and a new message.
    std::vector<int32_t> history = prompt;
    std::vector<int32_t> last = first.token_ids;
    for (int turn = 1; turn <= 2; ++turn) {
        const int64_t resent = int64_t(history.size() + last.size()) - 1;  // the last: no state
        history.insert(history.end(), last.begin(), last.end());
        history.insert(history.end(), ref.prompts[1].begin(), ref.prompts[1].end());
        const RequestOutput hit = cached.generate({Prompt::from_ids(history)}, greedy(24))[0];
        const RequestOutput miss = plain.generate({Prompt::from_ids(history)}, greedy(24))[0];
        EXPECT_EQ(hit.token_ids, miss.token_ids) << "turn " << turn;
        EXPECT_EQ(miss.num_cached_tokens, 0);
        EXPECT_GT(hit.num_cached_tokens, resent - cached.scheduler().snapshot_interval())
            << "turn " << turn;
        EXPECT_LE(hit.num_cached_tokens, resent) << "turn " << turn;
        std::printf("[ %s turn %d: %lld of %lld resent tokens from the cache ]\n",
                    GetParam().c_str(), turn, (long long)hit.num_cached_tokens, (long long)resent);
        last = hit.token_ids;
    }
    cached.scheduler().check_invariants();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HybridFixture,
                         ::testing::Values("qwen3.5-tiny", "qwen3.5-moe-tiny", "qwen3-next-tiny"),
                         [](const auto& info) {
                             std::string s = info.param;
                             std::replace(s.begin(), s.end(), '-', '_');
                             std::replace(s.begin(), s.end(), '.', '_');
                             return s;
                         });

}  // namespace
