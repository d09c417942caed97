// The standard benchmark workloads of BENCHMARKS.md as prompts (token ids) and output lengths,
// shared by `miniinfer bench` and `miniinfer bench-serve`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace miniinfer::apps {

struct BenchWorkload {
    std::string name;
    std::vector<std::vector<int32_t>> prompts;  // token ids, one list per request
    std::vector<int64_t> max_tokens;            // [prompts.size()], generated with ignore_eos
    double temperature = 0.0;
};

// balanced: the prompts and lengths of `balanced_file` (nano-vllm's bench.py), temperature 0.6.
// decode128, decode256, short256, prefill256, bs1: fixed shapes of uniform random ids in
// [0, 10000) from mt19937(0), temperature 0. Throws Error for an unknown name or a bad file.
BenchWorkload make_bench_workload(const std::string& name, const std::string& balanced_file);

// `num_prompts` prompts of `input_len` uniform random ids in [0, 10000) (mt19937(seed)), each
// generating `output_len` tokens at temperature 0. Throws Error unless all three are >= 1.
BenchWorkload make_random_workload(int64_t num_prompts, int64_t input_len, int64_t output_len,
                                   uint32_t seed = 0);

}  // namespace miniinfer::apps
