// A tokenizer in Qwen3.5's form (tests/fixtures/qwen35-tokenizer: a few hundred byte-level BPE
// tokens with Qwen3.5's split pattern, normalizer, decoder and 33 added tokens, and a chat
// template with Qwen3.5's constructs) against Hugging Face: ids, pre-tokenizer pieces, decode
// and chat renders, all from tools/make_tokenizer_goldens.py.
#include <gtest/gtest.h>

#include "golden_util.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace miniinfer {
namespace {

using testing::qwen35_dir;
using testing::read_jsonl;

class Qwen35Tokenizer : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        tok_ = new Tokenizer(Tokenizer::load(qwen35_dir()));
        rows_ = new std::vector<nlohmann::ordered_json>(read_jsonl("qwen35_encode.jsonl"));
    }
    static void TearDownTestSuite() {
        delete tok_;
        delete rows_;
    }
    static Tokenizer* tok_;
    static std::vector<nlohmann::ordered_json>* rows_;
};
Tokenizer* Qwen35Tokenizer::tok_ = nullptr;
std::vector<nlohmann::ordered_json>* Qwen35Tokenizer::rows_ = nullptr;

// Qwen3.5's added tokens follow its BPE vocabulary: Qwen3's 26 in Qwen3's order (<|endoftext|>
// is 248044 there, 640 here), then seven audio/TTS tokens, all special.
TEST_F(Qwen35Tokenizer, AddedTokens) {
    constexpr int32_t kFirst = 640;
    EXPECT_EQ(tok_->vocab_size(), kFirst + 33);
    EXPECT_EQ(tok_->token_to_id("<|endoftext|>"), kFirst);
    EXPECT_EQ(tok_->token_to_id("<|im_end|>"), kFirst + 2);
    EXPECT_EQ(tok_->token_to_id("<|image_pad|>"), kFirst + 12);
    EXPECT_EQ(tok_->token_to_id("<think>"), kFirst + 24);
    EXPECT_EQ(tok_->token_to_id("<|audio_pad|>"), kFirst + 32);
    EXPECT_TRUE(tok_->is_special(kFirst + 2));
    EXPECT_TRUE(tok_->is_special(kFirst + 12));
    EXPECT_FALSE(tok_->is_special(kFirst + 24));  // <think>, </think>, <tool_call>: not special
    EXPECT_TRUE(tok_->is_special(kFirst + 32));
    EXPECT_EQ(tok_->decode(std::vector<int32_t>{kFirst + 1, kFirst + 30}, true), "");
}

TEST_F(Qwen35Tokenizer, EncodeAndDecodeMatchHuggingFace) {
    ASSERT_GE(rows_->size(), 4000u);
    int mismatches = 0;
    for (const auto& row : *rows_) {
        const auto text = row["text"].get<std::string>();
        const auto ids = row["ids"].get<std::vector<int32_t>>();
        // Fields equal to another are left out of the golden file.
        const auto ids_plain = row.value("ids_plain", row["ids"]).get<std::vector<int32_t>>();
        const auto decoded = row.value("decoded", row["text"]).get<std::string>();
        const auto decoded_skip = row.value("decoded_skip", nlohmann::ordered_json(decoded));
        const bool ok = tok_->encode(text, {.parse_special = true}) == ids &&
                        tok_->encode(text, {.parse_special = false}) == ids_plain &&
                        tok_->decode(ids, false) == decoded &&
                        tok_->decode(ids, true) == decoded_skip.get<std::string>();
        if (!ok && ++mismatches <= 5) ADD_FAILURE() << "text: " << row["text"].dump();
    }
    EXPECT_EQ(mismatches, 0);
}

// The split itself, piece by piece: with a few hundred tokens most wrong splits would not show
// in the ids. The corpus has every code point that is a combining mark to Hugging Face.
TEST_F(Qwen35Tokenizer, PreTokenizerPiecesMatchHuggingFace) {
    const Json spec = read_json_file(qwen35_dir() + "/tokenizer.json");
    const Normalizer normalizer = Normalizer::from_json(spec["normalizer"]);
    const PreTokenizer pre_tokenizer = PreTokenizer::from_json(spec["pre_tokenizer"]);
    int mismatches = 0;
    for (const auto& row : *rows_) {
        const auto text = row["text"].get<std::string>();
        std::string buf;
        std::vector<std::string> pieces;
        pre_tokenizer.split(normalizer.apply(text, buf), [&](std::string_view piece) {
            pieces.push_back(byte_level::encode(piece));
        });
        if (pieces != row["pieces"].get<std::vector<std::string>>() && ++mismatches <= 5)
            ADD_FAILURE() << "text: " << row["text"].dump();
    }
    EXPECT_EQ(mismatches, 0);
}

// Renders of the fixture's template (Qwen3.5's constructs: content parts with image and video
// placeholders, XML tool calls with mapping arguments, reasoning, tool results) against
// transformers' apply_chat_template; where the template refuses, so must we.
TEST(Qwen35ChatTemplate, MatchesTransformers) {
    const ChatTemplate t = ChatTemplate::load(qwen35_dir());
    const auto rows = read_jsonl("qwen35_chat.jsonl");
    ASSERT_GE(rows.size(), 400u);
    int mismatches = 0, refusals = 0;
    for (const auto& row : rows) {
        std::string got;
        bool failed = false;
        try {
            got = t.render(row["messages"], row["tools"], row["add_generation_prompt"].get<bool>(),
                           row["kwargs"]);
        } catch (const Error& e) {
            failed = true, got = e.what();
        }
        refusals += row.contains("error");
        const bool ok =
            row.contains("error") ? failed : !failed && got == row["text"].get<std::string>();
        if (!ok && ++mismatches <= 3)
            ADD_FAILURE() << "case: " << row["messages"].dump()
                          << " tools=" << !row["tools"].is_null()
                          << " kwargs=" << row["kwargs"].dump() << "\n--- want\n"
                          << row.value("text", row.value("message", "")) << "\n--- got\n"
                          << got;
    }
    EXPECT_EQ(mismatches, 0);
    EXPECT_GE(refusals, 50);
}

}  // namespace
}  // namespace miniinfer
