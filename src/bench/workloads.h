// The standard benchmark workloads of BENCHMARKS.md as prompts (token ids) and output lengths,
// shared by `miniinfer bench`, `miniinfer bench-serve` and the C API's benchmark (Python).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/model_config.h"

namespace miniinfer::bench {

struct BenchWorkload {
    std::string name;
    std::vector<std::vector<int32_t>> prompts;  // token ids, one list per request
    std::vector<int64_t> max_tokens;            // [prompts.size()], generated with ignore_eos
    double temperature = 0.0;
};

// balanced: the prompts and lengths of `balanced_file` (nano-vllm's bench.py), temperature 0.6.
// decode128, decode256, short256, prefill256, bs1: fixed shapes of uniform random ids in
// [0, 10000) from mt19937(0), mt19937(1), ... mt19937(4) in that order (one seed each, so that no
// workload finds another's prompts in the prefix cache), temperature 0. Throws Error for an
// unknown name, for multiturn (bench/multiturn.h: its prompts depend on the model's outputs), or a
// bad file.
BenchWorkload make_bench_workload(const std::string& name, const std::string& balanced_file);

// `num_prompts` prompts of `input_len` uniform random ids in [0, 10000) (mt19937(seed)), each
// generating `output_len` tokens at temperature 0. Throws Error unless all three are >= 1.
BenchWorkload make_random_workload(int64_t num_prompts, int64_t input_len, int64_t output_len,
                                   uint32_t seed = 0);

// The speed of light (SOL) of a workload: the time no engine can beat on this hardware.
// Each decode step reads the weights it needs once plus the live KV cache at HBM bandwidth, or
// runs its matmuls at the matrix rate, whichever is slower; prefill runs at the matrix rate.
// All requests run at once, in waves of max_num_seqs.
//   dense model: a step reads every weight (a tied lm_head once) and does 2 x (matmul
//     parameters) FLOPs per token;
//   MoE model: a step reads the dense weights (attention, router, norms, embeddings, dense MLP
//     layers) whole, but of each MoE layer's experts only those its tokens route to: with the
//     near-uniform routing of random weights, `t` tokens choosing k of E experts touch
//     E (1 - (1 - k/E)^t) distinct experts on average (expected_distinct_experts). Its FLOPs per
//     token count k experts per MoE layer, plus the router;
//   hybrid model: K/V of its full-attention layers only, and each live sequence's Gated DeltaNet
//     state (ModelConfig::gdn_state_bytes) read and written once a step;
//   FP8 checkpoint (config.quantization): its quantized projections (experts included) read one
//     byte a parameter and multiply at twice the bf16 rate (Hopper's FP8 tensor cores).
struct SolHardware {
    // bytes/s and dense bf16 FLOP/s; these: an H200's (bench takes the card's, bench/gpu_peak.h)
    double hbm_bytes_per_s = 4.8e12, matmul_flops = 790e12;
};
double expected_distinct_experts(int64_t num_experts, int64_t top_k, double tokens);
// kv_element_bytes: 2 for a bf16 KV cache, 1 for an FP8 one (--kv-cache-dtype fp8 reads half
// the KV bytes, and its speed of light is that much higher where the cache dominates).

// The most requests of `w` an engine can hold at once: max_num_seqs, the KV cache's tokens over
// the shortest request's (prompt + output: the most optimistic packing), and for a hybrid its
// state slots (0: no such limit). sol_seconds' waves are this wide: a 27B on an 80 GB card holds
// 58 decode256 sequences, not 256, and no engine runs the rest at the same time.
int64_t max_concurrent_requests(const BenchWorkload& w, int64_t max_num_seqs,
                                int64_t kv_capacity_tokens, int64_t state_slots);

double sol_seconds(const BenchWorkload& w, const ModelConfig& c, int64_t max_num_seqs,
                   const SolHardware& hw, double kv_element_bytes = 2.0);

}  // namespace miniinfer::bench
