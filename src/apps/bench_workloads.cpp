#include "apps/bench_workloads.h"

#include <random>

#include "core/json.h"

namespace miniinfer::apps {

BenchWorkload make_random_workload(int64_t num_prompts, int64_t input_len, int64_t output_len,
                                   uint32_t seed) {
    if (num_prompts < 1 || input_len < 1 || output_len < 1)
        fail(
            "random workload: --num-prompts, --input-len and --output-len must be >= 1 (got {}, "
            "{}, {})",
            num_prompts, input_len, output_len);
    BenchWorkload w{"random", {}, {}, 0.0};
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> id(0, 9999);
    for (int64_t r = 0; r < num_prompts; ++r) {
        std::vector<int32_t> p(static_cast<size_t>(input_len));
        for (auto& t : p) t = id(rng);
        w.prompts.push_back(std::move(p));
        w.max_tokens.push_back(output_len);
    }
    return w;
}

BenchWorkload make_bench_workload(const std::string& name, const std::string& balanced_file) {
    if (name == "balanced") {
        Json j = read_json_file(balanced_file);
        BenchWorkload w{
            name, json_get<std::vector<std::vector<int32_t>>>(j, "prompt_token_ids", balanced_file),
            json_get<std::vector<int64_t>>(j, "max_tokens", balanced_file), 0.6};
        if (w.prompts.size() != w.max_tokens.size())
            fail("{}: {} prompts but {} max_tokens", balanced_file, w.prompts.size(),
                 w.max_tokens.size());
        return w;
    }
    struct Shape {
        const char* name;
        int64_t requests, prompt, output;
    };
    static constexpr Shape kShapes[] = {{"decode128", 128, 128, 1024},
                                        {"decode256", 256, 128, 1024},
                                        {"short256", 256, 128, 256},
                                        {"prefill256", 256, 2048, 16},
                                        {"bs1", 1, 128, 512}};
    for (const Shape& s : kShapes) {
        if (name != s.name) continue;
        BenchWorkload w = make_random_workload(s.requests, s.prompt, s.output);
        w.name = name;
        return w;
    }
    fail("unknown workload '{}' (balanced, decode128, decode256, short256, prefill256, bs1)", name);
}

}  // namespace miniinfer::apps
