// The Jinja interpreter against Jinja2 itself, configured as transformers configures it
// (golden/jinja.jsonl: whitespace control, operators, statements, filters, tests, methods,
// value printing, and templates that must fail), plus error reporting.
#include <gtest/gtest.h>

#include "golden_util.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/jinja/template.h"

namespace miniinfer {
namespace {

TEST(Jinja, MatchesJinja2) {
    const auto rows = testing::read_jsonl("jinja.jsonl");
    ASSERT_GE(rows.size(), 50u);
    for (const auto& row : rows) {
        const std::string source = row["template"].get<std::string>();
        auto render = [&] {
            const jinja::Value context = jinja::Value::from_json(row["context"]);
            return jinja::Template::parse(source).render(context.as_dict());
        };
        if (row.contains("error")) {
            EXPECT_THROW(render(), Error) << source;
        } else {
            try {
                EXPECT_EQ(render(), row["text"].get<std::string>()) << source;
            } catch (const Error& e) {
                ADD_FAILURE() << source << "\nthrew: " << e.what();
            }
        }
    }
}

TEST(Jinja, ErrorsNameTheLine) {
    try {
        jinja::Template::parse(
            "line one\n{% if x %}\n{{ raise_exception('bad input') }}\n{% endif %}")
            .render(jinja::Dict{{{"x", true}}});
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("line 3"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("bad input"), std::string::npos) << e.what();
    }
    EXPECT_THROW(jinja::Template::parse("{% for %}"), Error);
    EXPECT_THROW(jinja::Template::parse("{{ 'unterminated }}"), Error);
    EXPECT_THROW(jinja::Template::parse("{% include 'x' %}"), Error);  // not supported: an error
    EXPECT_THROW(jinja::Template::parse("{{ 99999999999999999999999 }}"), Error);
    EXPECT_EQ(jinja::Template::parse("{{ 1e999 }}").render({}), "inf");
    EXPECT_THROW(jinja::Template::parse("{{ 'x' * 1000000000000 }}").render({}), Error);
}

TEST(ChatTemplate, RejectsMalformedRequests) {
    const ChatTemplate t =
        ChatTemplate::from_string("{% for m in messages %}{{ m.role }}{% endfor %}");
    using J = nlohmann::ordered_json;
    EXPECT_EQ(t.render(J::parse(R"([{"role": "user", "content": "x"}])"), nullptr, false), "user");
    EXPECT_THROW(t.render(J::parse(R"({"role": "user"})"), nullptr, false), Error);
    EXPECT_THROW(t.render(J::parse(R"([{"content": "no role"}])"), nullptr, false), Error);
    EXPECT_THROW(t.render(J::parse("[]"), J::parse("{}"), false), Error);
    EXPECT_THROW(ChatTemplate::load("/nonexistent"), Error);
}

TEST(ChatTemplate, KwargsAndSpecialTokensAreVisible) {
    const ChatTemplate t = ChatTemplate::from_string(
        "{{ bos_token }}{% if enable_thinking is defined and enable_thinking is false %}no-think{% "
        "endif %}"
        "{{ add_generation_prompt }}{{ tools is none }}",
        nlohmann::ordered_json{{"bos_token", "<s>"}});
    using J = nlohmann::ordered_json;
    EXPECT_EQ(t.render(J::array(), nullptr, true, J{{"enable_thinking", false}}),
              "<s>no-thinkTrueTrue");
    EXPECT_EQ(t.render(J::array(), J::array(), false), "<s>FalseFalse");
}

}  // namespace
}  // namespace miniinfer
