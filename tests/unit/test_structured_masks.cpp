// Token masks over Qwen3's vocabulary (151,669 tokens, byte-level BPE): equal to the brute
// force (for every token, does the matcher take its bytes from this state) on random states,
// and the schema suite's valid documents are allowed token by token and end with a stop.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "structured/gbnf.h"
#include "structured/grammar_cache.h"
#include "structured/json_schema.h"
#include "structured/regex.h"
#include "structured_testing.h"

using namespace miniinfer;
using namespace miniinfer::structured;

namespace {

bool bit(const std::vector<uint32_t>& mask, int32_t id) {
    return (mask[id / 32] >> (id % 32)) & 1u;
}

// Compares the mask with the brute force; returns the allowed ids.
std::vector<int32_t> check_mask(GrammarMatcher& m, const std::string& where) {
    const Vocabulary& vocab = m.compiled().vocab();
    std::vector<uint32_t> mask(vocab.num_mask_words());
    m.fill_next_token_mask(mask);
    std::vector<int32_t> allowed;
    int num_wrong = 0;
    for (int32_t id = 0; id < vocab.size(); ++id) {
        const auto& stops = vocab.stop_ids();
        const bool is_stop = std::find(stops.begin(), stops.end(), id) != stops.end();
        const bool expected =
            is_stop ? m.can_end() : !vocab.bytes(id).empty() && m.allows_bytes(vocab.bytes(id));
        if (bit(mask, id) != expected && ++num_wrong <= 5)
            ADD_FAILURE() << where << ": token " << id << " '" << vocab.bytes(id) << "' mask "
                          << bit(mask, id) << " brute force " << expected;
        if (expected) allowed.push_back(id);
    }
    return allowed;
}

// Checks masks along a valid document's tokens, then along a random walk.
void check_grammar(Grammar grammar, const std::string& valid_text, int random_steps, uint32_t seed,
                   const std::string& name) {
    auto compiled = std::make_shared<const CompiledGrammar>(std::move(grammar),
                                                            miniinfer::testing::qwen3_vocab());
    GrammarMatcher m(compiled);
    const auto ids = miniinfer::testing::qwen3_tokenizer().encode(valid_text);
    for (size_t i = 0; i < ids.size() && i < 12; ++i) {
        check_mask(m, name + " valid prefix " + std::to_string(i));
        ASSERT_TRUE(m.accept_token(ids[i])) << name << " token " << i;
    }
    std::mt19937 rng(seed);
    m.rollback(m.num_accepted());
    for (int step = 0; step < random_steps; ++step) {
        const auto allowed = check_mask(m, name + " random step " + std::to_string(step));
        if (allowed.empty() || m.terminated()) break;
        ASSERT_TRUE(m.accept_token(allowed[rng() % allowed.size()]));
    }
}

TEST(StructuredMasks, EqualBruteForceJsonObject) {
    check_grammar(any_json_grammar(), R"({"name":"Ana ✓","tags":["a",1.5e3,null],"ok":true})", 10,
                  1, "json_object");
}

TEST(StructuredMasks, EqualBruteForceRegexAndGbnf) {
    check_grammar(regex_grammar(R"((\+\d{1,3} )?\(\d{3}\) \d{3}-\d{4}|[a-zé]+@example\.com)"),
                  "(555) 123-4567", 8, 2, "regex");
    check_grammar(parse_gbnf(R"(root ::= "SELECT " cols " FROM " [a-z_]+ (" WHERE " cond)? ";"
                                cols ::= "*" | [a-z_]+ (", " [a-z_]+)*
                                cond ::= [a-z_]+ " = " ([0-9]+ | "'" [^']* "'"))"),
                  "SELECT id, name FROM users WHERE name = 'Zoë';", 8, 3, "gbnf");
}

TEST(StructuredMasks, EqualBruteForceSchemaSuite) {
    const auto& suite = miniinfer::testing::schema_suite();
    for (size_t i = 0; i < suite.size(); i += 29) {
        check_grammar(json_schema_grammar(suite[i].schema), suite[i].valid[0], 6, uint32_t(i),
                      suite[i].name);
    }
}

// Rolling back speculative tokens gives back the masks of the earlier state exactly.
TEST(StructuredMasks, RollbackRestoresMasks) {
    auto compiled = std::make_shared<const CompiledGrammar>(any_json_grammar(),
                                                            miniinfer::testing::qwen3_vocab());
    GrammarMatcher m(compiled);
    const auto ids =
        miniinfer::testing::qwen3_tokenizer().encode(R"({"a":["xyz",12,{"b":null}],"c":"dé"})");
    std::vector<std::vector<uint32_t>> masks;
    for (int32_t id : ids) {
        masks.emplace_back(compiled->vocab().num_mask_words());
        m.fill_next_token_mask(masks.back());
        ASSERT_TRUE(m.accept_token(id));
    }
    std::vector<uint32_t> mask(compiled->vocab().num_mask_words());
    for (size_t back = 1; back <= ids.size(); back += 3) {
        m.rollback(int(back));
        m.fill_next_token_mask(mask);
        EXPECT_EQ(mask, masks[ids.size() - back]) << back;
        for (size_t i = ids.size() - back; i < ids.size(); ++i) ASSERT_TRUE(m.accept_token(ids[i]));
    }
    EXPECT_TRUE(m.can_end());
}

// Every valid document of the suite is a complete document and every invalid one is refused
// (the suite: tests/data/structured/make_schemas.py).
TEST(StructuredMasks, SchemaSuiteAcceptsValidRefusesInvalid) {
    const auto& suite = miniinfer::testing::schema_suite();
    ASSERT_GE(suite.size(), 200u);
    for (const auto& c : suite) {
        SCOPED_TRACE(c.name);
        const Grammar g = json_schema_grammar(c.schema);
        for (const std::string& text : c.valid)
            EXPECT_TRUE(miniinfer::testing::matches(g, text)) << text;
        for (const std::string& text : c.invalid)
            EXPECT_FALSE(miniinfer::testing::matches(g, text)) << text;
    }
}

// On Qwen3's vocabulary, a quarter of the suite (compiling all of it takes ~30 s on two
// cores: bounded strings cost a trie walk per length): each valid document's tokens are in
// the mask one by one, and the stop token after the last.
TEST(StructuredMasks, SchemaSuiteTokenByTokenOnQwen3Vocabulary) {
    const auto& suite = miniinfer::testing::schema_suite();
    GrammarCache cache(miniinfer::testing::qwen3_vocab());
    const Vocabulary& vocab = cache.vocab();
    std::vector<uint32_t> mask(vocab.num_mask_words());
    const int32_t stop = vocab.stop_ids()[0];
    for (size_t i = 0; i < suite.size(); i += 4) {
        const auto& c = suite[i];
        auto compiled = cache.get({StructuredOutput::Kind::kJsonSchema, c.schema, {}, {}, {}, {}});
        for (const std::string& text : c.valid) {
            GrammarMatcher m(compiled);
            for (int32_t id : miniinfer::testing::qwen3_tokenizer().encode(text)) {
                m.fill_next_token_mask(mask);
                ASSERT_TRUE(bit(mask, id))
                    << c.name << ": " << text << " token '" << vocab.bytes(id) << "'";
                ASSERT_TRUE(m.accept_token(id));
            }
            m.fill_next_token_mask(mask);
            EXPECT_TRUE(bit(mask, stop)) << c.name << ": " << text;
            EXPECT_TRUE(m.accept_token(stop));
        }
    }
}

}  // namespace
