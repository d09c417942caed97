// The multi-process pipeline's pieces, in one process: messages survive MessagePack, deltas
// rebuild the outputs they came from, and an LLMEngine without detokenization followed by the
// detokenizer stage gives exactly what a single-process LLMEngine gives (text, tokens,
// logprobs, finish and stop reasons), stop strings and min_tokens included.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <deque>
#include <set>

#include "engine/llm_engine.h"
#include "server/pipeline_detokenizer.h"
#include "server/pipeline_messages.h"

using namespace miniinfer;
using namespace miniinfer::pipeline;

namespace {

const std::filesystem::path kFixtures = MINIINFER_FIXTURES;

Json round_trip(const Json& message) {
    return decode(encode(message));
}

TEST(PipelineMessages, SamplingParamsRoundTrip) {
    SamplingParams p;
    p.temperature = 0.7;
    p.top_k = 40;
    p.top_p = 0.9;
    p.min_p = 0.05;
    p.repetition_penalty = 1.1;
    p.presence_penalty = -0.5;
    p.frequency_penalty = 0.25;
    p.seed = 18446744073709551615ull;
    p.max_tokens = 77;
    p.min_tokens = 3;
    p.stop = {"###", "é\n"};
    p.stop_token_ids = {7, 151645};
    p.ignore_eos = true;
    p.logprobs = 5;
    p.skip_special_tokens = false;
    Json m = round_trip({{"type", kAdd}, {"params", to_json(p)}});
    const SamplingParams q = params_from_json(m["params"]);
    EXPECT_EQ(q.temperature, p.temperature);
    EXPECT_EQ(q.top_k, p.top_k);
    EXPECT_EQ(q.top_p, p.top_p);
    EXPECT_EQ(q.min_p, p.min_p);
    EXPECT_EQ(q.repetition_penalty, p.repetition_penalty);
    EXPECT_EQ(q.presence_penalty, p.presence_penalty);
    EXPECT_EQ(q.frequency_penalty, p.frequency_penalty);
    EXPECT_EQ(q.seed, p.seed);
    EXPECT_EQ(q.max_tokens, p.max_tokens);
    EXPECT_EQ(q.min_tokens, p.min_tokens);
    EXPECT_EQ(q.stop, p.stop);
    EXPECT_EQ(q.stop_token_ids, p.stop_token_ids);
    EXPECT_EQ(q.ignore_eos, p.ignore_eos);
    EXPECT_EQ(q.logprobs, p.logprobs);
    EXPECT_EQ(q.skip_special_tokens, p.skip_special_tokens);
    // Unset optionals stay unset.
    const SamplingParams d =
        params_from_json(round_trip({{"type", kAdd}, {"p", to_json(SamplingParams{})}})["p"]);
    EXPECT_FALSE(d.seed.has_value());
    EXPECT_FALSE(d.logprobs.has_value());
}

TEST(PipelineMessages, OutputDeltaRoundTrip) {
    OutputDelta running;
    running.request_id = "cmpl-1-0";
    running.new_token_ids = {42};
    running.new_logprobs = {{42, -0.5f, {{42, -0.5f}, {7, -1.25f}}}};
    OutputDelta last;
    last.request_id = "x";
    last.new_token_ids = {1, 2};
    last.delta_text = "fin\xC3\xA9";
    last.finished = true;
    last.finish_reason = "stop";
    last.stop_reason = "###";
    last.num_cached_tokens = 16;
    OutputDelta failed;
    failed.request_id = "y";
    failed.finished = true;
    failed.finish_reason = "error";
    failed.error = "boom";
    for (const OutputDelta& d : {running, last, failed}) {
        const Json m = round_trip({{"type", kOutputs}, {"outputs", Json::array({to_json(d)})}});
        EXPECT_EQ(delta_from_json(m["outputs"][0]), d) << d.request_id;
    }
    // A running request's plain one-token delta (most of a step's) carries no map: four fields.
    OutputDelta plain;
    plain.request_id = "cmpl-2-0";
    plain.new_token_ids = {5};
    EXPECT_EQ(to_json(plain), Json::array({"cmpl-2-0", Json::array({5}), false, 0}));
}

TEST(PipelineMessages, EngineConfigRoundTrip) {
    EngineConfig c;
    c.model_dir = "/models/q";
    c.device = "cuda";
    c.max_num_seqs = 7;
    c.kv_cache_bytes = int64_t(3) << 32;
    c.enable_prefix_caching = false;
    c.use_multiprocess = true;
    c.seed = 99;
    const EngineConfig d = EngineConfig::from_json(Json::parse(c.to_json().dump()));
    EXPECT_EQ(d.to_json(), c.to_json());
    EXPECT_EQ(d.model_dir, "/models/q");
    EXPECT_EQ(d.kv_cache_bytes, c.kv_cache_bytes);
    EXPECT_TRUE(d.use_multiprocess);
}

TEST(PipelineMessages, GarbageIsAnError) {
    EXPECT_THROW(decode("\xc1 not msgpack"), Error);
    EXPECT_THROW(decode(encode(Json::array({1, 2}))), Error);  // not a map
    EXPECT_THROW(decode(encode({{"id", "no type"}})), Error);
    EXPECT_THROW(delta_from_json({{"id", "a map"}}), Error);
    EXPECT_THROW(delta_from_json(Json::array({"id", Json::array()})), Error);  // too short
}

// A stream of step outputs (as LLMEngine::step makes them) crosses the wire as deltas and comes
// back the same: each step's change, and the whole request in the final output.
TEST(PipelineMessages, DeltasRebuildTheOutputs) {
    std::vector<RequestOutput> stream;
    std::vector<int32_t> all_ids;
    std::vector<TokenLogprob> all_logprobs;
    std::string all_text;
    for (int i = 0; i < 4; ++i) {
        RequestOutput o;
        o.request_id = "r";
        o.num_prompt_tokens = 2;
        o.new_token_ids = {100 + i};
        o.new_logprobs = {{100 + i, -float(i), {}}};
        o.delta_text = std::string(1, char('a' + i));
        o.num_output_tokens = i + 1;
        o.num_cached_tokens = 1;
        o.finished = i == 3;
        o.finish_reason = o.finished ? "length" : "";
        all_ids.push_back(100 + i);
        all_logprobs.push_back(o.new_logprobs[0]);
        all_text += o.delta_text;
        if (o.finished) {
            o.prompt_token_ids = {5, 6};
            o.token_ids = all_ids;
            o.logprobs = all_logprobs;
            o.text = all_text;
        }
        stream.push_back(o);
    }
    OutputAssembler assembler;
    assembler.start("r", {5, 6});
    for (const RequestOutput& want : stream) {
        const OutputDelta d = delta_of(want);
        EXPECT_EQ(d.new_token_ids.size(), 1u);  // deltas only
        const std::optional<RequestOutput> got =
            assembler.apply(delta_from_json(round_trip({{"type", "o"}, {"d", to_json(d)}})["d"]));
        ASSERT_TRUE(got.has_value());
        EXPECT_EQ(got->new_token_ids, want.new_token_ids);
        EXPECT_EQ(got->new_logprobs, want.new_logprobs);
        EXPECT_EQ(got->delta_text, want.delta_text);
        EXPECT_EQ(got->num_output_tokens, want.num_output_tokens);
        EXPECT_EQ(got->num_prompt_tokens, want.num_prompt_tokens);
        EXPECT_EQ(got->token_ids, want.token_ids);
        EXPECT_EQ(got->text, want.text);
        EXPECT_EQ(got->prompt_token_ids, want.prompt_token_ids);
        EXPECT_EQ(got->logprobs, want.logprobs);
        EXPECT_EQ(got->finish_reason, want.finish_reason);
    }
    EXPECT_FALSE(assembler.apply(delta_of(stream.back())).has_value());  // forgotten once finished
}

// ---- An LLMEngine with detokenize = false, then the detokenizer stage, equals one LLMEngine.

struct Case {
    Prompt prompt;
    SamplingParams params;
};

// Single process: LLMEngine::generate.
std::vector<RequestOutput> single_process(const EngineConfig& config,
                                          const std::vector<Case>& cases) {
    LLMEngine engine(config);
    std::vector<Prompt> prompts;
    std::vector<SamplingParams> params;
    for (const Case& c : cases) prompts.push_back(c.prompt), params.push_back(c.params);
    return engine.generate(prompts, params);
}

// The pipeline's data path in one thread: engine core deltas -> MessagePack -> detokenizer
// stage -> MessagePack -> assembler. Aborts asked by the stage reach the engine `delay`
// steps later, as they would across processes (the engine keeps generating meanwhile).
std::vector<RequestOutput> pipeline_in_one_process(EngineConfig config,
                                                   const std::vector<Case>& cases, int delay) {
    config.detokenize = false;
    LLMEngine engine(config);
    const std::optional<Tokenizer> tokenizer = Tokenizer::load(config.model_dir);
    PipelineDetokenizer detokenizer(&*tokenizer, engine.stop_rules());
    OutputAssembler assembler;
    std::vector<RequestOutput> results(cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
        const std::string id = std::to_string(i);
        Prompt ids = cases[i].prompt;
        if (ids.token_ids.empty())
            ids = Prompt::from_ids(tokenizer->encode(ids.text));  // the tokenizer process
        engine.add_request(ids, cases[i].params, id);
        detokenizer.add(id,
                        params_from_json(round_trip(
                            {{"type", kAccepted}, {"p", to_json(cases[i].params)}})["p"]),
                        int64_t(ids.token_ids.size()));
        assembler.start(id, ids.token_ids);
    }
    std::deque<std::vector<std::string>> aborts(size_t(delay) + 1);
    std::set<std::string> ended;
    while (engine.has_unfinished()) {
        for (const std::string& id : aborts.front()) engine.abort(id);
        aborts.pop_front();
        aborts.emplace_back();
        for (const RequestOutput& out : engine.step()) {
            EXPECT_TRUE(out.text.empty() && out.delta_text.empty())
                << "the engine core makes no text";
            const Json wire = round_trip({{"type", kOutputs}, {"d", to_json(delta_of(out))}});
            PipelineDetokenizer::Result r = detokenizer.process(delta_from_json(wire["d"]));
            if (r.abort_in_engine) aborts.back().push_back(out.request_id);
            if (!r.delta) continue;
            EXPECT_FALSE(ended.count(r.delta->request_id))
                << "nothing after a request's final delta";
            if (r.delta->finished) ended.insert(r.delta->request_id);
            const Json back = round_trip({{"type", kOutputs}, {"d", to_json(*r.delta)}});
            if (std::optional<RequestOutput> whole = assembler.apply(delta_from_json(back["d"]));
                whole && whole->finished)
                results[std::stoul(whole->request_id)] = *whole;
        }
    }
    EXPECT_EQ(detokenizer.num_requests(), 0u) << "every request forgotten";
    return results;
}

EngineConfig demo_config() {
    EngineConfig c;
    c.model_dir = (kFixtures / "qwen3-demo").string();
    c.max_model_len = 256;
    c.num_pages = 64;
    return c;
}

SamplingParams greedy(int64_t max_tokens) {
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = max_tokens;
    return p;
}

void expect_same(const std::vector<RequestOutput>& want, const std::vector<RequestOutput>& got) {
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) {
        SCOPED_TRACE("request " + std::to_string(i));
        EXPECT_EQ(got[i].token_ids, want[i].token_ids);
        EXPECT_EQ(got[i].text, want[i].text);
        EXPECT_EQ(got[i].finish_reason, want[i].finish_reason);
        EXPECT_EQ(got[i].stop_reason, want[i].stop_reason);
        EXPECT_EQ(got[i].prompt_token_ids, want[i].prompt_token_ids);
        EXPECT_EQ(got[i].num_prompt_tokens, want[i].num_prompt_tokens);
        EXPECT_EQ(got[i].num_cached_tokens, want[i].num_cached_tokens);
        ASSERT_EQ(got[i].logprobs.size(), want[i].logprobs.size());
        for (size_t k = 0; k < want[i].logprobs.size(); ++k) {
            EXPECT_EQ(got[i].logprobs[k].token, want[i].logprobs[k].token);
            EXPECT_EQ(got[i].logprobs[k].logprob, want[i].logprobs[k].logprob);
            EXPECT_EQ(got[i].logprobs[k].top, want[i].logprobs[k].top);
        }
    }
}

TEST(PipelineEquivalence, DetokenizerStageAfterTheEngineCoreEqualsOneProcess) {
    const EngineConfig config = demo_config();
    // First the plain continuations, to pick stop strings that really occur in them.
    const std::vector<Case> plain = {{Prompt::from_text("The capital of France is"), greedy(40)},
                                     {Prompt::from_text("Once upon a time"), greedy(40)}};
    const std::vector<RequestOutput> base = single_process(config, plain);
    const std::string& text0 = base[0].text;
    const std::string& text1 = base[1].text;
    ASSERT_GT(text0.size(), 30u);
    ASSERT_GT(text1.size(), 30u);

    std::vector<Case> cases = plain;
    auto add = [&](Prompt prompt, SamplingParams p) {
        cases.push_back({std::move(prompt), std::move(p)});
    };
    SamplingParams stop = greedy(40);
    stop.stop = {text0.substr(10, 3)};  // a stop string in the middle
    add(plain[0].prompt, stop);
    SamplingParams early = greedy(40);
    early.stop = {text1.substr(0, 2)};  // matches at once...
    add(plain[1].prompt, early);
    early.min_tokens = 6;  // ...unless min_tokens holds it off
    add(plain[1].prompt, early);
    SamplingParams two = greedy(40);
    two.stop = {"never there", text1.substr(text1.size() - 8, 5)};
    two.logprobs = 3;
    add(plain[1].prompt, two);
    SamplingParams sampled;
    sampled.temperature = 0.9;
    sampled.top_p = 0.95;
    sampled.seed = 1234;
    sampled.max_tokens = 30;
    sampled.logprobs = 2;
    sampled.stop = {text0.substr(20, 2)};
    add(plain[0].prompt, sampled);
    SamplingParams stop_token = greedy(40);
    stop_token.stop_token_ids = {base[0].token_ids[5]};
    stop_token.skip_special_tokens = false;
    add(plain[0].prompt, stop_token);
    SamplingParams eos = greedy(20);
    eos.ignore_eos = true;
    add(Prompt::from_ids({base[0].prompt_token_ids}), eos);

    const std::vector<RequestOutput> want = single_process(config, cases);
    EXPECT_EQ(want[2].finish_reason, "stop");
    EXPECT_EQ(want[2].stop_reason, stop.stop[0]);
    EXPECT_LT(want[3].token_ids.size(), 6u);
    EXPECT_GE(want[4].token_ids.size(), 6u) << "min_tokens holds stop strings off";
    for (int delay : {0, 1, 3}) {
        SCOPED_TRACE("abort delay " + std::to_string(delay));
        expect_same(want, pipeline_in_one_process(config, cases, delay));
    }
}

}  // namespace
