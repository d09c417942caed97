#include "apps/engine_options.h"

#include "config/sampling_params.h"
#include "engine/llm_engine.h"
#include "loader/hub.h"

namespace miniinfer::apps {

EngineConfig EngineOptions::resolve() const {
    EngineConfig c = config;
    c.model_dir = hub::resolve_model(config.model_dir, revision).string();
    c.kv_cache_bytes = kv_cache_mb << 20;
    c.enable_prefix_caching = !no_prefix_caching;
    return c;
}

bool run_as_worker_node(const EngineConfig& config) {
    if (config.nnodes <= 1 || config.node_rank == 0) return false;
    EngineConfig c = config;
    c.resolve(ModelConfig::load(c.model_dir));  // the same checks as node 0's
    run_worker_node(c);
    return true;
}

void add_model_option(CLI::App& cmd, std::string& model, std::string& revision, bool positional) {
    const char* help =
        "A model directory, or a Hugging Face name (org/name: from the Hugging Face cache, "
        "downloaded if absent)";
    cmd.add_option(positional ? "model" : "--model", model, help)->required();
    cmd.add_option("--revision", revision, "With a Hugging Face name: branch, tag or commit")
        ->capture_default_str();
}

void add_engine_options(CLI::App& cmd, EngineOptions& o, bool positional_model) {
    add_model_option(cmd, o.config.model_dir, o.revision, positional_model);
    cmd.add_option("--device", o.config.device, "cpu | cuda")->capture_default_str();
    cmd.add_option("--load-format", o.config.load_format, "auto | safetensors | dummy")
        ->capture_default_str();
    cmd.add_option("--max-num-seqs", o.config.max_num_seqs, "Most sequences in one step")
        ->capture_default_str();
    cmd.add_option("--max-model-len", o.config.max_model_len,
                   "Longest prompt + output (0: the model's)")
        ->capture_default_str();
    cmd.add_option("--max-num-batched-tokens", o.config.max_num_batched_tokens,
                   fmt::format("Token budget of one step (0: {} on CUDA, {} for an MoE model "
                               "there, {} on the CPU)",
                               EngineConfig::default_max_num_batched_tokens("cuda", false),
                               EngineConfig::default_max_num_batched_tokens("cuda", true),
                               EngineConfig::default_max_num_batched_tokens("cpu", false)))
        ->capture_default_str();
    cmd.add_option("--page-size", o.config.page_size, "KV cache page size in tokens")
        ->capture_default_str();
    cmd.add_option("--kv-cache-mb", o.kv_cache_mb, "CPU KV cache budget in MiB (0: automatic)")
        ->capture_default_str();
    cmd.add_option("--gpu-memory-utilization", o.config.gpu_memory_utilization,
                   "CUDA: fraction of GPU memory")
        ->capture_default_str();
    cmd.add_flag("--no-prefix-caching", o.no_prefix_caching, "Turn the radix prefix cache off");
    cmd.add_option("--attention-backend", o.config.attention_backend,
                   "CUDA attention: auto | fa2 | flashinfer")
        ->capture_default_str();
    cmd.add_option("--kv-cache-dtype", o.config.kv_cache_dtype,
                   "auto | fp8 (K/V stored as e4m3, half the cache memory: the checkpoint's "
                   "k_scale/v_scale, else 1.0; CPU and CUDA)")
        ->capture_default_str();
    cmd.add_flag("--enforce-eager", o.config.enforce_eager,
                 "CUDA: no graphs, every step launched kernel by kernel");
    // vLLM's -tp reaches here as --tensor-parallel-size (main rewrites it: CLI11's short names
    // are one letter).
    cmd.add_option(
           "--tensor-parallel-size", o.config.tensor_parallel_size,
           "Ranks sharing each layer (CPU: threads, or processes with --nnodes; CUDA: one GPU "
           "per rank over NCCL)")
        ->capture_default_str();
    cmd.add_flag("--enable-expert-parallel", o.config.enable_expert_parallel,
                 "MoE: whole experts split among the tensor-parallel ranks");
    cmd.add_option("--nnodes", o.config.nnodes,
                   "Nodes (processes, here or on other hosts) sharing the tensor-parallel ranks, "
                   "joined over TCP")
        ->capture_default_str();
    cmd.add_option("--node-rank", o.config.node_rank,
                   "This node's index: 0 schedules and serves, the others only run their ranks")
        ->capture_default_str();
    cmd.add_option("--master-addr", o.config.master_addr,
                   "Where node 0 listens for the other nodes' ranks")
        ->capture_default_str();
    cmd.add_option("--master-port", o.config.master_port, "The port node 0 listens on")
        ->capture_default_str();
    cmd.add_option("--scripted-outputs", o.config.scripted_outputs,
                   "Testing: answer with this JSON file's texts instead of running the model");
    cmd.add_flag("--disable-overlap", o.config.disable_overlap,
                 "The plain engine loop: process a step's outputs before scheduling the next");
    cmd.add_option("--seed", o.config.seed, "Seed for requests that bring none")
        ->capture_default_str();
    cmd.add_option("--generation-config", o.config.generation_config,
                   "Sampling defaults: auto (the model's generation_config.json), vllm (vLLM's), "
                   "or a folder")
        ->capture_default_str();
}

void add_multiprocess_option(CLI::App& cmd, EngineOptions& o) {
    cmd.add_flag(
        "--use-multiprocess", o.config.use_multiprocess,
        "Tokenizer, engine core and detokenizer in separate processes (ZeroMQ over ipc://)");
}

std::shared_ptr<Json> add_sampling_options(CLI::App& cmd, int64_t max_tokens) {
    auto json = std::make_shared<Json>(Json{{"max_tokens", max_tokens}});
    auto number = [&](const char* flag, const char* key, const std::string& help) {
        return cmd.add_option_function<double>(
            flag, [json, key](double v) { (*json)[key] = v; }, help);
    };
    auto integer = [&](const char* flag, const char* key, const std::string& help) {
        return cmd.add_option_function<int64_t>(
            flag, [json, key](int64_t v) { (*json)[key] = v; }, help);
    };
    number("--temperature", "temperature",
           fmt::format("0 = greedy (default: the model's generation_config.json, else {})",
                       SamplingParams{}.temperature));
    number("--top-p", "top_p", "Nucleus sampling mass");
    integer("--top-k", "top_k", "Keep the k most likely tokens (0 or -1: all)");
    number("--min-p", "min_p", "Drop tokens below min_p x the top probability");
    number("--repetition-penalty", "repetition_penalty",
           "> 1 discourages repeating prompt or output tokens");
    number("--presence-penalty", "presence_penalty", "[-2, 2]");
    number("--frequency-penalty", "frequency_penalty", "[-2, 2]");
    integer("--max-tokens", "max_tokens", "Most tokens to generate")
        ->default_str(std::to_string(max_tokens));
    integer("--min-tokens", "min_tokens", "Fewest tokens before EOS or a stop may end a request");
    integer("--sampling-seed", "seed", "Seed of every request (same seed, same tokens)");
    integer("--logprobs", "logprobs", "Top-n log-probabilities per generated token");
    cmd.add_option_function<std::vector<std::string>>(
        "--stop", [json](const std::vector<std::string>& v) { (*json)["stop"] = v; },
        "Stop string (repeatable)");
    cmd.add_option_function<std::vector<int64_t>>(
           "--stop-token-ids",
           [json](const std::vector<int64_t>& v) { (*json)["stop_token_ids"] = v; },
           "Token ids that end a request, comma separated")
        ->delimiter(',');
    cmd.add_flag_callback(
        "--ignore-eos", [json] { (*json)["ignore_eos"] = true; }, "Do not stop at EOS");
    cmd.add_flag_callback(
        "--no-skip-special-tokens", [json] { (*json)["skip_special_tokens"] = false; },
        "Keep special tokens in the output text");
    return json;
}

}  // namespace miniinfer::apps
