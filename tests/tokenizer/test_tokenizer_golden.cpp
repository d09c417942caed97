// Encode/decode of the golden corpus against Hugging Face `tokenizers` (made by
// tools/make_tokenizer_goldens.py): every id of every string must be identical.
#include <gtest/gtest.h>

#include "core/thread_pool.h"
#include "golden_util.h"
#include "tokenizer/tokenizer.h"

namespace miniinfer {
namespace {

using testing::qwen3_dir;
using testing::read_jsonl;

class GoldenTest : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        tok_ = new Tokenizer(Tokenizer::load(qwen3_dir()));
        rows_ = new std::vector<nlohmann::ordered_json>(read_jsonl("encode.jsonl"));
    }
    static void TearDownTestSuite() {
        delete tok_;
        delete rows_;
    }
    static Tokenizer* tok_;
    static std::vector<nlohmann::ordered_json>* rows_;
};
Tokenizer* GoldenTest::tok_ = nullptr;
std::vector<nlohmann::ordered_json>* GoldenTest::rows_ = nullptr;

TEST_F(GoldenTest, CorpusIsLarge) {
    EXPECT_GE(rows_->size(), 5000u);
}

TEST_F(GoldenTest, EncodeParsingSpecialTokens) {
    int mismatches = 0;
    for (const auto& row : *rows_) {
        const auto text = row["text"].get<std::string>();
        const auto want = row["ids"].get<std::vector<int32_t>>();
        const auto got = tok_->encode(text, {.add_special_tokens = true, .parse_special = true});
        if (got != want && ++mismatches <= 5) ADD_FAILURE() << "text: " << row["text"].dump();
    }
    EXPECT_EQ(mismatches, 0);
}

TEST_F(GoldenTest, EncodeWithoutParsingSpecialTokens) {
    int mismatches = 0;
    for (const auto& row : *rows_) {
        const auto text = row["text"].get<std::string>();
        const auto want = row["ids_plain"].get<std::vector<int32_t>>();
        const auto got = tok_->encode(text, {.add_special_tokens = true, .parse_special = false});
        if (got != want && ++mismatches <= 5) ADD_FAILURE() << "text: " << row["text"].dump();
    }
    EXPECT_EQ(mismatches, 0);
}

TEST_F(GoldenTest, Decode) {
    int mismatches = 0;
    for (const auto& row : *rows_) {
        const auto ids = row["ids"].get<std::vector<int32_t>>();
        const bool ok = tok_->decode(ids, false) == row["decoded"].get<std::string>() &&
                        tok_->decode(ids, true) == row["decoded_skip"].get<std::string>();
        if (!ok && ++mismatches <= 5) ADD_FAILURE() << "text: " << row["text"].dump();
    }
    EXPECT_EQ(mismatches, 0);
}

TEST_F(GoldenTest, BatchEncodeMatchesSingle) {
    std::vector<std::string> texts;
    for (const auto& row : *rows_) texts.push_back(row["text"].get<std::string>());
    ThreadPool pool(4);
    const auto batch = tok_->encode_batch(texts, {.parse_special = true}, &pool);
    ASSERT_EQ(batch.size(), rows_->size());
    for (size_t i = 0; i < batch.size(); ++i)
        ASSERT_EQ(batch[i], (*rows_)[i]["ids"].get<std::vector<int32_t>>())
            << (*rows_)[i]["text"].dump();
}

}  // namespace
}  // namespace miniinfer
