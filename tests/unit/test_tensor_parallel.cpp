// Tensor and expert parallelism proven on the CPU: the fixtures' models split over 2 and 4 ranks
// (threads, CpuCommunicator adding the partial sums) give the one-rank logits within fp32
// rounding, Hugging Face's logits within the usual tolerance and Hugging Face's greedy tokens;
// MoE models also with whole experts split among 2 ranks. Every rank ends a step with the same
// logits (the all-reduce adds in rank order).
#include <gtest/gtest.h>

#include <cmath>
#include <future>

#include "core/json.h"
#include "engine/llm_engine.h"
#include "loader/safetensors.h"
#include "models/sequence_runner.h"

using namespace miniinfer;

namespace {
const std::filesystem::path kFixtures = MINIINFER_FIXTURES;

struct Case {
    std::string fixture;
    int64_t world;
    bool expert_parallel;
};

std::string name_of(const Case& c) {
    std::string s = c.fixture + (c.expert_parallel ? "_ep" : "_tp") + std::to_string(c.world);
    std::replace(s.begin(), s.end(), '-', '_');
    return s;
}

// The logits of every position of `prompt`, from each rank of a world of `world`.
std::vector<Tensor> prompt_logits(const std::string& fixture, int64_t world, bool ep,
                                  const std::vector<int32_t>& prompt) {
    CpuCommunicator::Group group(world);
    std::vector<std::unique_ptr<CpuCommunicator>> comms;
    std::vector<QwenModel> models;
    for (int64_t r = 0; r < world; ++r) {
        comms.push_back(std::make_unique<CpuCommunicator>(group, r));
        models.push_back(QwenModel::load(kFixtures / fixture, LoadFormat::kSafetensors, 0,
                                         {r, world, ep, world > 1 ? comms.back().get() : nullptr}));
    }
    std::vector<std::future<Tensor>> ranks;
    for (int64_t r = 0; r < world; ++r)
        ranks.push_back(std::async(std::launch::async, [&, r] {
            ThreadPool pool(1);
            ThreadPool::Bind bind(pool);
            SequenceRunner runner(models[size_t(r)], int64_t(prompt.size()));
            return runner.append(prompt);
        }));
    std::vector<Tensor> out;
    for (auto& f : ranks) out.push_back(f.get());
    return out;
}

float max_abs(const Tensor& t) {
    float m = 0;
    for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(t.data<float>()[i]));
    return m;
}

float max_delta(const Tensor& a, const Tensor& b) {
    float m = 0;
    for (int64_t i = 0; i < a.numel(); ++i)
        m = std::max(m, std::fabs(a.data<float>()[i] - b.data<float>()[i]));
    return m;
}

}  // namespace

class TensorParallel : public ::testing::TestWithParam<Case> {};

TEST_P(TensorParallel, LogitsAndGreedyEqualOneRank) {
    const Case c = GetParam();
    const Json ref = read_json_file(kFixtures / c.fixture / "reference.json");
    for (size_t p = 0; p < ref["prompts"].size(); ++p) {
        const auto prompt = ref["prompts"][p]["ids"].get<std::vector<int32_t>>();
        const Tensor one = prompt_logits(c.fixture, 1, false, prompt)[0];
        const std::vector<Tensor> ranks =
            prompt_logits(c.fixture, c.world, c.expert_parallel, prompt);
        for (size_t r = 1; r < ranks.size(); ++r)
            EXPECT_EQ(max_delta(ranks[r], ranks[0]), 0.f) << "rank " << r << " differs from rank 0";
        // fp32 sums in another order: a few ulps of the largest logit.
        const float delta = max_delta(ranks[0], one), scale = max_abs(one);
        EXPECT_LE(delta, 1e-5f * std::max(scale, 1.f)) << name_of(c) << " prompt " << p;
        std::printf(
            "[ %s prompt %zu: max |dlogit| against one rank %.2e (largest |logit| %.1f) ]\n",
            name_of(c).c_str(), p, double(delta), double(scale));
    }
    // The engine with the sharded runner: Hugging Face's greedy tokens.
    EngineConfig config;
    config.model_dir = (kFixtures / c.fixture).string();
    config.max_model_len = 256;
    config.num_pages = 64;
    config.tensor_parallel_size = c.world;
    config.enable_expert_parallel = c.expert_parallel;
    LLMEngine engine(config);
    SamplingParams greedy;
    greedy.temperature = 0;
    greedy.max_tokens = 32;
    greedy.ignore_eos = true;
    std::vector<Prompt> prompts;
    for (const Json& p : ref["prompts"]) prompts.push_back(Prompt::from_ids(p["ids"]));
    const std::vector<RequestOutput> outs = engine.generate(prompts, greedy);
    for (size_t p = 0; p < outs.size(); ++p)
        EXPECT_EQ(outs[p].token_ids, ref["prompts"][p]["greedy"].get<std::vector<int32_t>>())
            << name_of(c) << " prompt " << p;
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, TensorParallel,
    ::testing::Values(Case{"qwen2-tiny", 2, false}, Case{"qwen2-tiny", 4, false},
                      Case{"qwen3-tiny", 2, false}, Case{"qwen3-tiny", 4, false},
                      Case{"qwen3-moe-tiny", 2, false}, Case{"qwen3-moe-tiny", 4, false},
                      Case{"qwen3-moe-tiny", 2, true}, Case{"qwen3-moe-wide", 2, false},
                      Case{"qwen3-moe-wide", 4, false}, Case{"qwen3-moe-wide", 2, true}),
    [](const auto& info) { return name_of(info.param); });

// A world the model cannot be split over is refused with the numbers, before any work.
TEST(TensorParallelConfig, UnsplittableWorldsAreErrors) {
    EngineConfig config;
    config.model_dir = (kFixtures / "qwen3-tiny").string();  // 8 heads, 2 KV heads
    config.num_pages = 64;
    config.tensor_parallel_size = 3;
    try {
        LLMEngine engine(config);
        ADD_FAILURE() << "world 3 accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("does not divide num_attention_heads = 8"),
                  std::string::npos)
            << e.what();
    }
}
