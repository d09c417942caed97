// Qwen3-MoE on the GPU, whole model: against the CPU model and Hugging Face on the MoE
// fixtures (teacher-forced, cuda_model_testing.h), and decode steps replayed from CUDA graphs
// against eager ones.
#include <gtest/gtest.h>

#include "cuda_model_testing.h"
#include "engine/llm_engine.h"
#include "gpu_testing.h"

using namespace miniinfer;
using namespace miniinfer::model_testing;

class CudaMoeModelVsHf : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaMoeModelVsHf, TeacherForcedArgmaxMatchesHuggingFace) {
    REQUIRE_GPU();
    expect_teacher_forced_matches(GetParam());
}

// qwen3-moe-tiny: 8 experts, top-2, renormalised, a dense layer, head_dim 128, tied head.
// qwen3-moe-wide: 16 experts, top-4 without renormalisation, layer 0 dense, head_dim 64.
INSTANTIATE_TEST_SUITE_P(Fixtures, CudaMoeModelVsHf,
                         ::testing::Values("qwen3-moe-tiny", "qwen3-moe-wide"),
                         [](const auto& info) {
                             std::string s = info.param;
                             std::replace(s.begin(), s.end(), '-', '_');
                             return s;
                         });

// The same for Qwen3-MoE: the MoE block's decode steps replayed from CUDA graphs (padded to 8
// rows: the padding rows route and fill expert segments of their own, which must not touch the
// real rows) give the eager steps' tokens. Token-id prompts: the fixture has no tokenizer.
TEST(CudaMoeEngine, GraphReplayEqualsEager) {
    REQUIRE_GPU();
    std::vector<Prompt> prompts;
    for (const Case& k : cases_of("qwen3-moe-tiny"))
        prompts.push_back(
            Prompt::from_ids({k.sequence.begin(), k.sequence.begin() + long(k.prompt_len)}));
    prompts.push_back(Prompt::from_ids({5, 6, 7, 8, 9, 10, 11}));
    prompts.push_back(Prompt::from_ids({42}));  // 5 requests: replays pad to 8
    std::vector<SamplingParams> params(prompts.size());
    for (size_t i = 0; i < params.size(); ++i) {
        params[i].temperature = i % 2 ? 0.8 : 0.0;
        params[i].seed = 200 + i;
        params[i].max_tokens = 24;
        params[i].ignore_eos = true;
    }
    std::vector<std::vector<int32_t>> results[2];
    for (bool eager : {true, false}) {
        EngineConfig c;
        c.model_dir = (kFixtures / "qwen3-moe-tiny").string();
        c.device = "cuda";
        c.max_model_len = 512;
        c.max_num_seqs = 16;
        c.gpu_memory_utilization = 0.3;
        c.enforce_eager = eager;
        LLMEngine engine(c);
        for (const auto& out : engine.generate(prompts, params))
            results[eager].push_back(out.token_ids);
    }
    EXPECT_EQ(results[0], results[1]);
}
