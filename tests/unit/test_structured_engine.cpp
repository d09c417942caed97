// Structured output end to end on the random-weight Qwen3 demo: whatever the model prefers,
// every output follows its schema, regex, choice or grammar and ends with EOS ("stop").
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <set>

#include "core/json.h"
#include "engine/llm_engine.h"
#include "structured/grammar_cache.h"
#include "structured_testing.h"

using namespace miniinfer;
using ::testing::HasSubstr;

namespace {

EngineConfig demo_config() {
    EngineConfig c;
    c.model_dir = std::string(MINIINFER_FIXTURES) + "/qwen3-demo";
    c.max_model_len = 512;
    c.num_pages = 160;
    return c;
}

SamplingParams constrained(StructuredOutput::Kind kind, std::string text, uint64_t seed) {
    SamplingParams p;
    p.max_tokens = 300;  // bounded documents end well before (a safety net: "length" fails)
    p.temperature = seed % 2 ? 1.0 : 0.0;
    p.seed = seed;
    p.structured_outputs = StructuredOutput{
        .kind = kind, .text = std::move(text), .choices = {}, .prefix = {}, .suffix = {}};
    return p;
}

// The engine's own grammar accepts the whole text as a complete document.
bool grammar_accepts(const StructuredOutput& spec, const std::string& text) {
    structured::StructuredSpec s;
    s.kind = structured::StructuredSpec::Kind(int(spec.kind));
    s.text = spec.text;
    s.choices = spec.choices;
    structured::GrammarMatcher m(std::make_shared<const structured::CompiledGrammar>(
        structured::build_grammar(s), miniinfer::testing::byte_vocab()));
    return m.accept_bytes(text) && m.can_end();
}

}  // namespace

TEST(StructuredEngine, SchemaRegexChoiceAndGrammarOutputsFollowTheirConstraint) {
    // Schemas of the suite whose documents are bounded (strings with maxLength, arrays with
    // maxItems, integers with both bounds, no floats): the random model's documents end.
    const std::set<std::string> names = {"address_bounded",          "event_bounded",
                                         "log_entry_bounded",        "github_issue_bounded",
                                         "get_weather_args_bounded", "classification_bounded"};
    std::vector<SamplingParams> params;
    for (const auto& c : miniinfer::testing::schema_suite())
        if (names.count(c.name))
            params.push_back(constrained(StructuredOutput::Kind::kJsonSchema, c.schema,
                                         uint64_t(params.size())));
    ASSERT_EQ(params.size(), names.size());
    const size_t num_schemas = params.size();
    params.push_back(constrained(StructuredOutput::Kind::kRegex, "[a-z]{3}-[0-9]{2,4}", 1));
    params.push_back(
        constrained(StructuredOutput::Kind::kRegex, "(yes|no), [A-Z][a-z]{0,5}\\.", 2));
    params.push_back(constrained(StructuredOutput::Kind::kGrammar,
                                 "root ::= \"(\" num (\"+\" num){0,3} \")\"\nnum ::= [1-9][0-9]?",
                                 3));
    SamplingParams choice = constrained(StructuredOutput::Kind::kChoice, "", 4);
    choice.structured_outputs->choices = {"red", "green", "blue sky"};
    params.push_back(choice);
    SamplingParams free;  // an unconstrained request in the same batches keeps the overlap
    free.max_tokens = 20;
    free.temperature = 0;
    params.push_back(free);

    LLMEngine engine(demo_config());
    ASSERT_TRUE(engine.overlapping());
    std::vector<Prompt> prompts;
    for (size_t i = 0; i < params.size(); ++i)
        prompts.push_back(Prompt::from_text("Reply in JSON, request " + std::to_string(i)));
    const std::vector<RequestOutput> outs = engine.generate(prompts, params);

    EngineConfig plain = demo_config();
    plain.disable_overlap = true;
    LLMEngine plain_engine(plain);
    const std::vector<RequestOutput> plain_outs = plain_engine.generate(prompts, params);

    for (size_t i = 0; i + 1 < params.size(); ++i) {
        const RequestOutput& o = outs[i];
        SCOPED_TRACE(::testing::Message() << "request " << i << ": " << o.text);
        EXPECT_EQ(o.finish_reason, "stop") << o.error;
        EXPECT_TRUE(grammar_accepts(*params[i].structured_outputs, o.text));
        if (i < num_schemas) {
            EXPECT_TRUE(Json::accept(o.text));
        }
        EXPECT_EQ(o.token_ids, plain_outs[i].token_ids);
    }
    EXPECT_TRUE(std::regex_match(outs[num_schemas].text, std::regex("[a-z]{3}-[0-9]{2,4}")));
    EXPECT_THAT(choice.structured_outputs->choices,
                ::testing::Contains(outs[num_schemas + 3].text));
    EXPECT_EQ(outs.back().finish_reason, "length");
    EXPECT_EQ(outs.back().token_ids, plain_outs.back().token_ids);
}

TEST(StructuredEngine, BadConstraintsAreErrorsNamingTheProblem) {
    LLMEngine engine(demo_config());
    const Prompt prompt = Prompt::from_text("hi");
    auto error_of = [&](const SamplingParams& p) {
        try {
            engine.add_request(prompt, p);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_THAT(error_of(constrained(StructuredOutput::Kind::kJsonSchema,
                                     R"({"type": "object", "patternProperties": {"a": {}}})", 0)),
                HasSubstr("patternProperties"));
    EXPECT_THAT(error_of(constrained(StructuredOutput::Kind::kRegex, "(ab", 0)),
                HasSubstr("regex"));
    EXPECT_THAT(error_of(constrained(StructuredOutput::Kind::kGrammar, "root ::= foo", 0)),
                HasSubstr("foo"));
    SamplingParams eos = constrained(StructuredOutput::Kind::kJsonObject, "", 0);
    eos.ignore_eos = true;
    EXPECT_THAT(error_of(eos), HasSubstr("ignore_eos"));
    EXPECT_FALSE(engine.has_unfinished());
}
