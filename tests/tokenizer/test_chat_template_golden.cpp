// Chat renders of the real Qwen3 template against transformers' apply_chat_template (made by
// tools/make_tokenizer_goldens.py): single and multi-turn, system prompts, tools, tool calls
// and results, reasoning content, enable_thinking true/false, add_generation_prompt both ways.
#include <gtest/gtest.h>

#include "golden_util.h"
#include "tokenizer/chat_template.h"

namespace miniinfer {
namespace {

TEST(ChatTemplateGolden, Qwen3MatchesTransformers) {
    const ChatTemplate t = ChatTemplate::load(testing::qwen3_dir());
    const auto rows = testing::read_jsonl("chat.jsonl");
    ASSERT_GE(rows.size(), 100u);
    int mismatches = 0;
    for (const auto& row : rows) {
        const std::string got = t.render(row["messages"], row["tools"],
                                         row["add_generation_prompt"].get<bool>(), row["kwargs"]);
        const std::string want = row["text"].get<std::string>();
        if (got != want && ++mismatches <= 3)
            ADD_FAILURE() << "case: " << row["messages"].dump()
                          << " tools=" << !row["tools"].is_null()
                          << " agp=" << row["add_generation_prompt"]
                          << " kwargs=" << row["kwargs"].dump() << "\n--- want\n"
                          << want << "\n--- got\n"
                          << got;
    }
    EXPECT_EQ(mismatches, 0);
}

}  // namespace
}  // namespace miniinfer
