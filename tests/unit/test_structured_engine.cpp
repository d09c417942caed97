// Structured output end to end on the random-weight Qwen3 demo: whatever the model prefers,
// every output follows its schema, regex, choice or grammar and ends with EOS ("stop").
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <thread>

#include "core/json.h"
#include "engine/llm_engine.h"
#include "engine/request_inputs.h"
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
    p.structured_outputs = StructuredOutput{.kind = kind,
                                            .text = std::move(text),
                                            .choices = {},
                                            .prefix = {},
                                            .suffix = {},
                                            .reasoning_end = {}};
    return p;
}

// The engine's own grammar accepts the whole text as a complete document.
bool grammar_accepts(const StructuredOutput& spec, const std::string& text) {
    structured::GrammarMatcher m(std::make_shared<const structured::CompiledGrammar>(
        structured::build_grammar(spec), miniinfer::testing::byte_vocab()));
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

// add_request throws what it checks itself (ignore_eos); a bad schema, regex or grammar is
// found by its compile, in the background, and ends the request: generate reports both alike.
TEST(StructuredEngine, BadConstraintsAreErrorsNamingTheProblem) {
    LLMEngine engine(demo_config());
    SamplingParams eos = constrained(StructuredOutput::Kind::kJsonObject, "", 0);
    eos.ignore_eos = true;
    const std::vector<SamplingParams> params = {
        constrained(StructuredOutput::Kind::kJsonSchema,
                    R"({"type": "object", "patternProperties": {"a": {}}})", 0),
        constrained(StructuredOutput::Kind::kRegex, "(ab", 0),
        constrained(StructuredOutput::Kind::kGrammar, "root ::= foo", 0), eos};
    const std::vector<std::string> named = {"patternProperties", "regex", "foo", "ignore_eos"};
    const std::vector<RequestOutput> outs =
        engine.generate(std::vector<Prompt>(params.size(), Prompt::from_text("hi")), params);
    for (size_t i = 0; i < params.size(); ++i) {
        EXPECT_EQ(outs[i].finish_reason, "error");
        EXPECT_THAT(outs[i].error, HasSubstr(named[i]));
        EXPECT_TRUE(outs[i].token_ids.empty());
    }
    EXPECT_THROW(engine.add_request(Prompt::from_text("hi"), eos), Error);
    EXPECT_FALSE(engine.has_unfinished());
}

namespace {

// The tokens after `id` (the whole output when it never came), decoded without the EOS.
std::string text_after(const RequestOutput& o, int32_t id, const Tokenizer& tokenizer) {
    auto at = std::find(o.token_ids.begin(), o.token_ids.end(), id);
    if (at != o.token_ids.end())
        ++at;
    else
        at = o.token_ids.begin();
    return tokenizer.decode(std::vector<int32_t>(at, o.token_ids.end()), true);
}

}  // namespace

// A thinking model's reasoning is free; the constraint starts after "</think>". A bias on
// "</think>" makes the random model close its block within a few free tokens (seeds 4 and 6
// write some first).
TEST(StructuredEngine, ReasoningIsFreeAndTheAnswerAfterThinkEndFollowsTheSchema) {
    LLMEngine engine(demo_config());
    const int32_t think_end = *engine.tokenizer()->token_to_id("</think>");
    const std::string schema =
        R"({"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer",
            "minimum": 0, "maximum": 99}}, "required": ["ok", "n"]})";
    std::vector<SamplingParams> params;
    for (uint64_t seed = 1; seed <= 8; ++seed) {
        SamplingParams p = constrained(StructuredOutput::Kind::kJsonSchema, schema, seed);
        p.temperature = 1.0;
        p.structured_outputs->reasoning_end = "</think>";
        p.logit_bias = {{think_end, 30.0f}};
        params.push_back(p);
    }
    const std::vector<RequestOutput> outs = engine.generate(
        std::vector<Prompt>(params.size(), Prompt::from_text("Think, then JSON")), params);
    size_t num_thought = 0;
    for (const RequestOutput& o : outs) {
        SCOPED_TRACE(::testing::Message() << "output: " << o.text);
        ASSERT_EQ(o.finish_reason, "stop") << o.error;
        const auto end = std::find(o.token_ids.begin(), o.token_ids.end(), think_end);
        ASSERT_NE(end, o.token_ids.end());
        num_thought += end != o.token_ids.begin();
        const std::string answer = text_after(o, think_end, *engine.tokenizer());
        EXPECT_TRUE(grammar_accepts(*params[0].structured_outputs, answer)) << answer;
        EXPECT_TRUE(Json::accept(answer)) << answer;
    }
    EXPECT_GT(num_thought, 0u);  // some wrote free tokens before "</think>"
}

// With known outputs (ScriptedRunner, which ignores masks): the matcher takes nothing up to
// "</think>", then the answer must follow the grammar; without reasoning_end, or when the
// tokenizer has no such token, the constraint holds from the first token.
TEST(StructuredEngine, ConstraintStartsAfterReasoningEndToken) {
    const std::filesystem::path scripts =
        std::filesystem::temp_directory_path() / "miniinfer_structured_reasoning.json";
    {
        std::ofstream f(scripts);
        f << Json::array(
                 {{{"when", "good"}, {"text", "<think>\nNot JSON { at all\n</think>\n\n{\"a\":1}"}},
                  {{"when", "bad"}, {"text", "<think>\nfine\n</think>\n\nnot json"}},
                  {{"when", "plain"}, {"text", "{\"a\":2}"}}})
                 .dump();
    }
    EngineConfig config = demo_config();
    config.scripted_outputs = scripts.string();
    LLMEngine engine(config);
    SamplingParams p = constrained(StructuredOutput::Kind::kJsonObject, "", 0);
    p.structured_outputs->reasoning_end = "</think>";
    SamplingParams no_token = p;
    no_token.structured_outputs->reasoning_end = "<no such token>";
    SamplingParams from_start = p;
    from_start.structured_outputs->reasoning_end.clear();
    const std::vector<RequestOutput> outs = engine.generate(
        {Prompt::from_text("good"), Prompt::from_text("bad"), Prompt::from_text("plain"),
         Prompt::from_text("good"), Prompt::from_text("good"), Prompt::from_text("plain")},
        {p, p, p, no_token, from_start, from_start});
    std::filesystem::remove(scripts);
    EXPECT_EQ(outs[0].finish_reason, "stop") << outs[0].error;
    EXPECT_EQ(outs[0].text, "<think>\nNot JSON { at all\n</think>\n\n{\"a\":1}");
    EXPECT_EQ(outs[1].finish_reason, "error");
    EXPECT_THAT(outs[1].error, HasSubstr("allows no token"));
    EXPECT_EQ(outs[2].finish_reason, "stop")
        << outs[2].error;  // "</think>" never came: all of it was reasoning, free (as vLLM)
    EXPECT_EQ(outs[2].text, "{\"a\":2}");
    EXPECT_EQ(outs[3].finish_reason, "error");  // no "<no such token>": constrained at once
    EXPECT_EQ(outs[4].finish_reason, "error");
    EXPECT_EQ(outs[5].finish_reason, "stop") << outs[5].error;
}

// The server's metrics hook: each step that filled masks reports once, each compile once (a
// spec already in the process's cache costs and reports nothing).
TEST(StructuredEngine, TimersReportMaskStepsAndCompiles) {
    LLMEngine engine(demo_config());
    std::vector<double> masks, compiles;
    engine.set_structured_timers({.mask = [&](double s) { masks.push_back(s); },
                                  .compile = [&](double s) { compiles.push_back(s); }});
    const SamplingParams p =
        constrained(StructuredOutput::Kind::kRegex, "timers-[0-9]{1,3}( ok)?", 3);
    const RequestOutput first = engine.generate({Prompt::from_text("a")}, p)[0];
    ASSERT_EQ(first.finish_reason, "stop") << first.error;
    ASSERT_EQ(compiles.size(), 1u);
    EXPECT_GT(compiles[0], 0.0);
    // One mask a step: one per generated token, and one for the token the overlap launches
    // after the last (dropped).
    EXPECT_GE(masks.size(), first.token_ids.size());
    EXPECT_LE(masks.size(), first.token_ids.size() + 1);
    engine.generate({Prompt::from_text("b")}, p);
    EXPECT_EQ(compiles.size(), 1u);
    EXPECT_GT(masks.size(), first.token_ids.size());
}

// What the pipeline's tokenizer process checks before the engine core: the same errors as
// add_request, without a vocabulary.
TEST(StructuredEngine, ConstraintsAreCheckedWithoutTheEngine) {
    auto error_of = [](const SamplingParams& p) {
        try {
            check_structured_output(p);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_EQ(error_of(SamplingParams{}), "no error");
    EXPECT_EQ(error_of(constrained(StructuredOutput::Kind::kRegex, "[a-z]+", 0)), "no error");
    EXPECT_THAT(error_of(constrained(StructuredOutput::Kind::kJsonSchema,
                                     R"({"type": "array", "uniqueItems": true})", 0)),
                HasSubstr("uniqueItems"));
    EXPECT_THAT(error_of(constrained(StructuredOutput::Kind::kGrammar, "root ::= foo", 0)),
                HasSubstr("foo"));
}

// The server compiles on the request's thread (precompile): the engine thread's add_request
// then finds the grammar cached.
TEST(StructuredEngine, PrecompileOnAnotherThreadLeavesTheEngineACacheHit) {
    LLMEngine engine(demo_config());
    std::mutex mutex;
    std::vector<std::thread::id> compiled_on;
    engine.set_structured_timers({.mask = {}, .compile = [&](double) {
                                      std::lock_guard lock(mutex);
                                      compiled_on.push_back(std::this_thread::get_id());
                                  }});
    const SamplingParams p = constrained(StructuredOutput::Kind::kRegex, "precompiled-[a-z]{2}", 1);
    std::thread([&] { engine.precompile(p); }).join();
    ASSERT_EQ(compiled_on.size(), 1u);
    EXPECT_NE(compiled_on[0], std::this_thread::get_id());
    const RequestOutput out = engine.generate({Prompt::from_text("x")}, p)[0];
    EXPECT_EQ(out.finish_reason, "stop") << out.error;
    EXPECT_EQ(compiled_on.size(), 1u);
    EXPECT_THROW(engine.precompile(constrained(StructuredOutput::Kind::kRegex, "(", 0)), Error);
    engine.precompile(SamplingParams{});  // no constraint: nothing to do
    EXPECT_EQ(compiled_on.size(), 1u);
}

namespace {

// Holds an engine's grammar compiles until opened, through the compile timer: it runs on the
// compiling thread inside the compile, so to the engine a held compile is still running (a slow
// compile, made deterministic). Counts the compiles that finished.
struct CompileGate {
    std::mutex mutex;
    std::condition_variable opened_cv;
    bool opened = false;
    int num_compiles = 0;

    void hold(LLMEngine& engine) {
        engine.set_structured_timers({.mask = {}, .compile = [this](double) {
                                          std::unique_lock lock(mutex);
                                          opened_cv.wait(lock, [&] { return opened; });
                                          ++num_compiles;
                                      }});
    }
    void open() {
        {
            std::lock_guard lock(mutex);
            opened = true;
        }
        opened_cv.notify_all();
    }
    int compiles() {
        std::lock_guard lock(mutex);
        return num_compiles;
    }
};

// Declared after the engine: opens the gate before the engine's destructor waits for its compile
// thread (also when an ASSERT leaves the test early).
struct OpenAtExit {
    CompileGate& gate;
    ~OpenAtExit() { gate.open(); }
};

// Steps until nothing is unfinished (at most max_steps); the final outputs by request id.
std::map<std::string, RequestOutput> run_to_end(LLMEngine& engine, int max_steps = 2000) {
    std::map<std::string, RequestOutput> done;
    for (int i = 0; i < max_steps && engine.has_unfinished(); ++i)
        for (RequestOutput& o : engine.step())
            if (o.finished) done[o.request_id] = std::move(o);
    return done;
}

// A name no earlier test compiled: the grammar cache is the process's, and a spec cached by an
// earlier run (--gtest_repeat) would skip the compile these tests hold.
std::string fresh(const std::string& name) {
    static int count = 0;
    return name + std::to_string(count++);
}

SamplingParams free_params(int64_t max_tokens) {
    SamplingParams p;
    p.max_tokens = max_tokens;
    p.temperature = 0;
    return p;
}

}  // namespace

// A grammar not in the cache compiles off the engine thread: its request waits outside the
// scheduler while another request runs to its end, then is admitted and follows the grammar.
TEST(StructuredEngine, ASlowGrammarCompileDelaysNoOtherRequest) {
    CompileGate gate;
    LLMEngine engine(demo_config());
    OpenAtExit open_at_exit{gate};
    gate.hold(engine);
    const std::string pattern = fresh("async-slow") + "-[a-z]{2}";
    const SamplingParams slow = constrained(StructuredOutput::Kind::kRegex, pattern, 0);
    const std::string slow_id = engine.add_request(Prompt::from_text("a"), slow);
    const std::string free_id = engine.add_request(Prompt::from_text("b"), free_params(8));
    EXPECT_EQ(engine.num_waiting(), 2u);
    std::optional<RequestOutput> free_out;
    for (int i = 0; i < 100 && !free_out; ++i)
        for (RequestOutput& o : engine.step()) {
            EXPECT_NE(o.request_id, slow_id);
            if (o.request_id == free_id && o.finished) free_out = std::move(o);
        }
    ASSERT_TRUE(free_out.has_value());
    EXPECT_EQ(free_out->finish_reason, "length");
    EXPECT_EQ(free_out->token_ids.size(), 8u);
    EXPECT_EQ(gate.compiles(), 0);  // still compiling all along
    EXPECT_EQ(engine.num_waiting(), 1u);
    EXPECT_EQ(engine.scheduler().num_waiting() + engine.scheduler().num_running(), 0u);
    EXPECT_TRUE(engine.has_unfinished());
    gate.open();
    std::map<std::string, RequestOutput> done = run_to_end(engine);
    ASSERT_TRUE(done.count(slow_id));
    EXPECT_EQ(done[slow_id].finish_reason, "stop") << done[slow_id].error;
    EXPECT_TRUE(std::regex_match(done[slow_id].text, std::regex(pattern)));
    EXPECT_EQ(gate.compiles(), 1);
}

// Requests with one schema, added while it compiles, share that compile; a later one finds it
// cached and goes straight to the scheduler.
TEST(StructuredEngine, RequestsWithOneSchemaShareOneCompile) {
    CompileGate gate;
    LLMEngine engine(demo_config());
    OpenAtExit open_at_exit{gate};
    gate.hold(engine);
    const std::string name = fresh("async_shared");
    const std::string schema =
        R"({"type": "object", "properties": {")" + name +
        R"(": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": [")" + name +
        R"("], "additionalProperties": false})";
    std::vector<std::string> ids;
    for (uint64_t seed = 1; seed <= 3; ++seed)
        ids.push_back(
            engine.add_request(Prompt::from_text("JSON " + std::to_string(seed)),
                               constrained(StructuredOutput::Kind::kJsonSchema, schema, seed)));
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(engine.step().empty());
    EXPECT_EQ(engine.num_waiting(), 3u);
    gate.open();
    std::map<std::string, RequestOutput> done = run_to_end(engine);
    for (const std::string& id : ids) {
        ASSERT_TRUE(done.count(id));
        EXPECT_EQ(done[id].finish_reason, "stop") << done[id].error;
        EXPECT_TRUE(Json::accept(done[id].text)) << done[id].text;
    }
    EXPECT_EQ(gate.compiles(), 1);
    const std::string cached = engine.add_request(
        Prompt::from_text("JSON 4"), constrained(StructuredOutput::Kind::kJsonSchema, schema, 4));
    EXPECT_EQ(engine.scheduler().num_waiting(), 1u);  // admitted at once
    done = run_to_end(engine);
    EXPECT_EQ(done[cached].finish_reason, "stop") << done[cached].error;
    EXPECT_EQ(gate.compiles(), 1);
}

// A constraint whose compile fails ends its own request with the compile's error; the others
// (constrained or not) run as usual.
TEST(StructuredEngine, AFailedCompileEndsOnlyItsRequest) {
    LLMEngine engine(demo_config());
    std::string bad_id;
    EXPECT_NO_THROW(
        bad_id = engine.add_request(Prompt::from_text("a"),
                                    constrained(StructuredOutput::Kind::kRegex, "(async-bad", 0)));
    const std::string good_id = engine.add_request(
        Prompt::from_text("b"), constrained(StructuredOutput::Kind::kRegex, "async-good-[0-9]", 1));
    const std::string free_id = engine.add_request(Prompt::from_text("c"), free_params(6));
    std::map<std::string, RequestOutput> done = run_to_end(engine);
    ASSERT_EQ(done.size(), 3u);
    EXPECT_EQ(done[bad_id].finish_reason, "error");
    EXPECT_THAT(done[bad_id].error, HasSubstr("regex"));
    EXPECT_TRUE(done[bad_id].token_ids.empty());
    EXPECT_EQ(done[good_id].finish_reason, "stop") << done[good_id].error;
    EXPECT_TRUE(std::regex_match(done[good_id].text, std::regex("async-good-[0-9]")));
    EXPECT_EQ(done[free_id].finish_reason, "length");
    EXPECT_EQ(done[free_id].token_ids.size(), 6u);
}

// Aborted while its grammar compiles: the request ends at once ("abort", no tokens), the engine
// has nothing left, and the compile, once done, serves the next request with that grammar.
TEST(StructuredEngine, AbortWhileCompilingDropsTheRequest) {
    CompileGate gate;
    LLMEngine engine(demo_config());
    OpenAtExit open_at_exit{gate};
    gate.hold(engine);
    const SamplingParams p =
        constrained(StructuredOutput::Kind::kRegex, fresh("async-abort") + "-[a-z]", 0);
    const std::string aborted = engine.add_request(Prompt::from_text("a"), p);
    const std::string free_id = engine.add_request(Prompt::from_text("b"), free_params(4));
    engine.step();
    engine.abort(aborted);
    std::map<std::string, RequestOutput> done = run_to_end(engine);
    ASSERT_TRUE(done.count(aborted));
    EXPECT_EQ(done[aborted].finish_reason, "abort");
    EXPECT_TRUE(done[aborted].token_ids.empty());
    EXPECT_EQ(done[free_id].finish_reason, "length");
    EXPECT_FALSE(engine.has_unfinished());
    EXPECT_EQ(engine.num_waiting(), 0u);
    EXPECT_EQ(gate.compiles(), 0);  // the compile is still held
    gate.open();
    const std::string next = engine.add_request(Prompt::from_text("c"), p);
    done = run_to_end(engine);
    EXPECT_EQ(done[next].finish_reason, "stop") << done[next].error;
    EXPECT_EQ(gate.compiles(), 1);
}
