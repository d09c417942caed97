// The incremental detokenizer: streaming equals decode(), characters come out whole, stop
// strings are found across token boundaries, and the cost per token stays flat.
#include <gtest/gtest.h>

#include <chrono>

#include "golden_util.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/utf8.h"

namespace miniinfer {
namespace {

class Detokenizer : public ::testing::Test {
  protected:
    static void SetUpTestSuite() { tok_ = new Tokenizer(Tokenizer::load(testing::qwen3_dir())); }
    static void TearDownTestSuite() { delete tok_; }

    // Streams ids one by one; returns the concatenated output and checks every chunk.
    static std::string stream(const std::vector<int32_t>& ids, bool skip,
                              std::vector<std::string> stops) {
        IncrementalDetokenizer d(*tok_, skip, std::move(stops));
        std::string all;
        for (int32_t id : ids) {
            std::string chunk = d.push(id);
            EXPECT_TRUE(utf8::is_valid(chunk));
            all += chunk;
        }
        all += d.finish();
        return all;
    }
    static Tokenizer* tok_;
};
Tokenizer* Detokenizer::tok_ = nullptr;

TEST_F(Detokenizer, StreamingEqualsDecodeOnTheGoldenCorpus) {
    int checked = 0;
    for (const auto& row : testing::read_jsonl("encode.jsonl")) {
        const auto ids = row["ids"].get<std::vector<int32_t>>();
        ASSERT_EQ(stream(ids, false, {}), row["decoded"].get<std::string>()) << row["text"].dump();
        ASSERT_EQ(stream(ids, true, {}), row["decoded_skip"].get<std::string>())
            << row["text"].dump();
        ++checked;
    }
    EXPECT_GT(checked, 5000);
}

TEST_F(Detokenizer, SplitCharactersComeOutOnceAndWhole) {
    const std::string text = "𣶷🫶🏼👨‍👩‍👧 中文 ok";
    const auto ids = tok_->encode(text);
    IncrementalDetokenizer d(*tok_, false);
    std::vector<std::string> chunks;
    int empty_pushes = 0;
    for (int32_t id : ids) {
        std::string c = d.push(id);
        if (c.empty())
            ++empty_pushes;
        else
            chunks.push_back(c);
        EXPECT_EQ(c.find("\xEF\xBF\xBD"),
                  std::string::npos);  // never a U+FFFD for a half character
    }
    EXPECT_GT(empty_pushes, 0);  // some tokens carried only part of a character
    std::string joined;
    for (const auto& c : chunks) joined += c;
    EXPECT_EQ(joined + d.finish(), text);
}

TEST_F(Detokenizer, UnfinishedCharacterAtTheEndIsReplaced) {
    auto ids = tok_->encode("𣶷");
    ids.pop_back();
    EXPECT_EQ(stream(ids, false, {}), tok_->decode(ids));
    EXPECT_EQ(tok_->decode(ids), "\xEF\xBF\xBD");
}

TEST_F(Detokenizer, StopStringAcrossTokens) {
    const std::string text = "The answer is 42. ###END### trailing words";
    const auto ids = tok_->encode(text);
    for (const std::string stop : {"###END###", "42. #", "er is", "s", "words", "###E"}) {
        IncrementalDetokenizer d(*tok_, true, {"never matches", stop});
        std::string out;
        int pushes_after_stop = 0;
        for (int32_t id : ids) {
            if (d.stopped()) ++pushes_after_stop;
            out += d.push(id);
        }
        out += d.finish();
        EXPECT_TRUE(d.stopped()) << stop;
        EXPECT_EQ(d.stop_string(), stop);
        EXPECT_EQ(out, text.substr(0, text.find(stop))) << stop;
    }
}

// As vLLM: a stop string counts only if it ends in the text of a token after the first
// min_tokens ones (it may begin earlier); before that, text containing it is released as is.
TEST_F(Detokenizer, StopStringsWaitForMinTokens) {
    const std::string text = "The answer is 42. The end, the very end.";
    const auto ids = tok_->encode(text);
    ASSERT_GT(ids.size(), 8u);
    for (const std::string stop : {"e", "The", "end", "he ve", "42. T"}) {
        for (size_t min_tokens = 0; min_tokens <= ids.size(); ++min_tokens) {
            // ASCII: the first min_tokens tokens decode to exactly this prefix.
            const size_t early =
                tok_->decode(std::vector<int32_t>(ids.begin(), ids.begin() + long(min_tokens)))
                    .size();
            const size_t match =
                text.find(stop, early + 1 > stop.size() ? early + 1 - stop.size() : 0);
            IncrementalDetokenizer d(*tok_, true, {stop}, int64_t(min_tokens));
            std::string out;
            for (int32_t id : ids) out += d.push(id);
            out += d.finish();
            EXPECT_EQ(d.stopped(), match != std::string::npos)
                << stop << " min_tokens " << min_tokens;
            EXPECT_EQ(out, text.substr(0, match)) << stop << " min_tokens " << min_tokens;
        }
    }
    // The stop string inside the first min_tokens tokens is not a match, a later one is.
    IncrementalDetokenizer d(*tok_, true, {"The"}, 2);
    std::string out;
    for (int32_t id : ids) out += d.push(id);
    EXPECT_EQ(out, "The answer is 42. ");
}

TEST_F(Detokenizer, PartialStopMatchIsHeldThenReleased) {
    const std::string text = "a <|en b <|end c <|en";
    const auto ids = tok_->encode(text, {.parse_special = false});
    IncrementalDetokenizer d(*tok_, true, {"<|end|>"});
    std::string out;
    for (int32_t id : ids) {
        out += d.push(id);
        // Whatever was released never ends inside a possible "<|end|>".
        EXPECT_TRUE(out.size() < 2 || out.substr(out.size() - 2) != "<|");
    }
    EXPECT_FALSE(d.stopped());
    EXPECT_EQ(out + d.finish(), text);
}

TEST_F(Detokenizer, StopStringsSeeUnicodeAndSpecialTokens) {
    const std::string text = "Réponse : 東京です。<|im_end|>";
    const auto ids = tok_->encode(text);
    IncrementalDetokenizer keep(*tok_, false, {"<|im_end|>"});
    std::string out;
    for (int32_t id : ids) out += keep.push(id);
    EXPECT_TRUE(keep.stopped());
    EXPECT_EQ(out, "Réponse : 東京です。");
    EXPECT_EQ(stream(ids, false, {"京で"}), "Réponse : 東");
    EXPECT_EQ(stream(ids, true, {"<|im_end|>"}), "Réponse : 東京です。");  // skipped: never seen
}

// A detokenizer that re-decoded the sequence per token would be ~50x slower on the last
// block than the first; ours is flat. The bound is loose to stay robust on loaded machines.
TEST_F(Detokenizer, CostPerTokenDoesNotGrowWithLength) {
    const auto unit =
        tok_->encode("Streaming text with 東京 and emoji 🫶🏼, numbers 12345; ");
    std::vector<int32_t> ids;
    while (ids.size() < 400000) ids.insert(ids.end(), unit.begin(), unit.end());
    IncrementalDetokenizer d(*tok_, true, {"<stop never appears>", "zzz"});
    const size_t block = 40000, num_blocks = ids.size() / block;
    std::vector<double> seconds;
    for (size_t b = 0; b < num_blocks; ++b) {
        const auto t0 = std::chrono::steady_clock::now();
        size_t bytes = 0;
        for (size_t i = b * block; i < (b + 1) * block; ++i) bytes += d.push(ids[i]).size();
        seconds.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        ASSERT_GT(bytes, 0u);
    }
    // Best of two blocks at each end, so one preempted block cannot fail the test.
    const double early = std::max(std::min(seconds[0], seconds[1]), 1e-4);
    const double late = std::min(seconds[num_blocks - 2], seconds[num_blocks - 1]);
    EXPECT_LT(late, 4 * early) << "early block " << early << " s, late block " << late << " s";
}

}  // namespace
}  // namespace miniinfer
