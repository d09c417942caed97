// EngineConfig: how an LLMEngine is built. Zero means "derive it" where noted; resolve()
// fills those in from the model and validates the rest (Error naming the field).
#pragma once

#include <cstdint>
#include <string>

#include "config/model_config.h"
#include "config/tuning.h"
#include "core/json.h"

namespace miniinfer {

struct EngineConfig {
    std::string model_dir;
    std::string device = "cpu";        // cpu | cuda
    std::string load_format = "auto";  // auto | safetensors | dummy
    int64_t max_num_seqs = 256;
    int64_t max_model_len = 0;           // 0: the model's max_position_embeddings
    int64_t max_num_batched_tokens = 0;  // a step's tokens; 0: 8192 (MoE 16384) CUDA, 2048 CPU
    int64_t page_size = 16;
    double gpu_memory_utilization = 0.9;  // CUDA: fraction of the card for weights + KV
    // CPU KV budget; 0: max_num_seqs x min(max_model_len, 2048) tokens, <= 4 GiB
    int64_t kv_cache_bytes = 0;
    int64_t num_pages = 0;  // > 0 overrides both budgets (tests)
    // Hybrid models (Gated DeltaNet layers): the requests that hold a recurrent state at once,
    // one state slot each (scheduler: admission waits for a free slot), and the prefix cache's
    // state snapshots. 0: derived (a hybrid: max_num_seqs, twice that with prefix caching,
    // fewer if their states would pass 4 GiB; other models: none).
    int64_t num_state_slots = 0;
    // Hybrid models' prefix cache: tokens between snapshots of a request's state (rounded up to
    // whole pages): a cached prefix is reused up to its last snapshot. 64: the delta rule's
    // chunk length.
    int64_t state_snapshot_interval = 64;
    bool enable_prefix_caching = true;
    bool enforce_eager = false;  // CUDA: no graphs (every step launched kernel by kernel)
    // The plain loop (schedule, run, process) even where the runner can overlap the next step
    // with the processing of the last (LLMEngine).
    bool disable_overlap = false;
    // Benchmarks: time every step on the GPU (CUDA events) and the GPU's idle gaps between
    // steps (ModelRunner::step_timing; `bench --measure-gpu-idle`). Off: the events cost a little.
    bool measure_gpu_idle = false;
    std::string attention_backend = "auto";  // auto | fa2 | flashinfer (CUDA)
    // CUDA kernel thresholds: not a user option (no JSON key, no serve flag); tests set it,
    // `miniinfer bench --tuning key=value` overrides it.
    Tuning tuning;
    // auto: K/V kept as computed (f32 on the CPU, bf16 on the GPU); fp8 (or fp8_e4m3): rounded
    // to FP8 e4m3 at scale 1.0 as they are stored (the CPU reference so far: it rounds and
    // keeps f32, the numbers an fp8 cache would hold; the CUDA backend refuses it for now).
    std::string kv_cache_dtype = "auto";
    bool fp8_kv_cache() const { return kv_cache_dtype == "fp8" || kv_cache_dtype == "fp8_e4m3"; }
    // Tensor parallelism: ranks each holding a shard of every layer (CPU: threads of this
    // process; CUDA: not yet). expert_parallel: MoE experts whole, split among the ranks.
    int64_t tensor_parallel_size = 1;
    bool enable_expert_parallel = false;
    // The ranks over several processes, here or on other hosts (CPU so far): nnodes nodes with
    // tensor_parallel_size / nnodes ranks each, over TCP (distributed/tcp_communicator.h). Node 0
    // schedules, samples and serves; a node_rank > 0 only runs its ranks' shards
    // (run_worker_node). Rank 0 listens on master_addr:master_port.
    int64_t nnodes = 1;
    int64_t node_rank = 0;
    std::string master_addr = "127.0.0.1";
    int64_t master_port = 29500;
    // Testing: answer with the texts of this file instead of running the model
    // (engine/scripted_runner.h).
    std::string scripted_outputs;
    // Tokenizer, engine core, detokenizer as processes (serve, generate).
    bool use_multiprocess = false;
    // false: outputs carry token ids only, no text, no stop strings (the pipeline's engine core;
    // its detokenizer process does them).
    bool detokenize = true;
    uint64_t seed = 0;  // draws the seeds of requests that bring none
    // Sampling defaults: "auto" = the model's generation_config.json, "vllm" = vLLM's defaults
    // (the file's EOS ids still apply), else a folder holding a generation_config.json.
    std::string generation_config = "auto";

    // Fills derived fields for `model` and validates. Throws Error naming the field, or for a
    // model the engine cannot run yet (check_engine_support). If the cache cannot hold
    // max_model_len tokens, max_model_len shrinks to what it holds.
    void resolve(const ModelConfig& model);
    // What resolve() makes of max_num_batched_tokens = 0 (the CLI's --help states it).
    static int64_t default_max_num_batched_tokens(const std::string& device, bool moe);
    // Bytes of K/V one token takes on this device: f32 on the CPU (an FP8 cache keeps the
    // rounded values in f32 there), bf16 on CUDA, one byte with an FP8 cache on CUDA. Only the
    // layers that keep K/V count (a hybrid's full-attention layers).
    int64_t kv_bytes_per_token(const ModelConfig& model) const;

    // Every field as JSON, and back (how the pipeline hands the config to its engine process).
    Json to_json() const;
    static EngineConfig from_json(const Json& json);
};

}  // namespace miniinfer
