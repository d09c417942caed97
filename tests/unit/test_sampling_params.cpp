// SamplingParams: validation of every field, the request JSON, generation_config defaults.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <limits>

#include "config/sampling_params.h"

using namespace miniinfer;
using ::testing::HasSubstr;

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string validation_error(const std::function<void(SamplingParams&)>& edit) {
    SamplingParams p;
    edit(p);
    try {
        p.validate(100);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

std::string json_error(const char* text) {
    try {
        SamplingParams::from_json(Json::parse(text), SamplingParams{});
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}
}  // namespace

TEST(SamplingParams, ValidationNamesFieldAndValue) {
    struct Case {
        std::function<void(SamplingParams&)> edit;
        std::vector<std::string> needles;
    };
    std::vector<Case> cases = {
        {[](auto& p) { p.temperature = kNaN; }, {"temperature", "nan"}},
        {[](auto& p) { p.temperature = -0.5; }, {"temperature", "-0.5"}},
        {[](auto& p) { p.temperature = kInf; }, {"temperature", "inf"}},
        {[](auto& p) { p.top_p = 0.0; }, {"top_p", "got 0"}},
        {[](auto& p) { p.top_p = 1.5; }, {"top_p", "1.5"}},
        {[](auto& p) { p.top_p = kNaN; }, {"top_p", "nan"}},
        {[](auto& p) { p.top_k = -2; }, {"top_k", "-2"}},
        {[](auto& p) { p.min_p = 2.0; }, {"min_p", "got 2"}},
        {[](auto& p) { p.min_p = -0.1; }, {"min_p", "-0.1"}},
        {[](auto& p) { p.repetition_penalty = 0.0; }, {"repetition_penalty", "got 0"}},
        {[](auto& p) { p.repetition_penalty = -1.0; }, {"repetition_penalty", "-1"}},
        {[](auto& p) { p.repetition_penalty = kInf; }, {"repetition_penalty", "inf"}},
        {[](auto& p) { p.presence_penalty = 2.5; }, {"presence_penalty", "2.5"}},
        {[](auto& p) { p.presence_penalty = -3.0; }, {"presence_penalty", "-3"}},
        {[](auto& p) { p.frequency_penalty = 2.1; }, {"frequency_penalty", "2.1"}},
        {[](auto& p) { p.frequency_penalty = kNaN; }, {"frequency_penalty", "nan"}},
        {[](auto& p) { p.max_tokens = 0; }, {"max_tokens", "got 0"}},
        {[](auto& p) { p.min_tokens = -1; }, {"min_tokens", "-1"}},
        {[](auto& p) { p.min_tokens = 17; }, {"min_tokens", "(17)", "max_tokens", "(16)"}},
        {[](auto& p) {
             p.stop = {"ok", ""};
         },
         {"stop", "empty"}},
        {[](auto& p) {
             p.stop_token_ids = {3, 100};
         },
         {"stop_token_ids", "100", "[0, 100)"}},
        {[](auto& p) { p.stop_token_ids = {-1}; }, {"stop_token_ids", "-1"}},
        {[](auto& p) { p.logprobs = 21; }, {"logprobs", "21"}},
        {[](auto& p) { p.logprobs = -1; }, {"logprobs", "-1"}},
    };
    for (size_t i = 0; i < cases.size(); ++i) {
        std::string error = validation_error(cases[i].edit);
        for (const std::string& needle : cases[i].needles)
            EXPECT_THAT(error, HasSubstr(needle)) << "case " << i;
    }
}

TEST(SamplingParams, BoundaryValuesAreValid) {
    for (auto edit : std::vector<std::function<void(SamplingParams&)>>{
             [](auto&) {},
             [](auto& p) { p.temperature = 0.0; },
             [](auto& p) { p.top_k = -1; },
             [](auto& p) { p.top_k = 1000000; },
             [](auto& p) { p.top_p = 1e-9; },
             [](auto& p) { p.min_p = 1.0; },
             [](auto& p) { p.presence_penalty = -2.0, p.frequency_penalty = 2.0; },
             [](auto& p) { p.min_tokens = p.max_tokens = 1; },
             [](auto& p) {
                 p.stop_token_ids = {0, 99};
             },
             [](auto& p) { p.logprobs = 0; },
             [](auto& p) { p.logprobs = 20; },
         })
        EXPECT_EQ(validation_error(edit), "");
}

TEST(SamplingParams, FromJsonOverridesOnlyPresentFields) {
    SamplingParams base;
    base.top_p = 0.9;
    base.stop = {"base"};
    Json j = Json::parse(R"({"temperature": 0, "top_k": 5, "min_p": 0.05, "repetition_penalty": 1.1,
      "presence_penalty": -0.5, "frequency_penalty": 1, "seed": 42, "max_tokens": 100,
      "min_tokens": 3, "stop": "###", "stop_token_ids": [7, 8], "ignore_eos": true,
      "logprobs": 5, "skip_special_tokens": false, "n": 3, "min_p_typo": "ignored",
      "top_p": null})");
    SamplingParams p = SamplingParams::from_json(j, base);
    EXPECT_TRUE(p.greedy());
    EXPECT_EQ(p.top_k, 5);
    EXPECT_EQ(p.top_p, 0.9);
    EXPECT_EQ(p.min_p, 0.05);
    EXPECT_EQ(p.repetition_penalty, 1.1);
    EXPECT_EQ(p.presence_penalty, -0.5);
    EXPECT_EQ(p.frequency_penalty, 1.0);
    EXPECT_EQ(p.seed, 42u);
    EXPECT_EQ(p.max_tokens, 100);
    EXPECT_EQ(p.min_tokens, 3);
    EXPECT_EQ(p.stop, std::vector<std::string>{"###"});
    EXPECT_EQ(p.stop_token_ids, (std::vector<int64_t>{7, 8}));
    EXPECT_TRUE(p.ignore_eos);
    EXPECT_EQ(p.logprobs, 5);
    EXPECT_FALSE(p.skip_special_tokens);

    p = SamplingParams::from_json(Json::parse(R"({"stop": ["a", "b"], "top_k": -1, "seed": -1})"),
                                  base);
    EXPECT_EQ(p.stop, (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(p.top_k, 0);
    EXPECT_EQ(p.seed, std::numeric_limits<uint64_t>::max());
    EXPECT_EQ(p.temperature, 1.0);
    EXPECT_FALSE(p.logprobs.has_value());

    // OpenAI's chat API: logprobs is a switch and top_logprobs the count.
    p = SamplingParams::from_json(Json::parse(R"({"logprobs": true, "top_logprobs": 4})"), base);
    EXPECT_EQ(p.logprobs, 4);
    p = SamplingParams::from_json(Json::parse(R"({"logprobs": true})"), base);
    EXPECT_EQ(p.logprobs, 0);
    p = SamplingParams::from_json(Json::parse(R"({"logprobs": false, "top_logprobs": 4})"), p);
    EXPECT_FALSE(p.logprobs.has_value());
}

TEST(SamplingParams, FromJsonWrongTypesNameTheField) {
    EXPECT_THAT(json_error(R"({"temperature": "hot"})"), HasSubstr("'temperature'"));
    EXPECT_THAT(json_error(R"({"temperature": true})"), HasSubstr("'temperature'"));
    EXPECT_THAT(json_error(R"({"top_k": 1.5})"), HasSubstr("'top_k'"));
    EXPECT_THAT(json_error(R"({"max_tokens": true})"), HasSubstr("'max_tokens'"));
    EXPECT_THAT(json_error(R"({"max_tokens": 9223372036854775808})"), HasSubstr("'max_tokens'"));
    EXPECT_THAT(json_error(R"({"seed": 1.5})"), HasSubstr("'seed'"));
    EXPECT_THAT(json_error(R"({"stop": 5})"), HasSubstr("'stop'"));
    EXPECT_THAT(json_error(R"({"stop": ["a", 1]})"), HasSubstr("'stop'"));
    EXPECT_THAT(json_error(R"({"stop_token_ids": "7"})"), HasSubstr("'stop_token_ids'"));
    EXPECT_THAT(json_error(R"({"stop_token_ids": [7, 1.5]})"), HasSubstr("'stop_token_ids'"));
    EXPECT_THAT(json_error(R"({"ignore_eos": 1})"), HasSubstr("'ignore_eos'"));
    EXPECT_THAT(json_error(R"({"skip_special_tokens": "no"})"), HasSubstr("'skip_special_tokens'"));
    EXPECT_THAT(json_error(R"({"logprobs": "3"})"), HasSubstr("'logprobs'"));
    EXPECT_THAT(json_error(R"({"logprobs": true, "top_logprobs": "3"})"),
                HasSubstr("'top_logprobs'"));
    EXPECT_THAT(json_error(R"([1, 2])"), HasSubstr("object"));
    EXPECT_EQ(json_error(R"({"temperature": 1, "max_tokens": 2})"), "");
}

TEST(SamplingParams, DefaultsFromGenerationConfig) {
    // Qwen3's generation_config.json as published.
    GenerationConfig gen = GenerationConfig::from_json(Json::parse(R"({"bos_token_id": 151643,
      "do_sample": true, "eos_token_id": [151645, 151643], "pad_token_id": 151643,
      "temperature": 0.6, "top_k": 20, "top_p": 0.95})"),
                                                       "generation_config.json");
    SamplingParams d = SamplingParams::from_defaults(gen);
    EXPECT_EQ(d.temperature, 0.6);
    EXPECT_EQ(d.top_k, 20);
    EXPECT_EQ(d.top_p, 0.95);
    EXPECT_EQ(d.min_p, 0.0);
    EXPECT_EQ(d.repetition_penalty, 1.0);
    EXPECT_EQ(d.max_tokens, 16);
    SamplingParams p = SamplingParams::from_json(Json::parse(R"({"temperature": 0.2})"), d);
    EXPECT_EQ(p.temperature, 0.2);
    EXPECT_EQ(p.top_k, 20);

    gen = GenerationConfig::from_json(Json::parse(R"({"top_k": -1, "min_p": 0.1,
      "repetition_penalty": 1.05})"),
                                      "g");
    d = SamplingParams::from_defaults(gen);
    EXPECT_EQ(d.top_k, 0);
    EXPECT_EQ(d.min_p, 0.1);
    EXPECT_EQ(d.repetition_penalty, 1.05);
    EXPECT_EQ(d.temperature, 1.0);
    EXPECT_EQ(SamplingParams::from_defaults({}).top_p, 1.0);
}
