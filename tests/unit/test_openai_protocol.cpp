#include <gtest/gtest.h>

#include "server/openai_protocol.h"
#include "server/tool_calls.h"

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

// ---- Tool calls (server/tool_calls.h)

TEST(ToolCalls, BlocksBecomeCallsAndTheRestIsContent) {
    const std::string text =
        "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
        "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\"}\n</tool_call>";
    const ToolCallText t = parse_tool_calls(text, "call_7_");
    EXPECT_EQ(t.content, "Checking.");
    ASSERT_EQ(t.calls.size(), 2u);
    EXPECT_EQ(t.calls[0].id, "call_7_0");
    EXPECT_EQ(t.calls[0].name, "get_weather");
    EXPECT_EQ(Json::parse(t.calls[0].arguments), Json({{"city", "Paris"}}));
    EXPECT_EQ(t.calls[1].arguments, "{}");
    // Malformed JSON, a missing name, non-object arguments, an unclosed block: text.
    for (const std::string bad : {"<tool_call>{\"name\": \"f\", \"arguments\": {</tool_call>",
                                  "<tool_call>{\"arguments\": {}}</tool_call>",
                                  "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",
                                  "<tool_call>{\"name\": \"f\"}"}) {
        const ToolCallText b = parse_tool_calls("x " + bad, "c");
        EXPECT_TRUE(b.calls.empty()) << bad;
        EXPECT_EQ(b.content, "x " + bad);
    }
    // Arguments given as a JSON string of an object (some models quote it).
    EXPECT_EQ(parse_tool_calls("<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}"
                               "</tool_call>",
                               "c")
                  .calls.at(0)
                  .arguments,
              "{\"a\":1}");
}

// Streamed in pieces split anywhere (inside the tags too), the same calls and content come out.
TEST(ToolCalls, StreamedPiecesGiveTheWholeParse) {
    const std::string text =
        "Hi <tool<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": \"</tool\"}}\n</tool_call> "
        "mid <tool_call>{bad}</tool_call> end <tool_call>{\"name\": \"b\"}</tool_call><tool_c";
    const ToolCallText whole = parse_tool_calls(text, "id");
    ASSERT_EQ(whole.calls.size(), 2u);
    for (size_t step = 1; step <= 7; ++step) {
        ToolCallStreamer s("id");
        std::string content;
        std::vector<ToolCall> calls;
        for (size_t i = 0; i < text.size(); i += step) {
            ToolCallStreamer::Delta d = s.feed(text.substr(i, step));
            content += d.content;
            calls.insert(calls.end(), d.calls.begin(), d.calls.end());
        }
        content += s.finish().content;
        ASSERT_EQ(calls.size(), whole.calls.size()) << "step " << step;
        for (size_t c = 0; c < calls.size(); ++c) {
            EXPECT_EQ(calls[c].name, whole.calls[c].name);
            EXPECT_EQ(calls[c].arguments, whole.calls[c].arguments);
            EXPECT_EQ(calls[c].id, whole.calls[c].id);
        }
        EXPECT_EQ(content, "Hi <tool mid <tool_call>{bad}</tool_call> end <tool_c") << step;
    }
}
