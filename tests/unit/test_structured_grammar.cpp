// Structured output's grammars: GBNF, regular expressions and JSON Schema accept what they
// should and reject the rest; bad input is an Error naming what is wrong.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "structured/gbnf.h"
#include "structured/grammar_cache.h"
#include "structured/json_schema.h"
#include "structured/regex.h"
#include "structured_testing.h"

using namespace miniinfer;
using namespace miniinfer::structured;
using miniinfer::testing::matches;
using ::testing::HasSubstr;

namespace {

template <typename F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(StructuredGbnf, AcceptsAndRejects) {
    const char* text = R"(
        # a list of key=value pairs
        root ::= pair ("," pair)*
        pair ::= key "=" value
        key  ::= [a-z_]+
        value ::= [0-9]{1,3} | "\"" [^"]* "\"" | ("true" |
                  "false")
    )";
    EXPECT_TRUE(matches(parse_gbnf(text), "a=1"));
    EXPECT_TRUE(matches(parse_gbnf(text), "a=123,b_c=\"x y\",d=true"));
    EXPECT_TRUE(matches(parse_gbnf(text), "k=\"héllo ✓\""));
    EXPECT_FALSE(matches(parse_gbnf(text), "a=1234"));
    EXPECT_FALSE(matches(parse_gbnf(text), "a=1,"));
    EXPECT_FALSE(matches(parse_gbnf(text), "A=1"));
    EXPECT_FALSE(matches(parse_gbnf(text), ""));
}

TEST(StructuredGbnf, RecursionAndEscapes) {
    const char* text = "root ::= \"(\" root \")\" | \"\\x41\" | [\\u00e9-\\u00ea]";
    EXPECT_TRUE(matches(parse_gbnf(text), "((A))"));
    EXPECT_TRUE(matches(parse_gbnf(text), "(ê)"));
    EXPECT_FALSE(matches(parse_gbnf(text), "((A)"));
    EXPECT_FALSE(matches(parse_gbnf(text), "(e)"));
}

TEST(StructuredGbnf, Errors) {
    EXPECT_THAT(error_of([] { parse_gbnf("root ::= foo"); }), HasSubstr("undefined rule 'foo'"));
    EXPECT_THAT(error_of([] { parse_gbnf("root ::= \"a\" root"); }), HasSubstr("matches nothing"));
    EXPECT_THAT(error_of([] { parse_gbnf("start ::= \"a\""); }), HasSubstr("no rule named 'root'"));
    EXPECT_THAT(error_of([] { parse_gbnf("root ::= root \"a\" | \"b\""); }),
                HasSubstr("left-recursive"));
    EXPECT_THAT(error_of([] { parse_gbnf("root ::= (\"a\"?)*"); }), HasSubstr("left-recursive"));
    EXPECT_THAT(error_of([] { parse_gbnf("root ::= \"a\"\nroot ::= \"b\""); }),
                HasSubstr("defined twice"));
    EXPECT_THAT(error_of([] { parse_gbnf("root ::= \"a\n"); }), HasSubstr("line"));
    EXPECT_THAT(error_of([] { parse_gbnf("root ::= (\"a\""); }), HasSubstr("missing ')'"));
    EXPECT_THAT(error_of([] { parse_gbnf("root ::= " + std::string(100000, '(')); }),
                HasSubstr("nested too deeply"));
}

TEST(StructuredRegex, AcceptsAndRejects) {
    auto m = [](const char* re, const char* text) { return matches(regex_grammar(re), text); };
    EXPECT_TRUE(m(R"(^\d{3}-\d{4}$)", "555-1234"));
    EXPECT_FALSE(m(R"(^\d{3}-\d{4}$)", "555-12345"));
    EXPECT_TRUE(m("(cat|dog)s?", "dogs"));
    EXPECT_FALSE(m("(cat|dog)s?", "cow"));
    EXPECT_TRUE(m("[^a-c]+", "xyz✓"));
    EXPECT_FALSE(m("[^a-c]+", "xbz"));
    EXPECT_TRUE(m("a.c", "aéc"));
    EXPECT_FALSE(m("a.c", "a\nc"));
    EXPECT_TRUE(m(R"([\w.]+@\w+\.(com|org))", "ana.b@x.org"));
    EXPECT_TRUE(m("(?:ab){2,}", "ababab"));
    EXPECT_FALSE(m("(?:ab){2,}", "ab"));
    EXPECT_TRUE(m(R"(\u00e9\x41)", "éA"));
    EXPECT_TRUE(m("a*?b", "aaab"));
}

TEST(StructuredRegex, Errors) {
    EXPECT_THAT(error_of([] { regex_grammar("(?=a)b"); }), HasSubstr("lookaround"));
    EXPECT_THAT(error_of([] { regex_grammar(R"((a)\1)"); }), HasSubstr("backreference"));
    EXPECT_THAT(error_of([] { regex_grammar(R"(\bword)"); }), HasSubstr("word boundary"));
    EXPECT_THAT(error_of([] { regex_grammar("a)"); }), HasSubstr("unbalanced"));
    EXPECT_THAT(error_of([] { regex_grammar("[a-"); }), HasSubstr("missing ']'"));
    EXPECT_THAT(error_of([] { regex_grammar("*a"); }), HasSubstr("without anything to repeat"));
    EXPECT_THAT(error_of([] { regex_grammar("a{3,1}"); }), HasSubstr("n < m"));
    EXPECT_THAT(error_of([] { regex_grammar(std::string(100000, '(')); }),
                HasSubstr("nested too deeply"));
}

TEST(StructuredJson, AnyValue) {
    auto m = [](const char* text) { return matches(any_json_grammar(), text); };
    EXPECT_TRUE(m(R"({"a":[1,-2.5e3,true,null,{"b":"c\"\u00e9"}],"d":{}})"));
    EXPECT_TRUE(m("\"ü\""));
    EXPECT_TRUE(m("0"));
    EXPECT_FALSE(m("01"));
    EXPECT_FALSE(m(R"({"a":1,})"));
    EXPECT_FALSE(m(R"({"a": 1})"));  // compact: no whitespace
    EXPECT_FALSE(m("\"a\nb\""));
}

TEST(StructuredJson, ObjectsAndOptionalProperties) {
    const Grammar g = json_schema_grammar(R"({"type":"object","properties":{
        "a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},
        "required":["b"]})");
    for (const char* ok : {R"({"b":"x"})", R"({"a":1,"b":"x"})", R"({"b":"x","c":true})",
                           R"({"a":-7,"b":"","c":false})"})
        EXPECT_TRUE(matches(g, ok)) << ok;
    for (const char* bad : {R"({})", R"({"a":1})", R"({"b":"x","a":1})", R"({"b":"x","d":1})",
                            R"({"a":1.5,"b":"x"})"})
        EXPECT_FALSE(matches(g, bad)) << bad;
}

// A forced tool call: the document between the call's tags.
TEST(StructuredJson, PrefixAndSuffixAroundTheDocument) {
    const Grammar g = json_schema_grammar(R"({"type":"object","properties":{"a":{"const":1}},
        "required":["a"]})",
                                          "<tool_call>\n", "\n</tool_call>");
    EXPECT_TRUE(matches(g, "<tool_call>\n{\"a\":1}\n</tool_call>"));
    EXPECT_FALSE(matches(g, "{\"a\":1}"));
    EXPECT_FALSE(matches(g, "<tool_call>\n{\"a\":1}"));
}

TEST(StructuredJson, AdditionalPropertiesAndArrays) {
    const Grammar g = json_schema_grammar(R"({"type":"object","properties":{
        "tags":{"type":"array","items":{"type":"string"},"minItems":1,"maxItems":2}},
        "required":["tags"],"additionalProperties":{"type":"number"}})");
    EXPECT_TRUE(matches(g, R"({"tags":["a"]})"));
    EXPECT_TRUE(matches(g, R"({"tags":["a","b"],"x":1,"y":2.5})"));
    EXPECT_FALSE(matches(g, R"({"tags":[]})"));
    EXPECT_FALSE(matches(g, R"({"tags":["a","b","c"]})"));
    EXPECT_FALSE(matches(g, R"({"tags":["a"],"x":"s"})"));
}

TEST(StructuredJson, EnumsConstAnyOfRefsAndRecursion) {
    const Grammar g = json_schema_grammar(R"({"$defs":{"node":{"type":"object","properties":{
        "v":{"enum":["a",1,null]},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},
        "required":["v"]}},"anyOf":[{"$ref":"#/$defs/node"},{"const":{"k":[true]}}]})");
    EXPECT_TRUE(matches(g, R"({"v":"a"})"));
    EXPECT_TRUE(matches(g, R"({"v":1,"kids":[{"v":null},{"v":"a","kids":[]}]})"));
    EXPECT_TRUE(matches(g, R"({"k":[true]})"));
    EXPECT_FALSE(matches(g, R"({"v":"b"})"));
    EXPECT_FALSE(matches(g, R"({"k":[false]})"));
}

TEST(StructuredJson, NumbersAndRanges) {
    const Grammar g = json_schema_grammar(R"({"type":"array","prefixItems":[
        {"type":"integer","minimum":-5,"maximum":120},
        {"type":"integer","exclusiveMinimum":9},
        {"type":"number","minimum":0,"maximum":1},
        {"type":["integer","null"]}],"items":false})");
    EXPECT_TRUE(matches(g, "[120,10,0.25,null]"));
    EXPECT_TRUE(matches(g, "[-5,99999,1,7]"));
    EXPECT_TRUE(matches(g, "[0,10,1.000,-3]"));
    EXPECT_FALSE(matches(g, "[121,10,0.5,1]"));
    EXPECT_FALSE(matches(g, "[-6,10,0.5,1]"));
    EXPECT_FALSE(matches(g, "[1,9,0.5,1]"));
    EXPECT_FALSE(matches(g, "[1,10,1.5,1]"));
    EXPECT_FALSE(matches(g, "[1,10,0.5]"));
    for (int v = -30; v <= 130; ++v) {
        const bool in = v >= -5 && v <= 120;
        EXPECT_EQ(matches(g, "[" + std::to_string(v) + ",10,0,null]"), in) << v;
    }
}

TEST(StructuredJson, StringsFormatsAndPatterns) {
    const Grammar g = json_schema_grammar(R"({"type":"object","properties":{
        "d":{"type":"string","format":"date"},"p":{"type":"string","pattern":"^[A-Z]{2}\"\\d$"},
        "s":{"type":"string","minLength":2,"maxLength":3},"n":{"type":"string","nullable":true}}})");
    EXPECT_TRUE(matches(g, R"({"d":"2024-02-29","p":"AB\"7","s":"xé","n":null})"));
    EXPECT_TRUE(matches(g, R"({"s":"a\nb"})"));
    EXPECT_FALSE(matches(g, R"({"d":"2024-13-01"})"));
    EXPECT_FALSE(matches(g, R"({"p":"AB7"})"));
    EXPECT_FALSE(matches(g, R"({"s":"a"})"));
    EXPECT_FALSE(matches(g, R"({"s":"abcd"})"));
}

TEST(StructuredJson, EmailAndUriFormats) {
    const Grammar email = json_schema_grammar(R"({"type":"string","format":"email"})");
    EXPECT_TRUE(matches(email, R"("bob.smith+x@mail.example.org")"));
    EXPECT_FALSE(matches(email, R"("bob..smith@example.org")"));
    EXPECT_FALSE(matches(email, R"("bob@localhost")"));
    const Grammar uri = json_schema_grammar(R"({"type":"string","format":"uri"})");
    EXPECT_TRUE(matches(uri, R"("https://example.com/a?b=1#c")"));
    EXPECT_FALSE(matches(uri, R"("https://exa mple.com")"));
    EXPECT_FALSE(matches(uri, R"("/relative/path")"));
}

TEST(StructuredJson, ErrorsNameTheKeyword) {
    auto err = [](const char* schema) { return error_of([&] { json_schema_grammar(schema); }); };
    EXPECT_THAT(err(R"({"type":"array","uniqueItems":true})"), HasSubstr("'uniqueItems'"));
    EXPECT_THAT(err(R"({"type":"object","patternProperties":{}})"),
                HasSubstr("'patternProperties'"));
    EXPECT_THAT(err(R"({"properties":{"a":{"not":{}}}})"),
                AllOf(HasSubstr("'not'"), HasSubstr("#/properties/a")));
    EXPECT_THAT(err(R"({"type":"string","format":"ipv6"})"), HasSubstr("format 'ipv6'"));
    EXPECT_THAT(err(R"({"type":"number","exclusiveMinimum":0})"), HasSubstr("'exclusiveMinimum'"));
    EXPECT_THAT(err(R"({"type":"number","minimum":0.5})"), HasSubstr("'minimum'"));
    EXPECT_THAT(err(R"({"$ref":"#/$defs/missing"})"), HasSubstr("missing schema"));
    EXPECT_THAT(err(R"({"$ref":"http://x/y"})"), HasSubstr("unsupported $ref"));
    EXPECT_THAT(err(R"({"type":"widget"})"), HasSubstr("unknown type 'widget'"));
    EXPECT_THAT(err(R"({"type":"object","required":["a"]})"), HasSubstr("'a'"));
    EXPECT_THAT(err("{"), HasSubstr("not valid JSON"));
    EXPECT_THAT(err("false"), HasSubstr("matches nothing"));
    EXPECT_THAT(err(R"({"type":[]})"), HasSubstr("matches nothing"));
    EXPECT_THAT(err(R"({"type":"object","properties":{"a":false},"required":["a"]})"),
                HasSubstr("matches nothing"));
    EXPECT_THAT(err(R"js({"type":"string","pattern":"(?=x)"})js"), HasSubstr("lookaround"));
}

TEST(StructuredGrammarCache, CompilesOnceByContent) {
    GrammarCache cache(miniinfer::testing::byte_vocab());
    StructuredOutput a{StructuredOutput::Kind::kRegex, "a+", {}, {}, {}, {}};
    StructuredOutput b{StructuredOutput::Kind::kGrammar, "root ::= \"a\"+", {}, {}, {}, {}};
    auto g1 = cache.get(a);
    EXPECT_EQ(cache.get(a), g1);
    EXPECT_NE(cache.get(b), g1);
    EXPECT_EQ(cache.num_hits(), 1);
    EXPECT_EQ(cache.num_misses(), 2);
    EXPECT_THAT(error_of([&] {
                    cache.get({StructuredOutput::Kind::kRegex, "(", {}, {}, {}, {}});
                }),
                HasSubstr("regex"));
    StructuredOutput choice{StructuredOutput::Kind::kChoice, "", {"yes", "no"}, {}, {}, {}};
    GrammarMatcher m(cache.get(choice));
    EXPECT_TRUE(m.accept_bytes("no"));
    EXPECT_TRUE(m.must_end());
}

// After "</think>" Qwen writes a blank line: a constraint with reasoning_end takes up to two
// newlines before its document, and is a different grammar (cache key) from the plain one.
TEST(StructuredGrammarCache, ReasoningEndAllowsTheBlankLineBeforeTheDocument) {
    StructuredOutput spec{StructuredOutput::Kind::kRegex, "ab", {}, {}, {}, {}};
    StructuredOutput after_think = spec;
    after_think.reasoning_end = "</think>";
    EXPECT_NE(spec.key(), after_think.key());
    for (const char* text : {"ab", "\nab", "\n\nab"}) {
        EXPECT_TRUE(matches(build_grammar(after_think), text)) << text;
        EXPECT_EQ(matches(build_grammar(spec), text), std::string_view(text) == "ab") << text;
    }
    EXPECT_FALSE(matches(build_grammar(after_think), "\n\n\nab"));
    EXPECT_FALSE(matches(build_grammar(after_think), "\n\n"));
    EXPECT_FALSE(matches(build_grammar(after_think), " ab"));
}

TEST(StructuredMatcher, RollbackAndStop) {
    auto compiled = std::make_shared<const CompiledGrammar>(regex_grammar("ab|ac"),
                                                            miniinfer::testing::byte_vocab());
    GrammarMatcher m(compiled);
    EXPECT_TRUE(m.accept_token('a'));
    EXPECT_FALSE(m.accept_token(256));  // not complete yet
    EXPECT_TRUE(m.accept_token('b'));
    EXPECT_TRUE(m.must_end());
    m.rollback(1);
    EXPECT_FALSE(m.can_end());
    EXPECT_TRUE(m.accept_token('c'));
    EXPECT_TRUE(m.accept_token(256));
    EXPECT_TRUE(m.terminated());
    std::vector<uint32_t> mask(compiled->vocab().num_mask_words());
    m.fill_next_token_mask(mask);
    EXPECT_EQ(std::count(mask.begin(), mask.end(), 0u), long(mask.size()));
    m.rollback(3);
    m.fill_next_token_mask(mask);
    EXPECT_EQ(mask['a' / 32], 1u << ('a' % 32));
}

}  // namespace
