#include "bench/workloads.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/json.h"
#include "models/weights.h"

namespace miniinfer::bench {

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
    // Each shape draws its ids from its own seed: with one seed the workloads' prompts began
    // alike (short256's were decode256's first 128 ids, decode256's first 128 prompts were
    // decode128's), so a workload run after another in the same process found most of its prompts
    // in the prefix cache, which these workloads are meant to defeat.
    struct Shape {
        const char* name;
        int64_t requests, prompt, output;
        uint32_t seed;
    };
    static constexpr Shape kShapes[] = {{"decode128", 128, 128, 1024, 0},
                                        {"decode256", 256, 128, 1024, 1},
                                        {"short256", 256, 128, 256, 2},
                                        {"prefill256", 256, 2048, 16, 3},
                                        {"bs1", 1, 128, 512, 4}};
    for (const Shape& s : kShapes) {
        if (name != s.name) continue;
        BenchWorkload w = make_random_workload(s.requests, s.prompt, s.output, s.seed);
        w.name = name;
        return w;
    }
    if (name == "multiturn")
        fail(
            "workload 'multiturn' resends what the model generated, so its turns are not known in "
            "advance: only `miniinfer bench` runs it");
    fail("unknown workload '{}' (balanced, decode128, decode256, short256, prefill256, bs1)", name);
}

double expected_distinct_experts(int64_t num_experts, int64_t top_k, double tokens) {
    const double e = double(num_experts);
    return e * (1.0 - std::pow(1.0 - double(top_k) / e, tokens));
}

int64_t max_concurrent_requests(const BenchWorkload& w, int64_t max_num_seqs,
                                int64_t kv_capacity_tokens, int64_t state_slots) {
    int64_t shortest = 0;
    for (size_t r = 0; r < w.prompts.size(); ++r) {
        const int64_t len = int64_t(w.prompts[r].size()) + w.max_tokens[r];
        shortest = r == 0 ? len : std::min(shortest, len);
    }
    int64_t n = max_num_seqs;
    if (kv_capacity_tokens > 0 && shortest > 0)
        n = std::min(n, std::max<int64_t>(1, kv_capacity_tokens / shortest));
    if (state_slots > 0) n = std::min(n, state_slots);
    return n;
}

double sol_seconds(const BenchWorkload& w, const ModelConfig& c, int64_t max_num_seqs,
                   const SolHardware& hw, double kv_element_bytes) {
    // Dense weights (read whole every step) and their matmul parameters per token (lm_head
    // included; embedding rows are a lookup, not a matmul). An FP8 checkpoint's quantized
    // projections read a byte a parameter (their f32 block scales besides) and multiply at twice
    // the bf16 rate: they count half a bf16 parameter's FLOP time.
    double dense_bytes = 0, matmul_params = double(c.vocab_size * c.hidden_size);
    auto quantized = [&](const std::string& name) {  // the projections (q_proj ... down_proj)
        return name.ends_with("_proj.weight") &&
               c.quantization.quantizes(name.substr(0, name.size() - 7));
    };
    for (const auto& [name, shape] : expected_tensors(c)) {
        if (name.find(".mlp.experts.") != std::string::npos) continue;
        double n = 1;
        for (int64_t d : shape) n *= double(d);
        if (name.ends_with("weight_scale_inv")) {  // f32 block scales
            dense_bytes += 4 * n;
            continue;
        }
        const bool fp8 = quantized(name);
        dense_bytes += (fp8 ? 1 : 2) * n;
        if (shape.size() >= 2 && name != "model.embed_tokens.weight" && name != "lm_head.weight")
            matmul_params += fp8 ? n / 2 : n;
    }
    // One expert of one layer: gate, up and down (bytes of a parameter: 1 when FP8).
    const double expert_params = 3.0 * double(c.moe_intermediate_size * c.hidden_size);
    const double expert_bytes =
        quantized("model.layers.0.mlp.experts.0.down_proj.weight") ? 1.0 : 2.0;
    int64_t moe_layers = 0;
    for (int64_t l = 0; l < c.num_layers; ++l) moe_layers += c.is_moe_layer(l) ? 1 : 0;
    matmul_params += double(moe_layers * c.num_experts_per_tok) * expert_params * expert_bytes / 2;
    auto step_bytes = [&](double tokens) {
        if (moe_layers == 0) return dense_bytes;
        return dense_bytes +
               double(moe_layers) * expert_bytes * expert_params *
                   expected_distinct_experts(c.num_experts, c.num_experts_per_tok, tokens);
    };

    const double kv_per_token =
        2.0 * double(c.num_kv_layers() * c.num_kv_heads * c.head_dim) * kv_element_bytes;
    // A hybrid's Gated DeltaNet state (f32): each live sequence's read and written once a step.
    const double state_per_seq = 2.0 * double(c.gdn_state_bytes());
    double seconds = 0;
    for (size_t begin = 0; begin < w.prompts.size(); begin += size_t(max_num_seqs)) {
        const size_t end = std::min(w.prompts.size(), begin + size_t(max_num_seqs));
        int64_t longest = 0;
        for (size_t r = begin; r < end; ++r) {
            seconds += double(w.prompts[r].size()) * 2 * matmul_params / hw.matmul_flops;
            longest = std::max(longest, w.max_tokens[r]);
        }
        for (int64_t k = 0; k < longest; ++k) {
            double live = 0, kv = 0;
            for (size_t r = begin; r < end; ++r)
                if (w.max_tokens[r] > k) {
                    live += 1;
                    kv += double(int64_t(w.prompts[r].size()) + k) * kv_per_token + state_per_seq;
                }
            seconds += std::max((step_bytes(live) + kv) / hw.hbm_bytes_per_s,
                                2 * matmul_params * live / hw.matmul_flops);
        }
    }
    return seconds;
}

}  // namespace miniinfer::bench
