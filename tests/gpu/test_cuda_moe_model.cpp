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
// qwen3-moe-fp8: qwen3-moe-tiny's shapes as a block-scaled FP8 checkpoint (every projection
// e4m3 but the LM head: the FP8 GEMV, GEMM and expert kernels).
// Decode steps of one to four tokens: the small-batch expert kernels (moe_gemv.h).
TEST_P(CudaMoeModelVsHf, GreedyDecodeAgreesWithCpu) {
    REQUIRE_GPU();
    expect_greedy_decode_agrees_with_cpu(GetParam(), 24);
}

TEST_P(CudaMoeModelVsHf, Fp8KvCacheGreedyAgreesWithCpu) {
    REQUIRE_GPU();
    expect_greedy_decode_agrees_with_cpu(GetParam(), 24, "fp8");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaMoeModelVsHf,
                         ::testing::Values("qwen3-moe-tiny", "qwen3-moe-wide", "qwen3-moe-fp8"),
                         fixture_param_name);

// Qwen3-MoE decode steps replayed from CUDA graphs (padded to 8
// rows: the padding rows route and fill expert segments of their own, which must not touch the
// real rows) give the eager steps' tokens. Token-id prompts: the fixture has no tokenizer.
TEST(CudaMoeEngine, GraphReplayEqualsEager) {
    REQUIRE_GPU();
    // 5 requests: replays pad to 8.
    expect_graph_replay_equals_eager(
        "qwen3-moe-tiny", {Prompt::from_ids({5, 6, 7, 8, 9, 10, 11}), Prompt::from_ids({42})}, 200);
}
