// Tensor and expert parallelism proven on the CPU: the fixtures' models split over 2 and 4 ranks
// (threads, CpuCommunicator adding the partial sums) give the one-rank logits within fp32
// rounding, Hugging Face's logits within the usual tolerance and Hugging Face's greedy tokens;
// MoE models also with whole experts split among 2 ranks. Every rank ends a step with the same
// logits (the all-reduce adds in rank order). TcpCommunicator (ranks in other processes or
// hosts) gives CpuCommunicator's bits, and refuses a rank of another world.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <future>

#include "core/json.h"
#include "distributed/cpu_communicator.h"
#include "distributed/tcp_communicator.h"
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

// The collectives over TCP: the same bits as CpuCommunicator's, for ranks on threads here
// (the CLI test runs them as processes).
TEST(TcpCommunicator, CollectivesEqualCpuCommunicators) {
    for (int64_t world : {2, 3}) {
        const int64_t n = 1000;
        auto make = [&](int64_t r) {
            Tensor x = Tensor::zeros({n}, DType::kF32);
            for (int64_t i = 0; i < n; ++i)
                x.data<float>()[i] = std::sin(float(i * (r + 1))) * float(1 << (i % 20));
            return x;
        };
        auto local_block = [&](int64_t r) {  // rank r holds r + 2 elements
            Tensor b = Tensor::zeros({r + 2}, DType::kF32);
            for (int64_t i = 0; i < b.numel(); ++i) b.data<float>()[i] = float(100 * r + i);
            return b;
        };
        const int64_t gathered = world * (world + 3) / 2;  // sum of r + 2
        // What each rank ends with: the sum, the gathered blocks, rank 0's tensor, the minimum.
        struct Results {
            std::vector<Tensor> sum, gather, broadcast;
            std::vector<int64_t> min;
            explicit Results(int64_t world)
                : sum(size_t(world)),
                  gather(size_t(world)),
                  broadcast(size_t(world)),
                  min(size_t(world)) {}
        };
        auto body = [&](Communicator& comm, int64_t r, Results& out) {
            out.sum[size_t(r)] = make(r);
            comm.all_reduce_sum(out.sum[size_t(r)]);
            out.gather[size_t(r)] = Tensor::zeros({gathered}, DType::kF32);
            comm.all_gather(local_block(r), out.gather[size_t(r)]);
            out.broadcast[size_t(r)] = make(r);
            comm.broadcast_from_rank0(out.broadcast[size_t(r)]);
            out.min[size_t(r)] = comm.min_over_ranks(10 - r);
        };
        Results want(world), got(world);
        {  // reference: threads with CpuCommunicator
            CpuCommunicator::Group group(world);
            std::vector<std::future<void>> ranks;
            for (int64_t r = 0; r < world; ++r)
                ranks.push_back(std::async(std::launch::async, [&, r] {
                    CpuCommunicator comm(group, r);
                    body(comm, r, want);
                }));
            for (auto& f : ranks) f.get();
        }
        TcpCommunicator hub = TcpCommunicator::listen("127.0.0.1", 0, world);
        const int port = hub.port();
        std::vector<std::string> controls(static_cast<size_t>(world));
        std::vector<std::future<void>> others;
        for (int64_t r = 1; r < world; ++r)
            others.push_back(std::async(std::launch::async, [&, r] {
                TcpCommunicator comm("127.0.0.1", port, r, world, std::chrono::seconds(20));
                comm.send_status(r == 1 ? "" : "rank " + std::to_string(r) + " is fine");
                controls[size_t(r)] = comm.receive_control().value();
                body(comm, r, got);
                EXPECT_FALSE(comm.receive_control().has_value());  // rank 0 closed its link
            }));
        {
            hub.accept_ranks(std::chrono::seconds(20));
            const std::vector<std::string> statuses = hub.receive_statuses();
            ASSERT_EQ(statuses.size(), size_t(world - 1));
            EXPECT_EQ(statuses[0], "");
            if (world == 3) {
                EXPECT_EQ(statuses[1], "rank 2 is fine");
            }
            hub.send_control("step 1");
            body(hub, 0, got);
            TcpCommunicator closing = std::move(hub);  // destroyed here: the links close
        }
        for (auto& f : others) f.get();
        const auto same_bits = [](const Tensor& a, const Tensor& b) {
            return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
        };
        for (int64_t r = 0; r < world; ++r) {
            SCOPED_TRACE("world " + std::to_string(world) + " rank " + std::to_string(r));
            for (const Results* res : {&want, &got}) {
                EXPECT_TRUE(same_bits(res->sum[size_t(r)], want.sum[0]));
                EXPECT_TRUE(same_bits(res->broadcast[size_t(r)], make(0)));
                EXPECT_EQ(res->min[size_t(r)], 10 - (world - 1));
                const float* g = res->gather[size_t(r)].data<float>();
                for (int64_t q = 0, at = 0; q < world; at += q + 2, ++q)
                    for (int64_t i = 0; i < q + 2; ++i) EXPECT_EQ(g[at + i], float(100 * q + i));
            }
            EXPECT_TRUE(same_bits(got.sum[size_t(r)], want.sum[size_t(r)]));
            if (r > 0) {
                EXPECT_EQ(controls[size_t(r)], "step 1");
            }
        }
    }
}

// A rank that names another world (a node started with another -tp) is refused, and both ends
// say why.
TEST(TcpCommunicator, RankOfAnotherWorldIsRefused) {
    TcpCommunicator hub = TcpCommunicator::listen("127.0.0.1", 0, 2);
    const int port = hub.port();
    auto stray = std::async(std::launch::async, [port]() -> std::string {
        try {
            TcpCommunicator comm("127.0.0.1", port, 1, 4, std::chrono::seconds(20));
        } catch (const Error& e) {
            return e.what();
        }
        return "accepted";
    });
    try {
        hub.accept_ranks(std::chrono::seconds(20));
        ADD_FAILURE() << "rank 0 accepted a rank of world 4";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("rank 1 says the world is 4, rank 0 says 2"),
                  std::string::npos)
            << e.what();
    }
    EXPECT_NE(stray.get().find("refused by rank 0: rank 1 says the world is 4"), std::string::npos);
}

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

// An FP8 checkpoint over ranks (W8A8): whole experts on 2 ranks give one rank's logits within
// fp32 rounding; a split that would cut a 128-block of scales is refused when the engine starts.
TEST(TensorParallelFp8, ExpertParallelEqualsOneRankAndSplitBlocksAreRefused) {
    const Json ref = read_json_file(kFixtures / "qwen3-moe-fp8" / "reference.json");
    for (size_t p = 0; p < ref["prompts"].size(); ++p) {
        const auto prompt = ref["prompts"][p]["ids"].get<std::vector<int32_t>>();
        const Tensor one = prompt_logits("qwen3-moe-fp8", 1, false, prompt)[0];
        const std::vector<Tensor> ranks = prompt_logits("qwen3-moe-fp8", 2, true, prompt);
        EXPECT_EQ(max_delta(ranks[1], ranks[0]), 0.f) << "prompt " << p;
        const float delta = max_delta(ranks[0], one), scale = max_abs(one);
        EXPECT_LE(delta, 1e-5f * std::max(scale, 1.f)) << "prompt " << p;
        std::printf("[ qwen3-moe-fp8 ep2 prompt %zu: max |dlogit| against one rank %.2e ]\n", p,
                    double(delta));
    }
    EngineConfig config;
    config.model_dir = (kFixtures / "qwen3-tiny-fp8").string();  // 2 KV heads of 64
    config.num_pages = 64;
    config.tensor_parallel_size = 2;
    try {
        LLMEngine engine(config);
        ADD_FAILURE() << "a split FP8 block accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("k_proj.weight: rows [0, 64) of 128"),
                  std::string::npos)
            << e.what();
    }
}
