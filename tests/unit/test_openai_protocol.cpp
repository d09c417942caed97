#include <gtest/gtest.h>

#include "server/openai_protocol.h"

using namespace miniinfer;

namespace {
// Feeds `text` in pieces of `step` bytes; returns {reasoning, content}.
std::pair<std::string, std::string> split(const std::string& text, size_t step) {
    ReasoningSplitter s;
    std::string reasoning, content;
    for (size_t i = 0; i < text.size(); i += step) {
        auto [r, c] = s.feed(text.substr(i, step));
        reasoning += r;
        content += c;
    }
    auto [r, c] = s.finish();
    return {reasoning + r, content + c};
}
}  // namespace

TEST(ReasoningSplitter, ThinkBlockSplitAnywhere) {
    const std::string text = "<think>\nLet me think.\n</think>\n\nThe answer is 4.";
    for (size_t step = 1; step <= text.size(); ++step) {
        auto [reasoning, content] = split(text, step);
        EXPECT_EQ(reasoning, "\nLet me think.\n") << step;
        EXPECT_EQ(content, "The answer is 4.") << step;
    }
}

TEST(ReasoningSplitter, NoThinkingAndUnfinishedThinking) {
    EXPECT_EQ(split("Just an answer with </think> inside", 3),
              (std::pair<std::string, std::string>{"", "Just an answer with </think> inside"}));
    EXPECT_EQ(split("<think>still thinking when cut off", 4),
              (std::pair<std::string, std::string>{"still thinking when cut off", ""}));
    EXPECT_EQ(split("<thin", 2), (std::pair<std::string, std::string>{"", "<thin"}));
}

TEST(OpenAiProtocol, ParsesPromptsAndRejectsBadOnes) {
    SamplingParams defaults;
    ApiRequest r = parse_completion_request(
        Json::parse(R"({"prompt": [[1, 2], [3]], "n": 2, "max_tokens": 5})"), defaults);
    EXPECT_EQ(r.prompts.size(), 2u);
    EXPECT_EQ(r.prompts[1].token_ids, std::vector<int32_t>{3});
    EXPECT_EQ(r.n, 2);
    EXPECT_EQ(r.params.max_tokens, 5);
    EXPECT_THROW(parse_completion_request(Json::parse(R"({"prompt": 5})"), defaults), Error);
    EXPECT_THROW(parse_completion_request(Json::parse(R"({"prompt": "x", "n": 0})"), defaults),
                 Error);
    EXPECT_THROW(parse_completion_request(Json::parse(R"({"prompt": [1, "a"]})"), defaults), Error);
    auto render = [](const Json& m, const Json&, const Json& kw) { return m.dump() + kw.dump(); };
    ApiRequest c =
        parse_chat_request(Json::parse(R"({"messages": [{"role": "user", "content": "hi"}],
        "max_completion_tokens": 7, "logprobs": true, "top_logprobs": 2, "chat_template_kwargs": {"enable_thinking": false}})"),
                           defaults, render);
    EXPECT_EQ(c.params.max_tokens, 7);
    EXPECT_EQ(c.params.logprobs, 2);
    EXPECT_NE(c.prompts[0].text.find("enable_thinking"), std::string::npos);
}

TEST(UntrustedJson, NestingIsBoundedBeforeParsing) {
    auto nest = [](int depth) {
        return std::string(size_t(depth), '[') + std::string(size_t(depth), ']');
    };
    EXPECT_FALSE(json_nests_deeper_than(nest(64), 64));
    EXPECT_TRUE(json_nests_deeper_than(nest(65), 64));
    EXPECT_FALSE(json_nests_deeper_than(R"({"a": "[[[[[[[[[[\"[[[["})", 3));  // brackets in strings
    EXPECT_NO_THROW(parse_untrusted_json(nest(64), "body"));
    EXPECT_THROW(parse_untrusted_json(nest(100000), "body"), Error);
    EXPECT_THROW(parse_untrusted_json("{\"a\": \"\xff\"}", "body"), Error);
    try {
        parse_untrusted_json("{\"a\": 1", "the request body");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("the request body is not valid JSON"),
                  std::string::npos);
    }
}

TEST(OpenAiProtocol, UnknownRolesAndValuesNeverEchoed) {
    auto render = [](const Json&, const Json&, const Json&) { return std::string("x"); };
    const Json wizard = {{"messages", {{{"role", "wizard"}, {"content", "hi"}}}}};
    try {
        parse_chat_request(wizard, SamplingParams{}, render);
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("system, user, assistant, tool"), std::string::npos);
    }
    EXPECT_NO_THROW(parse_chat_request(wizard, SamplingParams{}, render, /*any_role=*/true));
    const Json secret = {{"prompt", "x"}, {"stop", {{"SECRET"}}}, {"model", "m"}};
    try {
        parse_completion_request(secret, SamplingParams{});
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()).find("SECRET"), std::string::npos) << e.what();
    }
}

// An integer field takes a whole number within range; a float out of an integer's range was
// undefined behaviour in the conversion (found by tests/fuzz: "n": 4111...1, 65 digits).
TEST(OpenAiProtocol, IntegerFieldsRejectFloatsOutOfRange) {
    SamplingParams defaults;
    auto n_of = [&](const std::string& n) {
        return parse_completion_request(Json::parse(R"({"prompt": "x", "n": )" + n + "}"), defaults)
            .n;
    };
    EXPECT_EQ(n_of("2"), 2);
    EXPECT_EQ(n_of("2.0"), 2);
    for (const char* bad : {"2.5", "41111111111111111111111111111111111111111111111111111111111",
                            "1e300", "-1e300", "18446744073709551615", "9223372036854775808.0"}) {
        try {
            n_of(bad);
            ADD_FAILURE() << bad << " was accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("'n' is not an integer in range"),
                      std::string::npos)
                << bad << ": " << e.what();
        }
    }
    Json j = {{"k", 300}, {"u", -1}};
    EXPECT_THROW(json_get<int8_t>(j, "k", "t"), Error);
    EXPECT_THROW(json_get<uint32_t>(j, "u", "t"), Error);
    EXPECT_EQ(json_get<int32_t>(j, "k", "t"), 300);
}
