// The speed of light `miniinfer bench` reports (bench/workloads.h), for a dense and an MoE
// model, against numbers worked out by hand from BENCHMARKS.md's model.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "bench/gpu_peak.h"
#include "bench/workloads.h"

using namespace miniinfer;
using namespace miniinfer::bench;

namespace {
const std::filesystem::path kBench = MINIINFER_SOURCE_DIR "/bench";

// One request: a 1-token prompt, `steps` decode steps of one token.
BenchWorkload one_request(int64_t steps) {
    return {.name = "t", .prompts = {{1}}, .max_tokens = {steps}};
}
}  // namespace

TEST(BenchSol, ExpectedDistinctExperts) {
    EXPECT_DOUBLE_EQ(expected_distinct_experts(128, 8, 1), 8.0);  // one token: its k experts
    EXPECT_NEAR(expected_distinct_experts(128, 8, 2), 128 * (1 - std::pow(120.0 / 128, 2)), 1e-9);
    EXPECT_NEAR(expected_distinct_experts(128, 8, 256), 128.0, 1e-4);  // a big batch: all
    EXPECT_DOUBLE_EQ(expected_distinct_experts(8, 8, 1), 8.0);
}

// Qwen3-0.6B: one decode step at batch 1 reads the 1.19 GB of weights (BENCHMARKS.md) plus one
// token's KV; at 4.8 TB/s that is ~0.25 ms, memory-bound.
TEST(BenchSol, DenseStepReadsEveryWeight) {
    const ModelConfig c = ModelConfig::load(kBench / "qwen3-0.6b");
    const double step = sol_seconds(one_request(1), c, 256, {.hbm_bytes_per_s = 4.8e12});
    const double kv = 2.0 * 28 * 8 * 128 * 2;                // one token of K and V, bf16
    const double prefill = 2.0 * (0.6e9 - 0.16e9) / 790e12;  // negligible next to the step
    EXPECT_NEAR(step, (1.192e9 + kv) / 4.8e12, 0.01 * step + prefill);
}

// Qwen3-30B-A3B: a batch-1 step reads the dense part (attention, router, norms, embeddings and
// the untied lm_head) plus 8 experts of 3 x 768 x 2048 bf16 in each of 48 layers; a large
// batch reads all 128 experts.
TEST(BenchSol, MoeStepReadsOnlyTheRoutedExperts) {
    const ModelConfig c = ModelConfig::load(kBench / "qwen3-30b-a3b");
    ASSERT_EQ(c.num_experts, 128);
    const double expert = 3.0 * 768 * 2048 * 2;  // bytes
    const double attention = (2048.0 * (32 + 2 * 4) * 128 + 32 * 128 * 2048.0) * 2;
    const double per_layer_dense = attention + 128 * 2048.0 * 2 + (2 * 2048 + 2 * 128) * 2.0;
    const double dense = 48 * per_layer_dense + 2 * 151936.0 * 2048 * 2 + 2048 * 2;
    const double kv = 2.0 * 48 * 4 * 128 * 2;
    const SolHardware hw{.hbm_bytes_per_s = 4.8e12, .matmul_flops = 1e30};  // memory only
    const double one = sol_seconds(one_request(1), c, 256, hw);
    EXPECT_NEAR(one, (dense + 48 * 8 * expert + kv) / 4.8e12, 1e-9);
    EXPECT_LT(one, (dense + 48 * 128 * expert) / 4.8e12 / 5);  // far below reading all experts

    BenchWorkload batch;
    for (int i = 0; i < 256; ++i) {
        batch.prompts.push_back({1});
        batch.max_tokens.push_back(1);
    }
    const double wide = sol_seconds(batch, c, 256, hw);
    EXPECT_NEAR(wide, (dense + 48 * 128 * expert + 256 * kv) / 4.8e12, 1e-3 * wide);
}

// An FP8 KV cache reads one byte per K/V element: a long decode, where the cache dominates,
// gets a speed of light near twice the bf16 one, and the difference is exactly the KV bytes.
TEST(BenchSol, Fp8KvCacheHalvesTheKvBytes) {
    const ModelConfig c = ModelConfig::load(kBench / "qwen3-0.6b");
    const SolHardware hw{.hbm_bytes_per_s = 4.8e12, .matmul_flops = 1e30};  // memory only
    BenchWorkload w;
    for (int i = 0; i < 256; ++i) {
        w.prompts.push_back(std::vector<int32_t>(4096, 1));
        w.max_tokens.push_back(64);
    }
    const double bf16 = sol_seconds(w, c, 256, hw), fp8 = sol_seconds(w, c, 256, hw, 1.0);
    const double weights_only = sol_seconds(w, c, 256, hw, 0.0);
    EXPECT_LT(fp8, bf16);
    EXPECT_NEAR(bf16 - fp8, fp8 - weights_only, 1e-9 * bf16);  // KV at 2 bytes = 2 x at 1 byte
    EXPECT_GT(bf16 - weights_only, 0.5 * bf16);                // the cache dominates here
}

// Every standard workload's prompts begin differently from every other's (and from each other),
// so that a workload run after another in the same process finds none of them in the prefix
// cache: with one seed for all, short256's prompts were decode256's and 87.5% of short256's
// prompt tokens came from the cache on the H200 (session 26).
TEST(BenchWorkloads, NoTwoPromptsShareTheirFirstPage) {
    std::set<std::vector<int32_t>> first_pages;
    size_t prompts = 0;
    for (const char* name :
         {"balanced", "decode128", "decode256", "short256", "prefill256", "bs1"}) {
        const BenchWorkload w = make_bench_workload(name, (kBench / "balanced.json").string());
        for (const std::vector<int32_t>& p : w.prompts) {
            ASSERT_GE(p.size(), 16u) << name;
            first_pages.insert({p.begin(), p.begin() + 16});
            ++prompts;
        }
    }
    EXPECT_EQ(first_pages.size(), prompts);
}

// Each card's own figures, by its CUDA name: an H100 is not measured against the H200's 4.8 TB/s.
TEST(BenchSol, KnownCardsByName) {
    const auto figures = [](const char* name) {
        const std::optional<SolHardware> hw = known_gpu(name);
        return hw ? std::pair(hw->hbm_bytes_per_s, hw->matmul_flops) : std::pair(0.0, 0.0);
    };
    EXPECT_EQ(figures("NVIDIA H100 80GB HBM3"), std::pair(3.35e12, 790e12));
    EXPECT_EQ(figures("NVIDIA H100 PCIe"), std::pair(2.0e12, 756e12));
    EXPECT_EQ(figures("NVIDIA H200"), std::pair(4.8e12, 790e12));
    EXPECT_EQ(figures("NVIDIA A100-SXM4-80GB"), std::pair(2.039e12, 312e12));
    EXPECT_EQ(figures("NVIDIA A100-SXM4-40GB"), std::pair(1.555e12, 312e12));
    EXPECT_EQ(figures("NVIDIA A100-PCIE-40GB"), std::pair(1.555e12, 312e12));
    EXPECT_EQ(figures("NVIDIA L40S"), std::pair(0.864e12, 362e12));
    EXPECT_EQ(figures("nvidia h100 80gb hbm3"), std::pair(3.35e12, 790e12));  // case
    EXPECT_FALSE(known_gpu("NVIDIA GH200 480GB"));  // a word of its own, not the H200
    EXPECT_FALSE(known_gpu("NVIDIA GeForce RTX 4090"));
    EXPECT_FALSE(known_gpu(""));

    const GpuPeak h100 = gpu_peak({.name = "NVIDIA H100 80GB HBM3", .memory_clock_khz = 1});
    EXPECT_EQ(h100.source, "table");  // the table wins over the properties
    EXPECT_EQ(describe(h100), "SOL: NVIDIA H100 80GB HBM3, 3.35 TB/s, 790 TFLOP/s bf16 (table)");
}

// A card the table lacks: bandwidth = 2 x memory clock x bus width, matrix rate = SMs x clock x
// the architecture's dense bf16 FLOP per SM per clock; an unknown architecture bounds nothing.
TEST(BenchSol, UnknownCardsFromDeviceProperties) {
    const GpuProperties props{.name = "NVIDIA GH200 480GB",
                              .memory_clock_khz = 2'619'000,
                              .memory_bus_width_bits = 5120,
                              .num_sms = 132,
                              .sm_clock_khz = 1'830'000,
                              .compute_major = 9,
                              .compute_minor = 0};
    const GpuPeak peak = gpu_peak(props);
    EXPECT_EQ(peak.source, "from device properties");
    EXPECT_NEAR(peak.hardware.hbm_bytes_per_s, 3.352e12, 1e9);
    EXPECT_NEAR(peak.hardware.matmul_flops, 989.4e12, 1e11);
    EXPECT_EQ(describe(peak),
              "SOL: NVIDIA GH200 480GB, 3.35 TB/s, 989 TFLOP/s bf16 (from device properties)");

    GpuProperties future = props;
    future.name = "NVIDIA Future";
    future.compute_major = 42;
    const GpuPeak unknown = gpu_peak(future);
    EXPECT_TRUE(std::isinf(unknown.hardware.matmul_flops));
    EXPECT_EQ(describe(unknown),
              "SOL: NVIDIA Future, 3.35 TB/s, matrix rate unknown (from device properties)");
    // Memory-bound only: the SOL of a decode is still finite.
    const ModelConfig c = ModelConfig::load(kBench / "qwen3-0.6b");
    EXPECT_GT(sol_seconds(one_request(4), c, 256, unknown.hardware), 0.0);
}

// Qwen3.5-35B-A3B: K/V only for its 10 full-attention layers, and each live sequence's Gated
// DeltaNet state (30 layers of 32 x 128 x 128 f32 plus the conv windows) read and written once
// a step: at batch 256 the states (2 x 256 x 63 MB) outweigh every expert.
TEST(BenchSol, HybridStepReadsAndWritesTheStates) {
    const ModelConfig c = ModelConfig::load(kBench / "qwen3.5-35b-a3b");
    const SolHardware hw{.hbm_bytes_per_s = 4.8e12, .matmul_flops = 1e30};  // memory only
    const double state = double(c.gdn_state_bytes());
    EXPECT_EQ(state, 30 * (32 * 128 * 128 * 4.0 + 3 * 8192 * 4.0));
    BenchWorkload w = one_request(1);
    const double one = sol_seconds(w, c, 256, hw);
    w.prompts = {{1}, {2}};
    w.max_tokens = {1, 1};
    const double two = sol_seconds(w, c, 256, hw);
    // The second sequence adds its token's K/V, its state twice, and the experts it touches
    // beyond the first's.
    const double kv = 2.0 * 10 * 2 * 256 * 2;
    const double expert = 3.0 * 512 * 2048 * 2;
    const double more_experts =
        40 * expert * (expected_distinct_experts(256, 8, 2) - expected_distinct_experts(256, 8, 1));
    EXPECT_NEAR(two - one, (kv + 2 * state + more_experts) / 4.8e12, 1e-9);
}

// Qwen3-30B-A3B as an FP8 checkpoint (bench/qwen3-30b-a3b-fp8): its projections (attention and
// experts) read one byte a parameter; the router, norms, embeddings and lm_head stay bf16
// (plus the dense projections' f32 block scales: 4 bytes a 128 x 128 block, within 1e-4).
TEST(BenchSol, Fp8ProjectionsReadOneByteAParameter) {
    const ModelConfig c = ModelConfig::load(kBench / "qwen3-30b-a3b-fp8");
    ASSERT_TRUE(c.quantization.is_fp8());
    const double expert = 3.0 * 768 * 2048;  // bytes: one a parameter
    const double attention = 2048.0 * (32 + 2 * 4) * 128 + 32 * 128 * 2048.0;
    const double per_layer_dense = attention + 128 * 2048.0 * 2 + (2 * 2048 + 2 * 128) * 2.0;
    const double dense = 48 * per_layer_dense + 2 * 151936.0 * 2048 * 2 + 2048 * 2;
    const double kv = 2.0 * 48 * 4 * 128 * 2;
    const SolHardware hw{.hbm_bytes_per_s = 4.8e12, .matmul_flops = 1e30};
    const double want = (dense + 48 * 8 * expert + kv) / 4.8e12;
    EXPECT_NEAR(sol_seconds(one_request(1), c, 256, hw), want, 1e-4 * want);
}

// The SOL's waves are as wide as the engine can hold: max_num_seqs, the KV cache's tokens over
// the shortest request, a hybrid's state slots.
TEST(BenchSol, WavesAsWideAsMemoryHolds) {
    BenchWorkload w;
    for (int i = 0; i < 256; ++i) {
        w.prompts.push_back(std::vector<int32_t>(1024, 1));
        w.max_tokens.push_back(1024);
    }
    w.prompts.back().resize(512);  // the shortest: 512 + 1024
    EXPECT_EQ(max_concurrent_requests(w, 256, 0, 0), 256);
    EXPECT_EQ(max_concurrent_requests(w, 256, 58 * 1536, 0), 58);
    EXPECT_EQ(max_concurrent_requests(w, 256, 1000, 0), 1);  // not even one: one at a time
    EXPECT_EQ(max_concurrent_requests(w, 256, 0, 40), 40);
    EXPECT_EQ(max_concurrent_requests(w, 32, 58 * 1536, 40), 32);
    // Narrower waves: a slower SOL (more steps, each reading the weights again).
    const ModelConfig c = ModelConfig::load(kBench / "qwen3-0.6b");
    const SolHardware hw{.hbm_bytes_per_s = 4.8e12, .matmul_flops = 790e12};
    EXPECT_GT(sol_seconds(w, c, 58, hw), sol_seconds(w, c, 256, hw));
}
