// The hybrids (Qwen3.5, Qwen3.5-MoE, Qwen3-Next) on the GPU, whole model: against the CPU model
// and Hugging Face on their fixtures (teacher-forced, cuda_model_testing.h), free-running greedy
// decoding against the CPU model, decode steps replayed from CUDA graphs against eager ones, and
// prefix-cache hits (state snapshots restored on the device) against a run without the cache.
#include <gtest/gtest.h>

#include "cuda_model_testing.h"
#include "engine/llm_engine.h"
#include "gpu_testing.h"

using namespace miniinfer;
using namespace miniinfer::model_testing;

namespace {

std::string hybrid_param_name(const ::testing::TestParamInfo<std::string>& info) {
    std::string s = info.param;
    std::replace(s.begin(), s.end(), '-', '_');
    std::replace(s.begin(), s.end(), '.', '_');
    return s;
}

}  // namespace

class CudaHybridModel : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaHybridModel, TeacherForcedArgmaxMatchesHuggingFace) {
    REQUIRE_GPU();
    expect_teacher_forced_matches(GetParam());
}

TEST_P(CudaHybridModel, GreedyDecodeAgreesWithCpu) {
    REQUIRE_GPU();
    expect_greedy_decode_agrees_with_cpu(GetParam(), 24);
}

TEST_P(CudaHybridModel, Fp8KvCacheGreedyAgreesWithCpu) {
    REQUIRE_GPU();
    expect_greedy_decode_agrees_with_cpu(GetParam(), 16, "fp8");
}

// Padded graph rows run their own state in the runner's dummy slot, which must not touch the
// real rows' states.
TEST_P(CudaHybridModel, GraphReplayEqualsEager) {
    REQUIRE_GPU();
    expect_graph_replay_equals_eager(
        GetParam(), {Prompt::from_ids({5, 6, 7, 8, 9, 10, 11}), Prompt::from_ids({42})}, 300);
}

// A conversation resent turn after turn: with the prefix cache the state comes back from a
// snapshot on the device, and the tokens are those of a run without the cache.
TEST_P(CudaHybridModel, PrefixCacheHitsGiveTheSameTokens) {
    REQUIRE_GPU();
    const std::vector<Case> cases = cases_of(GetParam());
    auto engine = [&](bool caching) {
        EngineConfig c = engine_config(GetParam());
        c.enable_prefix_caching = caching;
        // Both engines live at once, and gpu_memory_utilization bounds the card's used memory:
        // the first takes 15% of it, the second the rest of 30%.
        c.gpu_memory_utilization = caching ? 0.15 : 0.3;
        return c;
    };
    LLMEngine cached(engine(true)), plain(engine(false));
    SamplingParams greedy;
    greedy.temperature = 0;
    greedy.max_tokens = 24;
    greedy.ignore_eos = true;
    std::vector<int32_t> history(cases[3].sequence.begin(),
                                 cases[3].sequence.begin() + long(cases[3].prompt_len));
    int64_t cached_tokens = 0;
    for (int turn = 0; turn < 3; ++turn) {
        const RequestOutput hit = cached.generate({Prompt::from_ids(history)}, {greedy})[0];
        const RequestOutput miss = plain.generate({Prompt::from_ids(history)}, {greedy})[0];
        EXPECT_EQ(hit.token_ids, miss.token_ids) << "turn " << turn;
        if (turn > 0) {
            EXPECT_GT(hit.num_cached_tokens, 0) << "turn " << turn;
        }
        cached_tokens += hit.num_cached_tokens;
        history.insert(history.end(), hit.token_ids.begin(), hit.token_ids.end());
        history.insert(history.end(), cases[1].sequence.begin(),
                       cases[1].sequence.begin() + long(cases[1].prompt_len));
    }
    std::printf("[ %s: %lld prompt tokens from the cache over 3 turns ]\n", GetParam().c_str(),
                (long long)cached_tokens);
    cached.scheduler().check_invariants();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaHybridModel,
                         ::testing::Values("qwen3.5-tiny", "qwen3.5-moe-tiny", "qwen3-next-tiny"),
                         hybrid_param_name);
