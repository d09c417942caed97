// The scheduler and engine loop against a fake model runner that checks every step's batch
// against a fake KV cache: each token's slot must hold exactly that request's token at that
// position, including pages shared through the prefix cache and pages reused after eviction.
// The same with overlap scheduling (the runner's input ids then hold placeholders for tokens
// the previous step samples, which ModelRunner::launch resolves), and with state slots (hybrid
// models): each slot must hold the state of exactly the tokens before the step's first.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "engine/llm_engine.h"

using namespace miniinfer;

namespace {

class FakeRunner : public ModelRunner {
  public:
    // The token the fake samples: a function of the request and its length only.
    static int32_t token_for(uint64_t seed, size_t num_output, size_t num_prompt, int64_t vocab) {
        return int32_t((seed * 7919 + num_output * 31 + num_prompt) % uint64_t(vocab));
    }

    explicit FakeRunner(int64_t vocab, int64_t page_size, bool overlap = false)
        : page_size_(page_size), overlap_(overlap) {
        config_.model_type = "fake";
        config_.vocab_size = vocab;
        config_.max_position_embeddings = 1 << 20;
        config_.num_layers = config_.num_kv_heads = config_.head_dim = 1;
    }
    const ModelConfig& config() const override { return config_; }
    bool overlaps() const override { return overlap_; }

    std::vector<SampledToken> run(const Batch& b, std::span<const SamplerInput> sampling) override {
        ++steps;
        std::set<int32_t> slots_in_step;
        for (const StateRestore& r : b.state_restores) {
            EXPECT_TRUE(state_.count(r.from)) << "restore from unwritten slot " << r.from;
            state_[r.to] = state_[r.from];
            ++restores;
        }
        for (size_t s = 0; s < b.seqs.size(); ++s) {
            const int32_t first = b.query_start[s], len = b.seq_lens[s];
            const int32_t start = len - (b.query_start[s + 1] - first);
            check_state(b, s, start, len, slots_in_step);
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
                const int32_t want = b.seqs[s].request->token(b.positions[size_t(i)]);
                EXPECT_GE(b.input_ids[size_t(i)], 0) << "a placeholder reached the runner";
                if (!ModelRunner::is_placeholder(
                        want)) {  // else checked when a later step reads it
                    EXPECT_EQ(b.input_ids[size_t(i)], want);
                }
                kv_[b.slot_mapping[size_t(i)]] = {b.positions[size_t(i)], b.input_ids[size_t(i)]};
            }
        }
        std::vector<SampledToken> out;
        for (const SamplerInput& in : sampling)
            out.push_back(
                {token_for(in.seed, in.output_ids.size(), in.prompt_ids.size(), config_.vocab_size),
                 0.f,
                 {}});
        return out;
    }
    int64_t steps = 0;
    int64_t state_steps = 0;  // sequences that ran with a state slot
    int64_t restores = 0;     // prefix-cache snapshots restored

  private:
    // A fake recurrent state: the tokens a slot has consumed. The step's restores copy cached
    // snapshots first; a sequence starting at 0 resets its slot, any other must find exactly
    // its request's tokens before its start; a snapshot keeps the slot's tokens after its rows.
    // Slots are distinct within a step.
    void check_state(const Batch& b, size_t s, int32_t start, int32_t len,
                     std::set<int32_t>& slots_in_step) {
        const int32_t slot = b.state_slots[s];
        if (slot < 0) return;
        ++state_steps;
        EXPECT_TRUE(slots_in_step.insert(slot).second) << "state slot " << slot << " twice";
        const Request* r = b.seqs[s].request;
        std::vector<int32_t>& tokens = state_[slot];
        if (start == 0) tokens.clear();
        ASSERT_EQ(int64_t(tokens.size()), start) << r->id << " resumes a state of another length";
        for (int32_t p = 0; p < start; ++p)
            ASSERT_EQ(tokens[size_t(p)], r->token(p)) << r->id << " resumes another's state";
        tokens.insert(tokens.end(), b.input_ids.begin() + b.query_start[s],
                      b.input_ids.begin() + b.query_start[s + 1]);
        if (!b.snapshot_rows.empty() && b.snapshot_rows[s] > 0) {
            const int32_t rows = b.snapshot_rows[s], snap = b.snapshot_slots[s];
            EXPECT_NE(snap, slot);
            EXPECT_TRUE(start + rows <= len);
            state_[snap].assign(tokens.begin(), tokens.begin() + start + rows);
        }
    }

    ModelConfig config_;
    int64_t page_size_;
    bool overlap_;
    std::map<int64_t, std::pair<int32_t, int32_t>> kv_;  // slot -> (position, token)
    std::map<int32_t, std::vector<int32_t>> state_;      // state slot -> the tokens it consumed
};

EngineConfig small_config(int64_t num_pages, int64_t page_size, bool prefix_caching,
                          int64_t num_state_slots = 0) {
    EngineConfig c;
    c.model_dir = "(fake)";
    c.num_pages = num_pages;
    c.page_size = page_size;
    c.max_num_seqs = 8;
    c.max_num_batched_tokens = 16;
    c.max_model_len = num_pages * page_size;
    c.enable_prefix_caching = prefix_caching;
    c.num_state_slots = num_state_slots;
    c.state_snapshot_interval = 8;  // two pages: several snapshots a request
    return c;
}

}  // namespace

// (prefix caching, overlap scheduling, state slots)
class SchedulerFuzz : public ::testing::TestWithParam<std::tuple<bool, bool, bool>> {};

// Random requests (a third stop early on a stop token), random aborts and a pool too small for
// them all. Every finished request holds exactly the fake's tokens up to its stop, its streamed
// deltas add up to its final output, and nothing of it comes after that.
TEST_P(SchedulerFuzz, RandomRequestsAbortsAndATinyPool) {
    const auto [prefix_caching, overlap, state] = GetParam();
    const int64_t page_size = 4, num_pages = 24, vocab = 50;
    constexpr int32_t kStopToken = 7;
    // 5 state slots for 8 sequences: admission also waits for a slot.
    auto runner = std::make_unique<FakeRunner>(vocab, page_size, overlap);
    const FakeRunner& fake = *runner;
    LLMEngine engine(small_config(num_pages, page_size, prefix_caching, state ? 5 : 0),
                     std::move(runner), std::nullopt);
    ASSERT_EQ(engine.overlapping(), overlap);
    std::mt19937 rng(prefix_caching ? 11 : 12);
    std::map<std::string, int64_t> expected_len;  // id -> max_tokens
    std::map<std::string, bool> stops_early;      // id -> has kStopToken as a stop token
    std::map<std::string, std::pair<uint64_t, size_t>> identity;  // id -> (seed, prompt length)
    std::map<std::string, std::vector<int32_t>> streamed;
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
            const bool stop = rng() % 3 == 0;
            if (stop) p.stop_token_ids = {kStopToken};
            p.seed = rng();
            try {
                std::string id = engine.add_request(Prompt::from_ids(prompt), p);
                expected_len[id] = p.max_tokens;
                stops_early[id] = stop;
                identity[id] = {*p.seed, prompt.size()};
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
            EXPECT_FALSE(done.count(out.request_id)) << "output after the final one";
            std::vector<int32_t>& s = streamed[out.request_id];
            s.insert(s.end(), out.new_token_ids.begin(), out.new_token_ids.end());
            EXPECT_EQ(int64_t(s.size()), out.num_output_tokens);
            if (!out.finished) continue;
            EXPECT_EQ(s, out.token_ids) << "the deltas add up to the final output";
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
    int64_t stopped = 0;
    for (const auto& [id, len] : expected_len) {
        const RequestOutput& out = done.at(id);
        const int64_t n = int64_t(out.token_ids.size());
        const auto [seed, prompt_len] = identity[id];
        for (int64_t k = 0; k < n; ++k)  // each in its place: no placeholder, no token dropped
            ASSERT_EQ(out.token_ids[size_t(k)],
                      FakeRunner::token_for(seed, size_t(k), prompt_len, vocab))
                << id << " token " << k;
        // The tokens before the last are never the stop token (it would have ended it there).
        for (int64_t k = 0; k + 1 < n && stops_early[id]; ++k)
            EXPECT_NE(out.token_ids[size_t(k)], kStopToken) << id;
        if (out.finish_reason == "abort") {
            EXPECT_LE(n, len);
        } else if (out.finish_reason == "stop") {
            ++stopped;
            EXPECT_TRUE(stops_early[id]);
            EXPECT_EQ(out.token_ids.back(), kStopToken) << id;
            EXPECT_LE(n, len) << id;
        } else {
            EXPECT_EQ(out.finish_reason, "length") << id;
            EXPECT_EQ(n, len) << id;
        }
    }
    EXPECT_GT(stopped, 0);
    // Nothing leaked: every page is free or (with caching) cached and evictable.
    const Scheduler& s = engine.scheduler();
    const int64_t cached = s.prefix_cache() ? s.prefix_cache()->num_cached_pages() : 0;
    EXPECT_EQ(s.allocator().num_free() + cached, num_pages);
    EXPECT_EQ(s.kv_usage(), 0.0);
    if (prefix_caching) {
        int64_t reused = 0;
        for (const auto& [id, out] : done) reused += out.num_cached_tokens;
        if (!state) {  // with state the hits are mostly a preempted request's own
            EXPECT_GT(reused, 0);
        }
        std::printf("[ %lld prompt tokens reused, %lld snapshots restored ]\n", (long long)reused,
                    (long long)fake.restores);
    }
    EXPECT_EQ(fake.state_steps > 0, state);
    EXPECT_EQ(fake.restores > 0, state && prefix_caching);
}

INSTANTIATE_TEST_SUITE_P(CachingAndOverlap, SchedulerFuzz,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(),
                                            ::testing::Bool()),
                         [](const auto& info) {
                             return std::string(std::get<0>(info.param) ? "cache" : "no_cache") +
                                    (std::get<1>(info.param) ? "_overlap" : "_plain") +
                                    (std::get<2>(info.param) ? "_state" : "");
                         });

// Five state slots, eight sequences allowed: the sixth request waits for a slot, not a page,
// and gets the slot the first one gives back.
TEST(Scheduler, StateSlotsBoundAdmission) {
    LLMEngine engine(small_config(64, 4, false, 5), std::make_unique<FakeRunner>(50, 4),
                     std::nullopt);
    SamplingParams p;
    p.max_tokens = 3;
    p.ignore_eos = true;
    for (int i = 0; i < 6; ++i)
        engine.add_request(Prompt::from_ids({1, 2}), p, "r" + std::to_string(i));
    engine.step();
    EXPECT_EQ(engine.scheduler().num_running(), 5u);
    EXPECT_EQ(engine.scheduler().num_waiting(), 1u);
    engine.scheduler().check_invariants();
    while (engine.scheduler().num_waiting() > 0) engine.step();
    EXPECT_LE(engine.scheduler().num_running(), 5u);
    while (engine.has_unfinished()) {
        engine.step();
        engine.scheduler().check_invariants();
    }
}

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
