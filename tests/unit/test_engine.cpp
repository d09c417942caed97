// LLMEngine on the CPU backend with the Hugging Face fixtures: greedy outputs equal Hugging
// Face's, and stay the same whatever the batching, chunking, caching or preemption.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/json.h"
#include "engine/llm_engine.h"
#include "engine/request_inputs.h"
#include "engine_testing.h"

using namespace miniinfer;
using miniinfer::testing::greedy;
using ::testing::HasSubstr;

namespace {
const std::filesystem::path kFixtures = MINIINFER_FIXTURES;

struct Reference {
    std::vector<std::vector<int32_t>> prompts, greedy;
};

Reference load_reference(const std::string& name) {
    Json json = read_json_file(kFixtures / name / "reference.json");
    Reference ref;
    for (const Json& p : json["prompts"]) {
        ref.prompts.push_back(p["ids"].get<std::vector<int32_t>>());
        ref.greedy.push_back(p["greedy"].get<std::vector<int32_t>>());
    }
    return ref;
}

EngineConfig config_for(const std::string& name) {
    EngineConfig c;
    c.model_dir = (kFixtures / name).string();
    c.max_model_len = 256;
    c.num_pages = 64;
    return c;
}

std::vector<Prompt> prompts_of(const Reference& ref) {
    std::vector<Prompt> out;
    for (const auto& ids : ref.prompts) out.push_back(Prompt::from_ids(ids));
    return out;
}

std::vector<std::vector<int32_t>> tokens_of(const std::vector<RequestOutput>& outs) {
    std::vector<std::vector<int32_t>> out;
    for (const auto& o : outs) out.push_back(o.token_ids);
    return out;
}
}  // namespace

class EngineFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineFixture, GreedyMatchesHuggingFaceInEveryBatchingMode) {
    const Reference ref = load_reference(GetParam());
    const std::vector<Prompt> prompts = prompts_of(ref);
    struct Mode {
        const char* name;
        int64_t budget, num_pages, page_size;
        bool caching;
    };
    for (Mode m : {Mode{"together", 2048, 64, 16, true},
                   {"chunked budget 5", 5, 64, 16, true},
                   {"no prefix cache, page 3", 2048, 400, 3, false},
                   {"tiny pool (preemption)", 2048, 20, 4, true}}) {
        EngineConfig c = config_for(GetParam());
        c.max_num_batched_tokens = m.budget;
        c.num_pages = m.num_pages;
        c.page_size = m.page_size;
        c.enable_prefix_caching = m.caching;
        c.max_model_len = 80;
        LLMEngine engine(c);
        // The tiny pool gets every prompt three times, so requests keep evicting each other.
        const int copies = m.num_pages == 20 ? 3 : 1;
        std::vector<Prompt> all;
        std::vector<std::vector<int32_t>> expected;
        for (int k = 0; k < copies; ++k) {
            all.insert(all.end(), prompts.begin(), prompts.end());
            expected.insert(expected.end(), ref.greedy.begin(), ref.greedy.end());
        }
        auto outs = engine.generate(all, greedy(32));
        EXPECT_EQ(tokens_of(outs), expected) << m.name;
        for (const auto& o : outs) EXPECT_EQ(o.finish_reason, "length") << m.name;
        if (m.num_pages == 20) {  // 37 pages of demand in 20: preempted again and again
            EXPECT_GE(engine.scheduler().num_preemptions(), 2);
            std::printf("[ %s: %lld preemptions ]\n", m.name,
                        (long long)engine.scheduler().num_preemptions());
        }
    }
    // One at a time.
    LLMEngine engine(config_for(GetParam()));
    for (size_t i = 0; i < prompts.size(); ++i)
        EXPECT_EQ(engine.generate({prompts[i]}, greedy(32))[0].token_ids, ref.greedy[i])
            << "alone " << i;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineFixture,
                         ::testing::Values("qwen2-tiny", "qwen3-tiny", "qwen3-moe-tiny",
                                           "qwen3-moe-wide"),
                         [](const auto& info) {
                             std::string s = info.param;
                             std::replace(s.begin(), s.end(), '-', '_');
                             return s;
                         });

TEST(Engine, PrefixCacheReusesPagesAndReportsCachedTokens) {
    const Reference ref = load_reference("qwen3-tiny");
    std::vector<int32_t> long_prompt = ref.prompts[2];  // 37 tokens: 2 full pages of 16
    for (bool caching : {true, false}) {
        EngineConfig c = config_for("qwen3-tiny");
        c.enable_prefix_caching = caching;
        LLMEngine engine(c);
        auto first = engine.generate({Prompt::from_ids(long_prompt)}, greedy(32))[0];
        auto second = engine.generate({Prompt::from_ids(long_prompt)}, greedy(32))[0];
        EXPECT_EQ(first.token_ids, ref.greedy[2]);
        EXPECT_EQ(second.token_ids, ref.greedy[2]);
        EXPECT_EQ(first.num_cached_tokens, 0);
        // The first request cached its prompt and output pages: 69 tokens -> 4 full pages, of
        // which the 37-token prompt can use 2 (32 tokens).
        EXPECT_EQ(second.num_cached_tokens, caching ? 32 : 0);
    }
}

TEST(Engine, SeededSamplingIsIndependentOfTheBatch) {
    const Reference ref = load_reference("qwen3-tiny");
    SamplingParams p;
    p.temperature = 1.5;
    p.top_p = 0.9;
    p.seed = 1234;
    p.max_tokens = 20;
    p.ignore_eos = true;
    LLMEngine a(config_for("qwen3-tiny"));
    auto alone = a.generate({Prompt::from_ids(ref.prompts[1])}, p)[0].token_ids;
    LLMEngine b(config_for("qwen3-tiny"));
    SamplingParams other = p;
    other.seed = 99;
    auto batch = b.generate({Prompt::from_ids(ref.prompts[2]), Prompt::from_ids(ref.prompts[1]),
                             Prompt::from_ids(ref.prompts[0])},
                            std::vector<SamplingParams>{other, p, other});
    EXPECT_EQ(batch[1].token_ids, alone);
    EXPECT_NE(batch[0].token_ids, batch[2].token_ids);  // different prompts (and streams) differ
    SamplingParams p2 = p;
    p2.seed = 4321;
    EXPECT_NE(a.generate({Prompt::from_ids(ref.prompts[1])}, p2)[0].token_ids, alone);
}

TEST(Engine, BadRequestsFailAloneWhileOthersFinish) {
    const Reference ref = load_reference("qwen2-tiny");
    LLMEngine engine(config_for("qwen2-tiny"));
    SamplingParams nan_temp = greedy(8), good = greedy(8), too_long = greedy(250);
    nan_temp.temperature = std::nan("");
    auto outs = engine.generate(
        {Prompt::from_ids(ref.prompts[1]), Prompt::from_ids(ref.prompts[1]),
         Prompt::from_ids(ref.prompts[2]), Prompt::from_ids({}), Prompt::from_ids({7, 9999})},
        std::vector<SamplingParams>{nan_temp, good, too_long, good, good});
    EXPECT_EQ(outs[0].finish_reason, "error");
    EXPECT_THAT(outs[0].error, HasSubstr("temperature"));
    EXPECT_EQ(outs[1].finish_reason, "length");
    EXPECT_EQ(outs[1].token_ids,
              std::vector<int32_t>(ref.greedy[1].begin(), ref.greedy[1].begin() + 8));
    EXPECT_EQ(outs[2].finish_reason, "error");
    EXPECT_THAT(outs[2].error,
                HasSubstr("maximum context length is 256 tokens, but 287 were requested"));
    EXPECT_THAT(outs[3].error, HasSubstr("empty"));
    EXPECT_THAT(outs[4].error, HasSubstr("9999"));
}

TEST(Engine, StopTokensMaxTokensAndAbort) {
    const Reference ref = load_reference("qwen3-tiny");
    LLMEngine engine(config_for("qwen3-tiny"));
    SamplingParams p = greedy(32);
    p.stop_token_ids = {ref.greedy[2][5]};
    auto out = engine.generate({Prompt::from_ids(ref.prompts[2])}, p)[0];
    EXPECT_EQ(out.finish_reason, "stop");
    const auto stop_at = std::find(ref.greedy[2].begin(), ref.greedy[2].end(), ref.greedy[2][5]) -
                         ref.greedy[2].begin();
    EXPECT_EQ(out.token_ids,
              std::vector<int32_t>(ref.greedy[2].begin(), ref.greedy[2].begin() + stop_at + 1));
    p.min_tokens = 10;  // the stop token no longer ends it early
    out = engine.generate({Prompt::from_ids(ref.prompts[2])}, p)[0];
    EXPECT_GE(out.token_ids.size(), 10u);

    // Streaming with abort: the aborted request's pages come back.
    const int32_t free_before = engine.scheduler().allocator().num_free();
    engine.add_request(Prompt::from_ids(ref.prompts[2]), greedy(32), "a");
    engine.add_request(Prompt::from_ids(ref.prompts[1]), greedy(4), "b");
    engine.step();
    engine.step();
    engine.abort("a");
    std::map<std::string, RequestOutput> last;
    while (engine.has_unfinished())
        for (auto& o : engine.step()) last[o.request_id] = o;
    EXPECT_EQ(last["a"].finish_reason, "abort");
    EXPECT_EQ(last["b"].finish_reason, "length");
    EXPECT_EQ(last["b"].token_ids.size(), 4u);
    engine.scheduler().check_invariants();
    EXPECT_EQ(engine.scheduler().kv_usage(), 0.0);
    EXPECT_GE(engine.scheduler().allocator().num_free() +
                  engine.scheduler().prefix_cache()->num_cached_pages(),
              free_before);
}

TEST(Engine, TextPromptsStopStringsAndEos) {
    EngineConfig c = config_for("qwen3-demo");
    LLMEngine engine(c);
    ASSERT_NE(engine.tokenizer(), nullptr);
    // EOS: generation_config's 151645 and 151643 and config.json's; tokenizer_config's <|im_end|>.
    EXPECT_THAT(engine.eos_token_ids(), ::testing::UnorderedElementsAre(151645, 151643));
    const Reference ref = load_reference("qwen3-demo");
    SamplingParams p = greedy(32);
    auto out = engine.generate({Prompt::from_text("The capital of France is")}, p)[0];
    EXPECT_EQ(out.prompt_token_ids, ref.prompts[1]);
    EXPECT_EQ(out.token_ids, ref.greedy[1]);
    EXPECT_EQ(out.text, engine.tokenizer()->decode(out.token_ids, true));
    // A stop string taken from the middle of that text ends the request there.
    ASSERT_GT(out.text.size(), 12u);
    SamplingParams s = p;
    s.stop = {out.text.substr(6, 4)};
    auto stopped = engine.generate({Prompt::from_text("The capital of France is")}, s)[0];
    EXPECT_EQ(stopped.finish_reason, "stop");
    EXPECT_EQ(stopped.stop_reason, s.stop[0]);
    EXPECT_EQ(stopped.text, out.text.substr(0, out.text.find(s.stop[0])));
}

// --generation-config: auto reads the model's sampling defaults (the demo's temperature 0.6,
// top_k 20, top_p 0.95), vllm ignores them (but keeps the file's EOS ids), a folder's file
// replaces them, and anything else is refused when the engine starts.
TEST(Engine, GenerationConfigChoosesTheSamplingDefaults) {
    EngineConfig c = config_for("qwen3-demo");
    {
        LLMEngine auto_engine(c);
        EXPECT_DOUBLE_EQ(auto_engine.default_params().temperature, 0.6);
        EXPECT_EQ(auto_engine.default_params().top_k, 20);
    }
    c.generation_config = "vllm";
    {
        LLMEngine vllm_engine(c);
        EXPECT_DOUBLE_EQ(vllm_engine.default_params().temperature, 1.0);
        EXPECT_EQ(vllm_engine.default_params().top_k, SamplingParams().top_k);
        EXPECT_THAT(vllm_engine.eos_token_ids(), ::testing::Contains(151643));  // from the file
    }
    const auto dir = std::filesystem::temp_directory_path() / "miniinfer_test_generation_config";
    std::filesystem::create_directories(dir);
    { std::ofstream(dir / "generation_config.json") << R"({"temperature": 0.3, "top_p": 0.5})"; }
    c.generation_config = dir.string();
    {
        LLMEngine folder_engine(c);
        EXPECT_DOUBLE_EQ(folder_engine.default_params().temperature, 0.3);
        EXPECT_DOUBLE_EQ(folder_engine.default_params().top_p, 0.5);
    }
    std::filesystem::remove_all(dir);
    c.generation_config = dir.string();  // now missing
    EXPECT_THROW({ LLMEngine bad(c); }, Error);
}

// Overlap scheduling (the CPU runner's default) gives exactly the plain loop's outputs: greedy,
// seeded sampling, stop strings, stop tokens, EOS, min_tokens, logprobs and penalties (which
// make a step wait for the previous one's tokens), all in one batch on a small pool.
TEST(Engine, OverlapSchedulingGivesThePlainLoopsOutputs) {
    EngineConfig c = config_for("qwen3-demo");
    c.num_pages = 24;  // some preemption
    c.page_size = 4;
    c.max_num_batched_tokens = 24;
    const std::vector<std::string> texts = {"The capital of France is", "Once upon a time",
                                            "1, 2, 3, 4,", "def main():"};
    std::vector<Prompt> prompts;
    std::vector<SamplingParams> params;
    for (size_t i = 0; i < 12; ++i) {
        prompts.push_back(Prompt::from_text(texts[i % texts.size()]));
        SamplingParams p;
        p.max_tokens = 8 + int64_t(i) * 2;
        p.seed = 100 + i;
        p.temperature = i % 3 == 0 ? 0.0 : 0.9;
        if (i % 4 == 1) p.stop = {"e", "a "};
        if (i % 4 == 2) p.stop_token_ids = {11, 13};
        if (i % 5 == 3) p.logprobs = 2;
        if (i % 6 == 4) p.repetition_penalty = 1.3;
        if (i % 6 == 5) p.frequency_penalty = 0.5;
        if (i % 7 == 6) p.min_tokens = 5;
        if (i % 4 == 3) p.bad_words = {" the", "capital of"};  // multi-token: waits for values
        if (i % 5 == 1) p.logit_bias = {{11, 5.f}};
        params.push_back(p);
    }
    std::vector<RequestOutput> outs[2];
    for (bool disable : {true, false}) {
        c.disable_overlap = disable;
        LLMEngine engine(c);
        EXPECT_EQ(engine.overlapping(), !disable);
        outs[disable ? 0 : 1] = engine.generate(prompts, params);
        engine.scheduler().check_invariants();
        EXPECT_EQ(engine.scheduler().kv_usage(), 0.0);
    }
    int64_t stopped = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
        const RequestOutput &plain = outs[0][i], &overlap = outs[1][i];
        EXPECT_EQ(overlap.token_ids, plain.token_ids) << i;
        EXPECT_EQ(overlap.text, plain.text) << i;
        EXPECT_EQ(overlap.finish_reason, plain.finish_reason) << i;
        EXPECT_EQ(overlap.stop_reason, plain.stop_reason) << i;
        EXPECT_EQ(overlap.logprobs, plain.logprobs) << i;
        EXPECT_EQ(overlap.num_cached_tokens, plain.num_cached_tokens) << i;
        stopped += plain.finish_reason == "stop";
    }
    EXPECT_GT(stopped, 0) << "some requests should end before max_tokens";
}

// truncate_prompt_tokens keeps the prompt's last k ids (max_model_len for -1), before the
// length checks: the output is the truncated prompt's.
TEST(Engine, TruncatePromptTokensKeepsTheLastTokens) {
    const Reference ref = load_reference("qwen3-tiny");
    LLMEngine engine(config_for("qwen3-tiny"));
    const std::vector<int32_t>& prompt = ref.prompts[2];
    ASSERT_GT(prompt.size(), 4u);
    const std::vector<int32_t> tail(prompt.end() - 4, prompt.end());
    SamplingParams p = greedy(6);
    p.truncate_prompt_tokens = 4;
    const RequestOutput cut = engine.generate({Prompt::from_ids(prompt)}, p)[0];
    EXPECT_EQ(cut.prompt_token_ids, tail);
    EXPECT_EQ(cut.token_ids, engine.generate({Prompt::from_ids(tail)}, greedy(6))[0].token_ids);
    p.truncate_prompt_tokens = 100;  // longer than the prompt: all of it
    EXPECT_EQ(engine.generate({Prompt::from_ids(prompt)}, p)[0].prompt_token_ids, prompt);
    p.truncate_prompt_tokens = 257;  // over max_model_len: an error, as vLLM
    EXPECT_THAT(engine.generate({Prompt::from_ids(prompt)}, p)[0].error,
                HasSubstr("'truncate_prompt_tokens' (257) is greater than max_model_len (256)"));

    const std::vector<int32_t> long_prompt(300, 7);  // over max_model_len 256
    p.truncate_prompt_tokens = 200;
    const RequestOutput long_cut = engine.generate({Prompt::from_ids(long_prompt)}, p)[0];
    EXPECT_EQ(long_cut.finish_reason, "length");
    EXPECT_EQ(long_cut.prompt_token_ids.size(), 200u);
    p.truncate_prompt_tokens = -1;  // 256 kept: no room left for an output token
    EXPECT_THAT(engine.generate({Prompt::from_ids(long_prompt)}, p)[0].error,
                HasSubstr("maximum context length is 256 tokens, but 262 were requested"));
}

// bad_words resolved as vLLM does: the word without its leading spaces, and with one space when
// that is a different token sequence of the same length.
TEST(Engine, BadWordsAreResolvedWithTheTokenizer) {
    const std::optional<Tokenizer> tokenizer = load_tokenizer(kFixtures / "qwen3-demo");
    ASSERT_TRUE(tokenizer);
    const EncodeOptions plain{.add_special_tokens = false};
    SamplingParams p;
    p.bad_words = {"  Paris", "capital of"};
    p.bad_words_token_ids = {{1, 2, 3}};  // replaced
    resolve_bad_words(p, &*tokenizer);
    std::vector<std::vector<int32_t>> want;
    for (const char* word : {"Paris", "capital of"}) {
        const std::vector<int32_t> bare = tokenizer->encode(word, plain);
        const std::vector<int32_t> spaced = tokenizer->encode(std::string(" ") + word, plain);
        want.push_back(bare);
        if (spaced.size() == bare.size() && spaced[0] != bare[0]) want.push_back(spaced);
    }
    EXPECT_EQ(p.bad_words_token_ids, want);
    EXPECT_EQ(want.size(), 4u);  // Qwen's BPE has " Paris" and " capital" as words of their own
    const auto resolved = p.bad_words_token_ids;
    resolve_bad_words(p, &*tokenizer);  // twice: the same ids
    EXPECT_EQ(p.bad_words_token_ids, resolved);

    SamplingParams blank;
    blank.bad_words = {"   "};
    EXPECT_THROW(resolve_bad_words(blank, &*tokenizer), Error);
    SamplingParams none;
    resolve_bad_words(none, nullptr);  // no bad words: no tokenizer needed
    EXPECT_TRUE(none.bad_words_token_ids.empty());
}

// The greedy text loses a banned word; a two-token sequence is banned only after its first
// token; without a tokenizer, bad_words is an error for that request.
TEST(Engine, BadWordsChangeTheGreedyOutput) {
    LLMEngine engine(config_for("qwen3-demo"));
    const Prompt prompt = Prompt::from_text("The capital of France is");
    const RequestOutput free = engine.generate({prompt}, greedy(12))[0];
    ASSERT_GE(free.token_ids.size(), 3u);
    const std::string first_word = engine.tokenizer()->decode({&free.token_ids[0], 1});
    SamplingParams p = greedy(12);
    p.bad_words = {first_word};
    const RequestOutput banned = engine.generate({prompt}, p)[0];
    EXPECT_NE(banned.token_ids[0], free.token_ids[0]) << "'" << first_word << "'";

    SamplingParams seq = greedy(12);
    seq.bad_words_token_ids = {{free.token_ids[0], free.token_ids[1]}, {12345, free.token_ids[0]}};
    const RequestOutput after = engine.generate({prompt}, seq)[0];
    EXPECT_EQ(after.token_ids[0], free.token_ids[0]);
    EXPECT_NE(after.token_ids[1], free.token_ids[1]);

    LLMEngine no_tokenizer(config_for("qwen3-tiny"));
    const RequestOutput err =
        no_tokenizer.generate({Prompt::from_ids(load_reference("qwen3-tiny").prompts[0])}, p)[0];
    EXPECT_EQ(err.finish_reason, "error");
    EXPECT_THAT(err.error, HasSubstr("bad_words needs the model's tokenizer"));
}

// logit_bias and allowed_token_ids through the engine: +100 forces a token at temperature 0,
// allowed ids hold every random draw.
TEST(Engine, LogitBiasAndAllowedTokenIds) {
    const Reference ref = load_reference("qwen3-tiny");
    LLMEngine engine(config_for("qwen3-tiny"));
    SamplingParams p = greedy(5);
    p.logit_bias = {{42, 100.f}};
    EXPECT_EQ(engine.generate({Prompt::from_ids(ref.prompts[0])}, p)[0].token_ids,
              std::vector<int32_t>(5, 42));
    SamplingParams r;
    r.temperature = 1.0;
    r.seed = 5;
    r.max_tokens = 16;
    r.ignore_eos = true;
    r.allowed_token_ids = std::vector<int64_t>{3, 17, 99};
    const RequestOutput out = engine.generate({Prompt::from_ids(ref.prompts[1])}, r)[0];
    EXPECT_EQ(out.token_ids.size(), 16u);
    for (int32_t t : out.token_ids) EXPECT_TRUE(t == 3 || t == 17 || t == 99) << t;
}
