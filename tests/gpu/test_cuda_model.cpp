// The whole dense model on the GPU against the CPU model and Hugging Face's fixtures
// (teacher-forced: cuda_model_testing.h), the runner's memory budget, penalised sampling,
// the engine end to end with graphs, and dummy weights made on the GPU. Qwen3-MoE:
// test_cuda_moe_model.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <regex>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "core/json.h"
#include "cuda_model_testing.h"
#include "engine/cuda_model_runner.h"
#include "engine/kernel_profiler.h"
#include "engine/llm_engine.h"
#include "gpu_testing.h"
#include "models/cuda_model.h"
#include "models/sequence_runner.h"

using namespace miniinfer;
using namespace miniinfer::model_testing;

class CudaModelVsHf : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaModelVsHf, TeacherForcedArgmaxMatchesHuggingFace) {
    REQUIRE_GPU();
    expect_teacher_forced_matches(GetParam());
}

// An FP8 KV cache (--kv-cache-dtype fp8) against the CPU model keeping the same FP8 K/V: free
// greedy decoding, prefill and decode, every token the CPU's argmax or a near-tie.
TEST_P(CudaModelVsHf, Fp8KvCacheGreedyAgreesWithCpu) {
    REQUIRE_GPU();
    expect_greedy_decode_agrees_with_cpu(GetParam(), 24, "fp8");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaModelVsHf,
                         ::testing::Values("qwen2-tiny", "qwen3-tiny", "qwen3-demo", "qwen3-yarn",
                                           "qwen3-tiny-fp8"),
                         fixture_param_name);

// The KV cache is sized after the CUDA graphs' memory is measured: once the runner has built
// everything (weights, activations, graphs, KV pages), the card's used memory stays within
// gpu_memory_utilization. When nothing is left for the KV cache, construction throws an
// Error that gives the numbers in MiB.
TEST(CudaRunner, StartupMemoryStaysWithinUtilization) {
    REQUIRE_GPU();
    ModelConfig config = ModelConfig::load(kFixtures / "qwen3-tiny");
    const double utilization = 0.2;
    {
        CudaModelRunner gpu(runner_config(64, 1024, 0, utilization), config,
                            bf16_weights(config, "qwen3-tiny"));
        size_t free = 0, total = 0;
        MI_CUDA_CHECK(cudaMemGetInfo(&free, &total));
        std::printf("[ used %.0f MiB of %.0f MiB allowed; %lld KV pages ]\n",
                    double(total - free) / 1048576.0, utilization * double(total) / 1048576.0,
                    (long long)gpu.num_pages());
        EXPECT_LE(double(total - free), utilization * double(total));
        EXPECT_GT(gpu.num_pages(), 1000);  // and it did not leave most of the budget unused
    }
    try {
        CudaModelRunner gpu(runner_config(64, 1024, 0, 0.0001), config,
                            bf16_weights(config, "qwen3-tiny"));
        ADD_FAILURE() << "a runner was built in 0.01% of the card";
    } catch (const Error& e) {
        const std::string message = e.what();
        std::printf("[ %s ]\n", message.c_str());
        EXPECT_NE(message.find("does not fit"), std::string::npos) << message;
        EXPECT_NE(message.find("MiB for CUDA graphs"), std::string::npos) << message;
    }
}

// Penalised rows are sampled on the GPU (penalty kernel, then the sampler with the raw logits
// for logprobs) and give the CPU sampler's tokens and logprobs on the same raw logits. The same
// batch runs twice: unpenalised first, to read the raw logits (the forward is deterministic);
// the "generated" tokens and stop ids are then each row's raw favourite, so the penalties and
// masks hit the tokens that decide the answer.
TEST(CudaRunner, PenalisedRowsMatchCpuSampler) {
    REQUIRE_GPU();
    ModelConfig config = ModelConfig::load(kFixtures / "qwen3-tiny");
    CudaModelRunner gpu(runner_config(16, 256, 64), config, bf16_weights(config, "qwen3-tiny"));
    const int64_t num_rows = 8, vocab = config.vocab_size;
    std::vector<Request> requests(static_cast<size_t>(num_rows));
    Batch b;
    int32_t next_page = 0;
    for (int64_t i = 0; i < num_rows; ++i) {
        Request& r = requests[size_t(i)];
        for (int64_t t = 0; t < 20 + 3 * i; ++t)
            r.prompt_ids.push_back(int32_t((t * 37 + i * 101) % vocab));
        for (int k = 0; k < 3; ++k) r.pages.push_back(next_page++);  // 3 x 16 >= 41 tokens
        b.seqs.push_back({&r, 0, int64_t(r.prompt_ids.size()), true});
    }
    build_batch(b, 16);
    const std::vector<int64_t> eos = {vocab - 1};
    std::vector<SamplingParams> plain(static_cast<size_t>(num_rows)),
        penalised(static_cast<size_t>(num_rows));
    std::vector<std::vector<int32_t>> outputs(static_cast<size_t>(num_rows));
    auto inputs_for = [&](const std::vector<SamplingParams>& params) {
        std::vector<SamplerInput> in(static_cast<size_t>(num_rows));
        for (size_t i = 0; i < in.size(); ++i) {
            in[i].params = &params[i];
            in[i].prompt_ids = requests[i].prompt_ids;
            in[i].output_ids = outputs[i];
            in[i].eos_ids = eos;
            in[i].seed = 1000 + i;
        }
        return in;
    };
    for (SamplingParams& p : plain) p.temperature = 0;
    std::vector<SamplerInput> raw_inputs = inputs_for(plain);
    gpu.run(b, raw_inputs);
    const Tensor raw = gpu.last_logits();  // [num_rows, vocab]
    for (int64_t i = 0; i < num_rows; ++i) {
        const float* row = raw.data<float>() + i * vocab;
        const int32_t top = int32_t(std::max_element(row, row + vocab) - row);
        outputs[size_t(i)] = {top, top, top, int32_t((top + 1) % vocab)};
        SamplingParams& p = penalised[size_t(i)];
        p.temperature = i % 2 ? 0.8 : 0.0;
        p.repetition_penalty = i % 3 == 0 ? 4.0 : 1.0;
        p.frequency_penalty = i % 4 == 1 ? 2.0 : 0.0;
        p.presence_penalty = i % 4 == 2 ? 2.0 : 0.0;
        if (i >= 6) p.min_tokens = 100, p.stop_token_ids = {top};  // masks EOS and the favourite
        if (i % 3 == 1) p.logprobs = 4;
    }
    std::vector<SamplerInput> inputs = inputs_for(penalised);
    const std::vector<SampledToken> got = gpu.run(b, inputs);
    raw_inputs = inputs_for(plain);  // the same outputs, unpenalised: what the raw logits give
    int64_t changed_by_penalties = 0;
    for (int64_t i = 0; i < num_rows; ++i) {
        inputs[size_t(i)].logits =
            std::span<const float>(raw.data<float>() + i * vocab, size_t(vocab));
        raw_inputs[size_t(i)].logits = inputs[size_t(i)].logits;
        const SampledToken want = sample(inputs[size_t(i)]);
        changed_by_penalties += want.token != sample(raw_inputs[size_t(i)]).token;
        EXPECT_EQ(got[size_t(i)].token, want.token) << "row " << i;
        EXPECT_NEAR(got[size_t(i)].logprob, want.logprob, 1e-4) << "row " << i;
        ASSERT_EQ(got[size_t(i)].top_logprobs.size(), want.top_logprobs.size()) << "row " << i;
        for (size_t k = 0; k < want.top_logprobs.size(); ++k) {
            EXPECT_EQ(got[size_t(i)].top_logprobs[k].first, want.top_logprobs[k].first)
                << "row " << i;
            EXPECT_NEAR(got[size_t(i)].top_logprobs[k].second, want.top_logprobs[k].second, 1e-4)
                << "row " << i;
        }
    }
    std::printf("[ penalties changed %lld of %lld tokens ]\n", (long long)changed_by_penalties,
                (long long)num_rows);
    // Row 6 is greedy with its favourite masked: its token must change, whatever the model.
    EXPECT_GT(changed_by_penalties, 0) << "the test's penalties changed no token";
}

namespace {

// The bundled demo model (real tokenizer, random weights) on the GPU, 8 sequences at a time.
EngineConfig demo_engine_config() {
    EngineConfig c;
    c.model_dir = (kFixtures / "qwen3-demo").string();
    c.device = "cuda";
    c.max_model_len = 512;
    c.max_num_seqs = 8;
    c.gpu_memory_utilization = 0.3;
    return c;
}

}  // namespace

// The engine end to end on the GPU: text in, greedy tokens out, compared with Hugging Face.
TEST(CudaEngine, DemoGreedyAgreesWithHuggingFace) {
    REQUIRE_GPU();
    LLMEngine engine(demo_engine_config());
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = 32;
    p.ignore_eos = true;
    std::vector<Prompt> prompts;
    std::vector<Case> cases = cases_of("qwen3-demo");
    for (const Case& k : cases)
        prompts.push_back(
            Prompt::from_ids({k.sequence.begin(), k.sequence.begin() + long(k.prompt_len)}));
    auto outs = engine.generate(prompts, p);
    for (size_t i = 0; i < outs.size(); ++i) {
        const std::vector<int32_t> ref(cases[i].sequence.begin() + long(cases[i].prompt_len),
                                       cases[i].sequence.end());
        size_t same = 0;
        while (same < ref.size() && same < outs[i].token_ids.size() &&
               ref[same] == outs[i].token_ids[same])
            ++same;
        std::printf("[ demo prompt %zu: first %zu of 32 greedy tokens equal Hugging Face's ]\n", i,
                    same);
        EXPECT_EQ(outs[i].token_ids.size(), 32u);
        EXPECT_GE(same, 1u) << "the first token after the prompt differs";
    }
}

// Structured output on the GPU: the grammar's masks reach the CUDA sampler, so the random demo
// model (which left alone writes gibberish) writes documents of the schema and the regex, ending
// with EOS; greedy and seeded rows and an unconstrained row share the batches.
TEST(CudaEngine, StructuredOutputFollowsSchemaAndRegex) {
    REQUIRE_GPU();
    LLMEngine engine(demo_engine_config());
    const std::string schema = R"({"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 120}},
        "required": ["name", "age"], "additionalProperties": false})";
    std::vector<SamplingParams> params;
    for (int i = 0; i < 4; ++i) {
        SamplingParams p;
        p.max_tokens = 200;
        p.temperature = i % 2 ? 1.0 : 0.0;
        p.seed = uint64_t(i);
        p.structured_outputs.emplace();
        p.structured_outputs->kind =
            i < 2 ? StructuredOutput::Kind::kJsonSchema : StructuredOutput::Kind::kRegex;
        p.structured_outputs->text = i < 2 ? schema : "[a-z]{3}-[0-9]{2,4}";
        params.push_back(p);
    }
    SamplingParams free;
    free.max_tokens = 20;
    free.temperature = 0;
    params.push_back(free);
    std::vector<Prompt> prompts;
    for (size_t i = 0; i < params.size(); ++i)
        prompts.push_back(Prompt::from_text("Reply in JSON, request " + std::to_string(i)));
    const std::vector<RequestOutput> outs = engine.generate(prompts, params);
    for (size_t i = 0; i < 4; ++i) {
        const RequestOutput& o = outs[i];
        std::printf("[ request %zu: %s ]\n", i, o.text.c_str());
        EXPECT_EQ(o.finish_reason, "stop") << o.error;
        if (i < 2) {
            ASSERT_TRUE(Json::accept(o.text)) << o.text;
            const Json doc = Json::parse(o.text);
            EXPECT_TRUE(doc.at("name").is_string() && doc.at("age").is_number_integer()) << o.text;
            EXPECT_EQ(doc.size(), 2u) << o.text;
        } else {
            EXPECT_TRUE(std::regex_match(o.text, std::regex("[a-z]{3}-[0-9]{2,4}"))) << o.text;
        }
    }
    EXPECT_EQ(outs.back().finish_reason, "length");
}

// Decode steps replayed from CUDA graphs (padded to the next captured batch size) give the same
// tokens as eager steps, greedy and seeded sampling alike.
TEST(CudaEngine, GraphReplayEqualsEager) {
    REQUIRE_GPU();
    // 5 requests: replays pad to 8.
    expect_graph_replay_equals_eager(
        "qwen3-demo", {Prompt::from_text("Once upon a time"), Prompt::from_text("1, 2, 3, 4,")},
        100);
}

// --load-format dummy on the GPU: the loader's layout filled on the device. Norms are 1,
// matrices N(0, 1/in) (checked on the big ones), a world-2 shard holds exactly the world-1
// tensor's values at its positions, the same seed gives the same numbers, and a runner built on
// them produces finite logits.
TEST(CudaDummyWeights, LayoutValuesShardsAndAStep) {
    REQUIRE_GPU();
    const ModelConfig config = ModelConfig::load(kFixtures / "qwen3-tiny");
    const WeightTarget whole{.dtype = DType::kBF16};
    ModelWeights w = dummy_cuda_weights(config, 7, whole);
    const ModelWeights host = dummy_weights(config, 7, whole);
    ASSERT_EQ(w.layers.size(), host.layers.size());
    auto values = [](const Tensor& t) { return cuda::to_host(t).to_f32(); };
    for (size_t l = 0; l < w.layers.size(); ++l) {
        const LayerWeights &d = w.layers[l], &h = host.layers[l];
        for (auto [dev, ref] : {std::pair{&d.qkv, &h.qkv},
                                {&d.o_proj, &h.o_proj},
                                {&d.gate_up, &h.gate_up},
                                {&d.down, &h.down},
                                {&d.input_norm, &h.input_norm},
                                {&d.q_norm, &h.q_norm}}) {
            ASSERT_EQ(dev->device(), Device::kCUDA);
            ASSERT_EQ(dev->shape(), ref->shape()) << l;
        }
        const Tensor norm = values(d.input_norm);
        for (int64_t i = 0; i < norm.numel(); ++i) ASSERT_EQ(norm.data<float>()[i], 1.f);
    }
    // N(0, 1/in) on a large matrix: mean ~0, std within 3% of 1/sqrt(in).
    const Tensor m = values(w.layers[0].gate_up);
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < m.numel(); ++i) {
        sum += m.data<float>()[i];
        sq += double(m.data<float>()[i]) * m.data<float>()[i];
    }
    const double n = double(m.numel()), mean = sum / n, std = std::sqrt(sq / n - mean * mean);
    const double want = 1.0 / std::sqrt(double(config.hidden_size));
    EXPECT_LT(std::fabs(mean), 4 * want / std::sqrt(n));
    EXPECT_NEAR(std, want, 0.03 * want);
    // Same seed, same numbers; world 2's rank 1 holds the second half of o_proj's columns.
    EXPECT_TRUE(gpu_testing::bitwise_equal(
        values(dummy_cuda_weights(config, 7, whole).layers[1].down), values(w.layers[1].down)));
    const ModelWeights shard =
        dummy_cuda_weights(config, 7, {.dtype = DType::kBF16, .rank = 1, .world = 2});
    const Tensor full = values(w.layers[0].o_proj), half = values(shard.layers[0].o_proj);
    const int64_t rows = full.size(0), cols = full.size(1);
    ASSERT_EQ(half.shape(), (Shape{rows, cols / 2}));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols / 2; ++c)
            ASSERT_EQ(half.data<float>()[r * cols / 2 + c],
                      full.data<float>()[r * cols + cols / 2 + c])
                << r << "," << c;

    CudaModelRunner gpu(runner_config(8, 256, 64), config, std::move(w));
    Request r;
    for (int32_t t = 0; t < 20; ++t) r.prompt_ids.push_back(t * 13 % int32_t(config.vocab_size));
    r.pages = {0, 1};
    Batch b;
    b.seqs.push_back({&r, 0, int64_t(r.prompt_ids.size()), true});
    build_batch(b, 16);
    SamplingParams greedy;
    std::vector<SamplerInput> in(1);
    in[0].params = &greedy;
    in[0].prompt_ids = r.prompt_ids;
    gpu.run(b, in);
    const Tensor logits = gpu.last_logits();
    for (int64_t i = 0; i < logits.numel(); ++i)
        ASSERT_TRUE(std::isfinite(logits.data<float>()[i])) << i;
}

// bench --profile-kernels' recorder: a run of the engine on the GPU, eager and from graphs,
// shows up kernel by kernel; the gemv of the decode steps among them, and the rows' totals add
// up to the summary line.
TEST(CudaKernelProfiler, RecordsTheEnginesKernels) {
    REQUIRE_GPU();
    LLMEngine engine(engine_config("qwen3-tiny"));
    SamplingParams p;
    p.max_tokens = 8;
    p.ignore_eos = true;
    engine.generate({Prompt::from_ids({1, 2, 3})}, p);  // warm: graphs captured, kernels loaded
    KernelProfiler profiler;
    engine.generate({Prompt::from_ids({4, 5, 6, 7}), Prompt::from_ids({8, 9})}, p);
    const std::vector<KernelTime> times = profiler.stop();
    ASSERT_FALSE(times.empty()) << "no kernel recorded";
    int64_t gemv_calls = 0;
    for (const KernelTime& t : times) {
        EXPECT_GT(t.calls, 0) << t.name;
        EXPECT_GE(t.total_us, 0.0) << t.name;
        if (t.name.rfind("gemv_kernel", 0) == 0) gemv_calls += t.calls;
    }
    EXPECT_GT(gemv_calls, 0) << "the decode steps' gemv kernels were not seen";
    for (size_t i = 1; i < times.size(); ++i) EXPECT_GE(times[i - 1].total_us, times[i].total_us);
    const std::string table = format_kernel_times(times, 3);
    EXPECT_NE(table.find("| kernel | calls |"), std::string::npos) << table;
    std::printf("%s", table.c_str());
}
