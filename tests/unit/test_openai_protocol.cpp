#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include <fmt/format.h>

#include "server/openai_protocol.h"
#include "server/request_fields.h"
#include "server/tool_calls.h"

using namespace miniinfer;

namespace {
// Feeds `text` in pieces of `step` bytes; returns {reasoning, content}.
std::pair<std::string, std::string> split(const std::string& text, size_t step,
                                          bool reasoning_open = false) {
    ReasoningSplitter s(reasoning_open);
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

// Qwen3.5's generation prompt ends with "<think>\n" (thinking on): the model starts with its
// reasoning, and the prompt, not the output, opened the block.
TEST(ReasoningSplitter, BlockOpenedByThePrompt) {
    const std::string text = "Let me think.\n</think>\n\nThe answer is 4.";
    for (size_t step = 1; step <= text.size(); ++step)
        EXPECT_EQ(split(text, step, true),
                  (std::pair<std::string, std::string>{"Let me think.\n", "The answer is 4."}))
            << step;
    EXPECT_EQ(split("cut off while thinking", 5, true),
              (std::pair<std::string, std::string>{"cut off while thinking", ""}));
    auto opens = [](const std::string& rendered) {
        auto render = [&](const Json&, const Json&, const Json&) { return rendered; };
        const Json body = Json::parse(R"({"messages": [{"role": "user", "content": "hi"}]})");
        return parse_chat_request(body, SamplingParams{}, render).reasoning_open;
    };
    EXPECT_TRUE(opens("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n"));
    EXPECT_FALSE(opens("<|im_start|>assistant\n<think>\n\n</think>\n\n"));  // thinking off
    EXPECT_FALSE(opens("<|im_start|>assistant\n"));                         // Qwen3
    EXPECT_FALSE(opens("<think>\nold</think>\n<|im_start|>assistant\n"));
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

// ---- Request fields (server/request_fields.h) and chat messages as real clients send them

namespace {

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

// A value that asks for something, for a refused field.
Json asking_value(std::string_view name) {
    if (name == "response_format") return {{"type", "json_object"}};
    if (name == "modalities") return Json::array({"text", "audio"});
    if (name == "guided_choice") return Json::array({"a", "b"});
    return {{"x", 1}};
}

const auto kRender = [](const Json& m, const Json&, const Json& kw) {
    return m.dump() + kw.dump();
};

}  // namespace

// Every row of the table, on both endpoints: refused fields and other values of default-only
// fields are a 400 that names the field; the default value and unknown fields pass.
TEST(RequestFields, EveryRowIsHonouredOrRefusedByName) {
    const Json chat = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
    const Json completion = {{"prompt", "hi"}};
    int refused = 0;
    for (const RequestField& f : request_fields()) {
        for (FrontEnd e : {FrontEnd::kChat, FrontEnd::kCompletion}) {
            if (!(f.front_ends & uint8_t(e))) continue;
            const bool is_chat = e == FrontEnd::kChat;
            auto parse = [&](Json body) {
                if (is_chat) return parse_chat_request(body, SamplingParams{}, kRender);
                return parse_completion_request(body, SamplingParams{});
            };
            Json body = is_chat ? chat : completion;
            if (f.use == FieldUse::kRefused) {
                body[std::string(f.name)] = asking_value(f.name);
                const std::string why = error_of([&] { parse(body); });
                EXPECT_NE(why.find("'" + std::string(f.name) + "'"), std::string::npos)
                    << f.name << ": " << why;
                ++refused;
            } else if (f.use == FieldUse::kDefaultOnly) {
                body[std::string(f.name)] = Json::parse(f.only);
                EXPECT_EQ(error_of([&] { parse(body); }), "") << f.name;
                body[std::string(f.name)] = asking_value(f.name);
                EXPECT_NE(error_of([&] { parse(body); }).find(std::string(f.name)),
                          std::string::npos)
                    << f.name;
                ++refused;
            }
        }
    }
    EXPECT_GT(refused, 30);
    Json unknown = chat;
    unknown["some_future_field"] = 1;
    EXPECT_EQ(error_of([&] { parse_chat_request(unknown, SamplingParams{}, kRender); }), "");
}

using ::testing::HasSubstr;

TEST(StructuredFields, EachFieldReachesTheParams) {
    using enum StructuredOutput::Kind;
    const Json schema = {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}};
    auto parsed = [](Json extra) {
        Json body = {{"prompt", "hi"}};
        body.update(extra);
        return parse_completion_request(body, SamplingParams{}).params.structured_outputs;
    };
    EXPECT_FALSE(parsed({{"response_format", {{"type", "text"}}}}));
    EXPECT_EQ(parsed({{"response_format", {{"type", "json_object"}}}}),
              (StructuredOutput{.kind = kJsonObject,
                                .text = "",
                                .choices = {},
                                .prefix = {},
                                .suffix = {},
                                .reasoning_end = {}}));
    const StructuredOutput json{.kind = kJsonSchema,
                                .text = schema.dump(),
                                .choices = {},
                                .prefix = {},
                                .suffix = {},
                                .reasoning_end = {}};
    EXPECT_EQ(parsed({{"response_format",
                       {{"type", "json_schema"},
                        {"json_schema", {{"name", "x"}, {"schema", schema}, {"strict", true}}}}}}),
              json);
    EXPECT_EQ(parsed({{"guided_json", schema}}), json);
    EXPECT_EQ(parsed({{"structured_outputs", {{"json", schema}}}}), json);
    EXPECT_EQ(parsed({{"guided_regex", "[a-z]+"}}), (StructuredOutput{.kind = kRegex,
                                                                      .text = "[a-z]+",
                                                                      .choices = {},
                                                                      .prefix = {},
                                                                      .suffix = {},
                                                                      .reasoning_end = {}}));
    EXPECT_EQ(parsed({{"structured_outputs", {{"grammar", "root ::= \"a\""}}}}),
              (StructuredOutput{.kind = kGrammar,
                                .text = "root ::= \"a\"",
                                .choices = {},
                                .prefix = {},
                                .suffix = {},
                                .reasoning_end = {}}));
    EXPECT_EQ(parsed({{"guided_grammar", "root ::= \"a\""}}),
              (StructuredOutput{.kind = kGrammar,
                                .text = "root ::= \"a\"",
                                .choices = {},
                                .prefix = {},
                                .suffix = {},
                                .reasoning_end = {}}));
    const StructuredOutput choice{.kind = kChoice,
                                  .text = "",
                                  .choices = {"a", "b"},
                                  .prefix = {},
                                  .suffix = {},
                                  .reasoning_end = {}};
    EXPECT_EQ(parsed({{"guided_choice", {"a", "b"}}}), choice);
    EXPECT_EQ(parsed({{"structured_outputs", {{"choice", {"a", "b"}}}}}), choice);
    // The pipeline's engine core gets the params as JSON.
    SamplingParams p;
    p.structured_outputs = choice;
    EXPECT_EQ(SamplingParams::from_json(p.to_json(), {}).structured_outputs, choice);
}

TEST(StructuredFields, BadValuesAreErrorsNamingTheField) {
    auto why = [](Json extra) {
        Json body = {{"prompt", "hi"}};
        body.update(extra);
        return error_of([&] { parse_completion_request(body, SamplingParams{}); });
    };
    EXPECT_THAT(why({{"response_format", {{"type", "xml"}}}}), HasSubstr("response_format.type"));
    EXPECT_THAT(
        why({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}}}}),
        HasSubstr("'response_format.json_schema'"));
    EXPECT_THAT(why({{"guided_json", 3}}), HasSubstr("'guided_json'"));
    EXPECT_THAT(why({{"guided_regex", ""}}), HasSubstr("'guided_regex'"));
    EXPECT_THAT(why({{"guided_choice", Json::array()}}), HasSubstr("'guided_choice'"));
    EXPECT_THAT(why({{"structured_outputs", {{"xml", "a"}}}}),
                HasSubstr("'structured_outputs.xml'"));
    EXPECT_THAT(why({{"structured_outputs", {{"regex", "a"}, {"choice", {"a"}}}}}),
                HasSubstr("exactly one"));
    EXPECT_THAT(why({{"guided_regex", "a"}, {"response_format", {{"type", "json_object"}}}}),
                HasSubstr("guided_regex"));
}

TEST(StructuredFields, ToolChoiceRequiredOrNamedForcesOneCall) {
    Json body = Json::parse(R"({"messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters":
                     {"type": "object", "properties": {"city": {"type": "string"}}}}},
                  {"type": "function", "function": {"name": "get_time"}}],
        "chat_template_kwargs": {"enable_thinking": false},
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})");
    // No --enable-auto-tool-choice needed: the call is forced.
    ApiRequest r = parse_chat_request(body, SamplingParams{}, kRender, false, false);
    ASSERT_TRUE(r.params.structured_outputs);
    EXPECT_TRUE(r.parse_tool_calls);
    EXPECT_EQ(r.params.structured_outputs->prefix, "<tool_call>\n");
    EXPECT_EQ(r.params.structured_outputs->suffix, "\n</tool_call>");
    EXPECT_THAT(r.params.structured_outputs->text, HasSubstr(R"({"const":"get_weather"})"));
    EXPECT_THAT(r.params.structured_outputs->text, ::testing::Not(HasSubstr("get_time")));
    body["tool_choice"] = "required";
    r = parse_chat_request(body, SamplingParams{}, kRender, false, false);
    EXPECT_THAT(r.params.structured_outputs->text, HasSubstr("anyOf"));
    body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "nope"}}}};
    EXPECT_THAT(error_of([&] { parse_chat_request(body, SamplingParams{}, kRender); }),
                HasSubstr("'nope'"));
    body["tool_choice"] = "required";
    body["guided_regex"] = "a";
    EXPECT_THAT(error_of([&] { parse_chat_request(body, SamplingParams{}, kRender); }),
                HasSubstr("tool_choice"));
    body.erase("guided_regex");
    body.erase("tools");
    EXPECT_THAT(error_of([&] { parse_chat_request(body, SamplingParams{}, kRender); }),
                HasSubstr("needs 'tools'"));
}

// A thinking model reasons first: the constraint starts after "</think>" when the template
// leaves the model thinking, and at the first token when the prompt closed the block itself.
TEST(StructuredFields, ChatWithThinkingConstrainsTheAnswerAfterThinkEnd) {
    Json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                 {"response_format", {{"type", "json_object"}}}};
    auto reasoning_end = [&](const auto& render) {
        return parse_chat_request(body, SamplingParams{}, render)
            .params.structured_outputs->reasoning_end;
    };
    EXPECT_EQ(reasoning_end(kRender), "</think>");  // Qwen3, enable_thinking true by default
    body["chat_template_kwargs"] = {{"enable_thinking", false}};
    EXPECT_EQ(reasoning_end(kRender), "");
    // Qwen3.5 opens the block in its generation prompt.
    const auto opens = [](const Json&, const Json&, const Json&) {
        return std::string("<|im_start|>assistant\n<think>\n");
    };
    EXPECT_EQ(reasoning_end(opens), "</think>");
    // A template without thinking renders the same prompt either way.
    body.erase("chat_template_kwargs");
    const auto no_thinking = [](const Json& m, const Json&, const Json&) { return m.dump(); };
    EXPECT_EQ(reasoning_end(no_thinking), "");
    // A forced tool call follows the reasoning too, and the field crosses the pipeline.
    body.erase("response_format");
    body["tools"] = {{{"type", "function"}, {"function", {{"name", "f"}}}}};
    body["tool_choice"] = "required";
    const SamplingParams p = parse_chat_request(body, SamplingParams{}, kRender).params;
    EXPECT_EQ(p.structured_outputs->reasoning_end, "</think>");
    EXPECT_EQ(SamplingParams::from_json(p.to_json(), {}).structured_outputs, p.structured_outputs);
}

TEST(RequestFields, HonouredSamplingFieldsReachTheParams) {
    const Json body = Json::parse(R"({"prompt": "hi", "logit_bias": {"42": 100, "7": -5.5},
        "allowed_token_ids": [1, 2], "bad_words": ["no"], "include_stop_str_in_output": true,
        "truncate_prompt_tokens": 8, "return_token_ids": true, "request_id": "abc",
        "return_tokens_as_token_ids": true, "add_special_tokens": false})");
    const ApiRequest r = parse_completion_request(body, SamplingParams{});
    EXPECT_EQ(r.params.logit_bias.size(), 2u);
    EXPECT_EQ(r.params.allowed_token_ids, (std::vector<int64_t>{1, 2}));
    EXPECT_EQ(r.params.bad_words, std::vector<std::string>{"no"});
    EXPECT_TRUE(r.params.include_stop_str_in_output);
    EXPECT_EQ(r.params.truncate_prompt_tokens, 8);
    EXPECT_TRUE(r.return_token_ids && r.tokens_as_ids);
    EXPECT_FALSE(r.add_special_tokens);
    EXPECT_EQ(r.request_id, "abc");
    EXPECT_NO_THROW(r.params.validate(100));
    // And they cross the pipeline unchanged.
    EXPECT_EQ(SamplingParams::from_json(r.params.to_json(), {}).to_json(), r.params.to_json());
    EXPECT_NE(error_of([&] {
                  parse_completion_request(
                      Json::parse(R"({"prompt": "x", "logit_bias": {"a": 1}})"), SamplingParams{});
              }).find("logit_bias"),
              std::string::npos);
}

TEST(ChatMessages, TextPartsAreJoinedAndOtherPartsRefusedByType) {
    const Json parts =
        Json::parse(R"([{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])");
    const Json n = normalise_messages(parts, false);
    EXPECT_EQ(n[0]["content"], "Be brief.");
    EXPECT_EQ(n[1]["content"], "a\nb");
    const Json image =
        Json::parse(R"([{"role": "user", "content": [{"type": "text", "text": "what is it?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}])");
    const std::string why = error_of([&] { normalise_messages(image, false); });
    EXPECT_NE(why.find("message 0 (user)"), std::string::npos) << why;
    EXPECT_NE(why.find("'image_url'"), std::string::npos) << why;
    EXPECT_NE(why.find("vision input (images and video) is not supported"), std::string::npos)
        << why;
    EXPECT_NE(why.find("text only"), std::string::npos) << why;
    EXPECT_EQ(why.find("base64"), std::string::npos) << why;
    // Qwen3.5's template takes {"type": "image"} and {"type": "video"} parts; so does vLLM.
    for (const char* type : {"image", "video", "video_url"}) {
        const Json part = Json::parse(fmt::format(
            R"([{{"role": "user", "content": [{{"type": "{}", "{}": "x"}}]}}])", type, type));
        EXPECT_NE(error_of([&] { normalise_messages(part, false); }).find("vision input"),
                  std::string::npos)
            << type;
    }
    const Json audio = Json::parse(
        R"([{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AA"}}]}])");
    EXPECT_NE(
        error_of([&] { normalise_messages(audio, false); }).find("audio input is not supported"),
        std::string::npos);
}

TEST(ChatMessages, ToolCallTurnsWithoutContentAndDeveloperRole) {
    const Json m = Json::parse(R"([{"role": "developer", "content": "sys"},
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "w", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "sunny"}]}])");
    const Json n = normalise_messages(m, false);
    EXPECT_EQ(n[0]["role"], "system");
    EXPECT_EQ(n[2]["content"], "");
    EXPECT_EQ(n[3]["content"], "sunny");
    EXPECT_NE(error_of([&] {
                  normalise_messages(Json::parse(R"([{"role": "user"}])"), false);
              }).find("message 0 (user): missing 'content'"),
              std::string::npos);
}

// A template failure names the message, never the template's line or its undefined names; a
// template's own raise_exception message is passed on.
TEST(ChatMessages, TemplateErrorsNameTheMessage) {
    auto failing = [](const Json& m, const Json&, const Json&) -> std::string {
        if (m.size() >= 2) fail("chat template: line 43: 'content' is undefined");
        return "ok";
    };
    const Json body = Json::parse(R"({"messages": [{"role": "user", "content": "hi"},
        {"role": "assistant", "content": "x"}]})");
    const std::string why = error_of([&] { parse_chat_request(body, SamplingParams{}, failing); });
    EXPECT_NE(why.find("message 1 (assistant)"), std::string::npos) << why;
    EXPECT_EQ(why.find("line 43"), std::string::npos) << why;
    EXPECT_EQ(why.find("undefined"), std::string::npos) << why;
    auto raising = [](const Json&, const Json&, const Json&) -> std::string {
        fail("chat template: line 3: raise_exception: No user query found in messages.");
    };
    EXPECT_EQ(error_of([&] { parse_chat_request(body, SamplingParams{}, raising); }),
              "the chat template refused these messages: No user query found in messages.");
}

TEST(ChatMessages, GenerationPromptAndContinueFinalMessage) {
    auto render = [](const Json& m, const Json&, const Json& kw) {
        std::string s;
        for (const Json& msg : m)
            s += "<" + msg["role"].get<std::string>() + ">" + msg["content"].get<std::string>() +
                 "</end>";
        if (kw.value("add_generation_prompt", false)) s += "<assistant>";
        return s;
    };
    Json body = Json::parse(R"({"messages": [{"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Once upon"}]})");
    EXPECT_EQ(parse_chat_request(body, SamplingParams{}, render).prompts[0].text,
              "<user>hi</end><assistant>Once upon</end><assistant>");
    body["continue_final_message"] = true;
    EXPECT_NE(error_of([&] {
                  parse_chat_request(body, SamplingParams{}, render);
              }).find("add_generation_prompt"),
              std::string::npos);
    body["add_generation_prompt"] = false;
    EXPECT_EQ(parse_chat_request(body, SamplingParams{}, render).prompts[0].text,
              "<user>hi</end><assistant>Once upon");
}

// The README's compatibility table is this table: same fields, front ends and use, no others.
TEST(RequestFields, TheReadmeTableIsTheCodesTable) {
    const std::string readme = read_text_file(std::string(MINIINFER_SOURCE_DIR) + "/README.md");
    size_t rows = 0;
    for (size_t at = readme.find("\n| `"); at != std::string::npos;
         at = readme.find("\n| `", at + 1))
        for (const char* where : {"` | chat", "` | completions", "` | python"})
            if (readme.compare(readme.find('`', at + 4), std::strlen(where), where) == 0) ++rows;
    EXPECT_EQ(rows, request_fields().size()) << "rows in README.md's compatibility table";
    for (const Json& f : request_fields_json()) {
        std::string where;
        for (const Json& w : f["front_ends"])
            where += (where.empty() ? "" : ", ") + w.get<std::string>();
        const std::string row = "\n| `" + f["name"].get<std::string>() + "` | " + where + " | " +
                                f["use"].get<std::string>() + " |";
        EXPECT_NE(readme.find(row), std::string::npos) << "README.md lacks the row" << row;
    }
}
