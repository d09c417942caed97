// The multiturn workload (bench/multiturn.h): its conversations as drawn, fitted to the model,
// and a run's prompts and prefix-cache tally, driven here without an engine.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "bench/multiturn.h"
#include "bench/workloads.h"
#include "core/check.h"

using namespace miniinfer;
using namespace miniinfer::bench;

TEST(BenchMultiturn, DrawsTheShapeDeterministically) {
    const MultiturnWorkload w = make_multiturn_workload({}, 151936, 40960);
    EXPECT_EQ(describe(w.shape),
              "32 conversations x 4 turns: system prompt 256 tokens, user messages 32-128, "
              "outputs 64-128");
    ASSERT_EQ(w.system_prompt.size(), 256u);
    ASSERT_EQ(w.user_messages.size(), 32u);
    for (size_t c = 0; c < 32; ++c) {
        ASSERT_EQ(w.user_messages[c].size(), 4u);
        for (size_t t = 0; t < 4; ++t) {
            EXPECT_GE(w.user_messages[c][t].size(), 32u);
            EXPECT_LE(w.user_messages[c][t].size(), 128u);
            EXPECT_GE(w.max_tokens[c][t], 64);
            EXPECT_LE(w.max_tokens[c][t], 128);
            for (int32_t id : w.user_messages[c][t]) EXPECT_TRUE(id >= 0 && id < 10000) << id;
        }
    }
    const MultiturnWorkload again = make_multiturn_workload({}, 151936, 40960);
    EXPECT_EQ(again.system_prompt, w.system_prompt);
    EXPECT_EQ(again.user_messages, w.user_messages);
    EXPECT_EQ(again.max_tokens, w.max_tokens);
}

// Its seed is none of the fixed workloads': no fixed workload's prompt begins with its system
// prompt's first page, so neither finds the other in the prefix cache.
TEST(BenchMultiturn, SharesNoFirstPageWithTheFixedWorkloads) {
    const std::vector<int32_t> page = [] {
        const MultiturnWorkload w = make_multiturn_workload({}, 151936, 40960);
        return std::vector<int32_t>(w.system_prompt.begin(), w.system_prompt.begin() + 16);
    }();
    for (const char* name : {"decode128", "decode256", "short256", "prefill256", "bs1"})
        for (const std::vector<int32_t>& p : make_bench_workload(name, "").prompts)
            EXPECT_FALSE(std::equal(page.begin(), page.end(), p.begin())) << name;
}

TEST(BenchMultiturn, FitsSmallModels) {
    // A 512-token vocabulary: ids below it. 4,096 positions hold the default shape unchanged.
    const MultiturnWorkload tiny = make_multiturn_workload({}, 512, 4096);
    EXPECT_EQ(tiny.shape.longest_conversation(), 1280);
    for (const auto& conversation : tiny.user_messages)
        for (const auto& message : conversation)
            for (int32_t id : message) EXPECT_TRUE(id >= 0 && id < 512) << id;
    // 128 positions: every length scaled by 128 / 1280, the longest conversation fits.
    const MultiturnWorkload short_model = make_multiturn_workload({}, 512, 128);
    EXPECT_EQ(describe(short_model.shape),
              "32 conversations x 4 turns: system prompt 25 tokens, user messages 3-12, "
              "outputs 6-12");
    EXPECT_LE(short_model.shape.longest_conversation(), 128);
    // Too short for 4 turns of a 1-token message and a 1-token output after the system prompt.
    EXPECT_THROW(make_multiturn_workload({}, 512, 8), Error);
    EXPECT_THROW(make_multiturn_workload({.num_conversations = 0}, 512, 4096), Error);
    EXPECT_THROW(make_multiturn_workload({.user_len_min = 200}, 512, 4096), Error);
    EXPECT_THROW(make_bench_workload("multiturn", ""), Error);
}

// Each next turn resends the previous prompt and its output; the tally counts that as resent,
// and the turns after the first apart from the first.
TEST(BenchMultiturn, RunResendsEachConversationsHistory) {
    const MultiturnWorkload w = make_multiturn_workload({.num_conversations = 2,
                                                         .num_turns = 2,
                                                         .system_len = 8,
                                                         .user_len_min = 2,
                                                         .user_len_max = 4,
                                                         .output_len_min = 3,
                                                         .output_len_max = 5},
                                                        512, 4096);
    MultiturnRun run(w);
    const std::vector<MultiturnRun::Turn> first = run.first_turns();
    ASSERT_EQ(first.size(), 2u);
    for (const MultiturnRun::Turn& t : first) {
        EXPECT_EQ(t.turn_idx, 0);
        std::vector<int32_t> expected = w.system_prompt;
        const auto& user = w.user_messages[size_t(t.conversation_idx)][0];
        expected.insert(expected.end(), user.begin(), user.end());
        EXPECT_EQ(t.prompt, expected);
        EXPECT_EQ(t.max_tokens, w.max_tokens[size_t(t.conversation_idx)][0]);
    }
    // Conversation 1's first turn resends conversation 0's system prompt.
    EXPECT_EQ(run.first_turn_tally().resent_tokens, 8);

    const std::vector<int32_t> output(size_t(w.max_tokens[1][0]), 7);
    const std::optional<MultiturnRun::Turn> next = run.finish(1, output, 0);
    ASSERT_TRUE(next.has_value());
    EXPECT_EQ(next->conversation_idx, 1);
    EXPECT_EQ(next->turn_idx, 1);
    std::vector<int32_t> expected = first[1].prompt;
    expected.insert(expected.end(), output.begin(), output.end());
    const int64_t history = int64_t(expected.size());
    expected.insert(expected.end(), w.user_messages[1][1].begin(), w.user_messages[1][1].end());
    EXPECT_EQ(next->prompt, expected);
    EXPECT_FALSE(run.finish(1, output, history - 4).has_value());  // its last turn
    EXPECT_THROW(run.finish(1, output, 0), Error);                 // nothing in flight
    EXPECT_FALSE(run.done());

    const MultiturnRun::Tally& later = run.later_turn_tally();
    EXPECT_EQ(later.num_turns, 1);
    EXPECT_EQ(later.prompt_tokens, int64_t(expected.size()));
    EXPECT_EQ(later.resent_tokens, history);
    EXPECT_EQ(later.cached_tokens, history - 4);
    EXPECT_DOUBLE_EQ(later.tokens_short_per_turn(), 4.0);
    EXPECT_DOUBLE_EQ(later.ideal_hit_rate(), double(history) / double(expected.size()));

    ASSERT_TRUE(run.finish(0, output, 0).has_value());
    ASSERT_FALSE(run.finish(0, output, 0).has_value());
    EXPECT_TRUE(run.done());
    const MultiturnRun::Tally all = run.tally();
    EXPECT_EQ(all.num_turns, 4);
    EXPECT_EQ(all.prompt_tokens,
              run.first_turn_tally().prompt_tokens + run.later_turn_tally().prompt_tokens);
}
