// OutputProcessor: the stop checks of both LLMEngine and the pipeline's detokenizer. Exact
// deltas, finish reasons and stop reasons, token by token, with the Qwen3 tokenizer.
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>

#include "engine/output_processor.h"

using namespace miniinfer;

namespace {

class OutputProcessorTest : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        tokenizer_.emplace(
            Tokenizer::load(std::filesystem::path(MINIINFER_FIXTURES) / "qwen3-demo"));
    }

    // The id of `text`, which must be one token.
    static int32_t id(const std::string& text) {
        const std::vector<int32_t> ids = tokenizer_->encode(text);
        EXPECT_EQ(ids.size(), 1u) << "'" << text << "' is not one token";
        return ids.at(0);
    }

    static SamplingParams params(int64_t max_tokens, std::vector<std::string> stop = {}) {
        SamplingParams p;
        p.max_tokens = max_tokens;
        p.stop = std::move(stop);
        return p;
    }

    OutputProcessor make(const SamplingParams& p, int64_t num_prompt_tokens = 3) {
        return OutputProcessor(p, rules_, &*tokenizer_, num_prompt_tokens);
    }

    static std::optional<Tokenizer> tokenizer_;
    const int32_t eos_ = 151645;  // <|im_end|>
    StopRules rules_{.eos_token_ids = {151645, 151643}, .max_model_len = 100};
};

std::optional<Tokenizer> OutputProcessorTest::tokenizer_;

// One append's result, for compact expectations.
struct Step {
    std::string delta;
    FinishReason reason = FinishReason::kNone;
    std::string stop_reason;
    bool operator==(const Step&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Step& s) {
    return os << "{'" << s.delta << "', " << finish_reason_name(s.reason) << ", '" << s.stop_reason
              << "'}";
}

Step append(OutputProcessor& p, int32_t token) {
    OutputProcessor::Update u = p.append(token);
    return {u.delta_text, u.finish_reason, u.stop_reason};
}

constexpr FinishReason kNone = FinishReason::kNone, kStop = FinishReason::kStop,
                       kLength = FinishReason::kLength, kAbort = FinishReason::kAbort;

TEST_F(OutputProcessorTest, TextFlowsUntilTheLengthLimit) {
    OutputProcessor p = make(params(2));
    EXPECT_EQ(append(p, id("Hello")), (Step{"Hello", kNone, ""}));
    EXPECT_FALSE(p.finished());
    EXPECT_EQ(append(p, id(" world")), (Step{" world", kLength, ""}));
    EXPECT_TRUE(p.finished());
    EXPECT_EQ(p.finish_reason(), kLength);
    EXPECT_EQ(p.num_output_tokens(), 2);
}

TEST_F(OutputProcessorTest, MaxModelLenCountsThePrompt) {
    rules_.max_model_len = 5;
    OutputProcessor p = make(params(50), /*num_prompt_tokens=*/3);
    EXPECT_EQ(append(p, id("Hello")), (Step{"Hello", kNone, ""}));
    EXPECT_EQ(append(p, id(" world")), (Step{" world", kLength, ""}));
}

TEST_F(OutputProcessorTest, EosStopsWithoutItsTextAndReleasesWhatWasHeld) {
    SamplingParams p0 = params(10, {" worldwide"});
    p0.skip_special_tokens = false;  // even then the EOS token's text is not output
    OutputProcessor p = make(p0);
    EXPECT_EQ(append(p, id("Hello")), (Step{"Hello", kNone, ""}));
    EXPECT_EQ(append(p, id(" world")), (Step{"", kNone, ""}));  // may begin " worldwide"
    EXPECT_EQ(append(p, eos_), (Step{" world", kStop, ""}));
    EXPECT_EQ(p.stop_reason(), "");
}

TEST_F(OutputProcessorTest, StopTokenIdStopsWithItsIdAsReason) {
    SamplingParams p0 = params(10);
    p0.stop_token_ids = {id("!")};
    OutputProcessor p = make(p0);
    EXPECT_EQ(append(p, id("Hello")), (Step{"Hello", kNone, ""}));
    EXPECT_EQ(append(p, id("!")), (Step{"", kStop, std::to_string(id("!"))}));
}

TEST_F(OutputProcessorTest, StopStringAcrossATokenBoundaryCutsTheText) {
    OutputProcessor p = make(params(10, {"lo wor"}));
    EXPECT_EQ(append(p, id("Hello")), (Step{"Hel", kNone, ""}));  // "lo" held back
    EXPECT_EQ(append(p, id(" world")), (Step{"", kStop, "lo wor"}));
    EXPECT_EQ(p.finish(kAbort), "") << "nothing after a stop string";
    EXPECT_EQ(p.finish_reason(), kStop);
}

TEST_F(OutputProcessorTest, IncludeStopStrInOutputKeepsTheStopStringAndNothingAfter) {
    SamplingParams p0 = params(10, {"lo wor"});
    p0.include_stop_str_in_output = true;
    OutputProcessor p = make(p0);
    EXPECT_EQ(append(p, id("Hello")), (Step{"Hel", kNone, ""}));
    EXPECT_EQ(append(p, id(" world")), (Step{"lo wor", kStop, "lo wor"}));  // "ld" dropped
}

TEST_F(OutputProcessorTest, HeldBackTextIsReleasedWhenTheRequestEndsOtherwise) {
    {
        OutputProcessor p = make(params(2, {" worldwide"}));
        EXPECT_EQ(append(p, id("Hello")), (Step{"Hello", kNone, ""}));
        EXPECT_EQ(append(p, id(" world")), (Step{" world", kLength, ""}));
    }
    {
        OutputProcessor p = make(params(10, {" worldwide"}));
        EXPECT_EQ(append(p, id("Hello")), (Step{"Hello", kNone, ""}));
        EXPECT_EQ(append(p, id(" world")), (Step{"", kNone, ""}));
        EXPECT_EQ(p.finish(kAbort), " world");
        EXPECT_EQ(p.finish_reason(), kAbort);
        EXPECT_EQ(p.finish(kAbort), "") << "once only";
    }
}

// EOS and stop token ids may end the request on its min_tokens-th token; a stop string must end
// in the text of a later token (the sampler masks EOS and stop ids before min_tokens anyway).
TEST_F(OutputProcessorTest, MinTokensDelaysEosStopTokensAndStopStrings) {
    SamplingParams p0 = params(10, {"Hello"});
    p0.min_tokens = 2;
    p0.stop_token_ids = {id("!")};
    {
        OutputProcessor p = make(p0);
        EXPECT_EQ(append(p, eos_), (Step{"", kNone, ""}));  // special: skipped, not a stop yet
        EXPECT_EQ(append(p, id("Hello")), (Step{"Hello", kNone, ""}));
        EXPECT_EQ(append(p, id("Hello")), (Step{"", kStop, "Hello"}));
    }
    {
        OutputProcessor p = make(p0);
        EXPECT_EQ(append(p, id("!")), (Step{"!", kNone, ""}));
        EXPECT_EQ(append(p, id("!")), (Step{"", kStop, std::to_string(id("!"))}));
    }
    {
        OutputProcessor p = make(p0);
        EXPECT_EQ(append(p, id("Hello")), (Step{"Hello", kNone, ""}));
        EXPECT_EQ(append(p, eos_), (Step{"", kStop, ""}));
    }
}

TEST_F(OutputProcessorTest, IgnoreEosKeepsGoingButStopTokenIdsStillCount) {
    SamplingParams p0 = params(3);
    p0.ignore_eos = true;
    p0.skip_special_tokens = false;
    OutputProcessor p = make(p0);
    EXPECT_EQ(append(p, eos_), (Step{"<|im_end|>", kNone, ""}));
    EXPECT_EQ(append(p, id("Hello")), (Step{"Hello", kNone, ""}));

    p0.stop_token_ids = {eos_};
    OutputProcessor q = make(p0);
    EXPECT_EQ(append(q, eos_), (Step{"", kStop, std::to_string(eos_)}));
}

TEST_F(OutputProcessorTest, PrecedenceWhenTwoFireOnTheSameToken) {
    {  // EOS before a stop token id
        SamplingParams p0 = params(10);
        p0.stop_token_ids = {eos_};
        OutputProcessor p = make(p0);
        EXPECT_EQ(append(p, eos_), (Step{"", kStop, ""}));
    }
    {  // a stop token id before a stop string in its text, and before length
        SamplingParams p0 = params(1, {"!"});
        p0.stop_token_ids = {id("!")};
        OutputProcessor p = make(p0);
        EXPECT_EQ(append(p, id("!")), (Step{"", kStop, std::to_string(id("!"))}));
    }
    {  // a stop string before length
        OutputProcessor p = make(params(2, {" world"}));
        EXPECT_EQ(append(p, id("Hello")), (Step{"Hello", kNone, ""}));
        EXPECT_EQ(append(p, id(" world")), (Step{"", kStop, " world"}));
    }
    {  // of two stop strings completed by one token, the one starting earlier
        OutputProcessor p = make(params(10, {"world", "lo w"}));
        EXPECT_EQ(append(p, id("Hello")), (Step{"Hel", kNone, ""}));
        EXPECT_EQ(append(p, id(" world")), (Step{"", kStop, "lo w"}));
    }
    {  // EOS before length (max_tokens and max_model_len)
        rules_.max_model_len = 4;
        OutputProcessor p = make(params(1), 3);
        EXPECT_EQ(append(p, eos_), (Step{"", kStop, ""}));
    }
}

TEST_F(OutputProcessorTest, WithoutATokenizerNoTextAndNoStopStrings) {
    SamplingParams p0 = params(3, {"Hello"});
    OutputProcessor p(p0, rules_, nullptr, 3);
    EXPECT_EQ(append(p, id("Hello")), (Step{"", kNone, ""}));
    EXPECT_EQ(append(p, eos_), (Step{"", kStop, ""}));
    OutputProcessor q(p0, rules_, nullptr, 3);
    for (int i = 0; i < 2; ++i) EXPECT_EQ(append(q, id("Hello")), (Step{"", kNone, ""}));
    EXPECT_EQ(append(q, id("Hello")), (Step{"", kLength, ""}));
}

TEST_F(OutputProcessorTest, AnEndDecidedElsewhereKeepsItsReason) {
    OutputProcessor p = make(params(10));
    EXPECT_EQ(append(p, id("Hello")), (Step{"Hello", kNone, ""}));
    EXPECT_EQ(p.finish(FinishReason::kError), "");
    EXPECT_EQ(p.finish_reason(), FinishReason::kError);
    EXPECT_DEATH(p.append(id("Hello")), "after the request finished");
}

}  // namespace
