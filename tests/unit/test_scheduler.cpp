// The scheduler and engine loop against a fake model runner that checks every step's batch
// against a fake KV cache: each token's slot must hold exactly that request's token at that
// position, including pages shared through the prefix cache and pages reused after eviction.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "engine/llm_engine.h"

using namespace miniinfer;

namespace {

class FakeRunner : public ModelRunner {
  public:
    explicit FakeRunner(int64_t vocab, int64_t page_size) : page_size_(page_size) {
        config_.model_type = "fake";
        config_.vocab_size = vocab;
        config_.max_position_embeddings = 1 << 20;
        config_.num_layers = config_.num_kv_heads = config_.head_dim = 1;
    }
    const ModelConfig& config() const override { return config_; }

    std::vector<SampledToken> run(const Batch& b, std::span<const SamplerInput> sampling) override {
        ++steps;
        for (size_t s = 0; s < b.seqs.size(); ++s) {
            const int32_t first = b.query_start[s], len = b.seq_lens[s];
            const int32_t start = len - (b.query_start[s + 1] - first);
            // Context written in earlier steps must be intact.
            for (int32_t p = 0; p < start; ++p) {
                const int32_t page =
                    b.block_table[s * size_t(b.max_pages) + size_t(p / page_size_)];
                const auto it = kv_.find(int64_t(page) * page_size_ + p % page_size_);
                EXPECT_TRUE(it != kv_.end()) << "unwritten slot for position " << p;
                if (it != kv_.end()) {
                    EXPECT_EQ(it->second, (std::pair{p, b.seqs[s].request->token(p)}))
                        << "position " << p;
                }
            }
            for (int32_t i = first; i < b.query_start[s + 1]; ++i) {
                EXPECT_EQ(b.input_ids[size_t(i)], b.seqs[s].request->token(b.positions[size_t(i)]));
                kv_[b.slot_mapping[size_t(i)]] = {b.positions[size_t(i)], b.input_ids[size_t(i)]};
            }
        }
        std::vector<SampledToken> out;
        for (const SamplerInput& in : sampling)  // a function of the request and its length only
            out.push_back(
                {int32_t((in.seed * 7919 + in.output_ids.size() * 31 + in.prompt_ids.size()) %
                         uint64_t(config_.vocab_size)),
                 0.f,
                 {}});
        return out;
    }
    int64_t steps = 0;

  private:
    ModelConfig config_;
    int64_t page_size_;
    std::map<int64_t, std::pair<int32_t, int32_t>> kv_;  // slot -> (position, token)
};

EngineConfig small_config(int64_t num_pages, int64_t page_size, bool prefix_caching) {
    EngineConfig c;
    c.model_dir = "(fake)";
    c.num_pages = num_pages;
    c.page_size = page_size;
    c.max_num_seqs = 8;
    c.max_num_batched_tokens = 16;
    c.max_model_len = num_pages * page_size;
    c.enable_prefix_caching = prefix_caching;
    return c;
}

}  // namespace

class SchedulerFuzz : public ::testing::TestWithParam<bool> {};

TEST_P(SchedulerFuzz, RandomRequestsAbortsAndATinyPool) {
    const bool prefix_caching = GetParam();
    const int64_t page_size = 4, num_pages = 24, vocab = 50;
    LLMEngine engine(small_config(num_pages, page_size, prefix_caching),
                     std::make_unique<FakeRunner>(vocab, page_size), std::nullopt);
    std::mt19937 rng(prefix_caching ? 11 : 12);
    std::map<std::string, int64_t> expected_len;  // id -> max_tokens
    std::map<std::string, RequestOutput> done;
    int64_t rejected = 0, aborted = 0, steps = 0;
    std::vector<std::string> live;
    for (int submitted = 0; submitted < 2000 || engine.has_unfinished();) {
        while (submitted < 2000 && live.size() < 12 && rng() % 3 != 0) {
            ++submitted;
            std::vector<int32_t> prompt(size_t(1 + rng() % 70));
            for (auto& t : prompt) t = int32_t(rng() % 3);  // a tiny alphabet: many shared prefixes
            SamplingParams p;
            p.temperature = 0;
            p.ignore_eos = true;
            p.max_tokens = 1 + int64_t(rng() % 30);
            try {
                std::string id = engine.add_request(Prompt::from_ids(prompt), p);
                expected_len[id] = p.max_tokens;
                live.push_back(id);
            } catch (const Error& e) {
                EXPECT_THAT(e.what(), ::testing::HasSubstr("maximum context length"));
                ++rejected;
            }
        }
        if (!live.empty() && rng() % 60 == 0) {
            engine.abort(live[rng() % live.size()]);
            ++aborted;
        }
        for (RequestOutput& out : engine.step()) {
            if (!out.finished) continue;
            live.erase(std::find(live.begin(), live.end(), out.request_id));
            done[out.request_id] = std::move(out);
        }
        engine.scheduler().check_invariants();
        ASSERT_LT(++steps, 200000) << "no progress";
    }
    std::printf(
        "[ %zu requests finished, %lld rejected, %lld aborted, %lld steps, %lld preemptions ]\n",
        done.size(), (long long)rejected, (long long)aborted, (long long)steps,
        (long long)engine.scheduler().num_preemptions());
    EXPECT_GT(rejected, 0);
    EXPECT_GT(engine.scheduler().num_preemptions(), 0);
    for (const auto& [id, len] : expected_len) {
        const RequestOutput& out = done.at(id);
        if (out.finish_reason == "abort") {
            EXPECT_LE(int64_t(out.token_ids.size()), len);
        } else {
            EXPECT_EQ(out.finish_reason, "length") << id;
            EXPECT_EQ(int64_t(out.token_ids.size()), len) << id;
        }
    }
    // Nothing leaked: every page is free or (with caching) cached and evictable.
    const Scheduler& s = engine.scheduler();
    const int64_t cached = s.prefix_cache() ? s.prefix_cache()->num_cached_pages() : 0;
    EXPECT_EQ(s.allocator().num_free() + cached, num_pages);
    EXPECT_EQ(s.kv_usage(), 0.0);
    if (prefix_caching) {
        int64_t reused = 0;
        for (const auto& [id, out] : done) reused += out.num_cached_tokens;
        EXPECT_GT(reused, 0);
    }
}

INSTANTIATE_TEST_SUITE_P(PrefixCaching, SchedulerFuzz, ::testing::Bool());

TEST(Scheduler, RejectsWhatCanNeverRun) {
    LLMEngine engine(small_config(8, 4, true), std::make_unique<FakeRunner>(50, 4), std::nullopt);
    SamplingParams p;
    p.max_tokens = 10;
    EXPECT_THAT([&] { engine.add_request(Prompt::from_ids({}), p); },
                ::testing::ThrowsMessage<Error>(::testing::HasSubstr("empty")));
    EXPECT_THAT([&] { engine.add_request(Prompt::from_ids(std::vector<int32_t>(30, 1)), p); },
                ::testing::ThrowsMessage<Error>(
                    ::testing::HasSubstr("maximum context length is 32 tokens, but 40 were "
                                         "requested (30 in the prompt, 10 max_tokens)")));
    EXPECT_THAT(
        [&] {
            engine.add_request(Prompt::from_ids({1, 50}), p);
        },
        ::testing::ThrowsMessage<Error>(::testing::HasSubstr("outside the vocabulary")));
    EXPECT_THAT([&] { engine.add_request(Prompt::from_text("hi"), p); },
                ::testing::ThrowsMessage<Error>(::testing::HasSubstr("no tokenizer.json")));
    engine.add_request(Prompt::from_ids({1}), p, "x");
    EXPECT_THAT([&] { engine.add_request(Prompt::from_ids({1}), p, "x"); },
                ::testing::ThrowsMessage<Error>(::testing::HasSubstr("already in use")));
}

TEST(Scheduler, ChunkedPrefillRespectsTheBudgetAndDecodesGoFirst) {
    LLMEngine engine(small_config(64, 4, false), std::make_unique<FakeRunner>(50, 4), std::nullopt);
    SamplingParams p;
    p.max_tokens = 5;
    p.ignore_eos = true;
    engine.add_request(Prompt::from_ids(std::vector<int32_t>(3, 1)), p, "short");
    engine.step();  // short's prefill
    engine.add_request(Prompt::from_ids(std::vector<int32_t>(40, 2)), p, "long");
    // long's 40 prompt tokens take three steps of <= 16 tokens; short decodes in each of them.
    for (int i = 0; i < 3; ++i) {
        auto outs = engine.step();
        ASSERT_FALSE(outs.empty());
        EXPECT_EQ(outs[0].request_id, "short");
        EXPECT_EQ(outs[0].num_output_tokens, 2 + i);
        EXPECT_EQ(outs[0].new_token_ids.size(), 1u) << "a step reports only its own token";
    }
}
