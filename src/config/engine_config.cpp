#include "config/engine_config.h"

#include <algorithm>
#include <filesystem>

#include "core/check.h"

namespace miniinfer {

int64_t EngineConfig::kv_bytes_per_token(const ModelConfig& m) const {
    const int64_t element = device == "cpu" ? 4 : fp8_kv_cache() ? 1 : 2;
    return 2 * m.num_kv_layers() * m.num_kv_heads * m.head_dim * element;
}

// 8192 on the GPU: prefill steps that large run the GEMMs and the MoE experts at a higher rate
// (H200, bench/RESULTS.md: Qwen3-0.6B prefill256 +31%, balanced +2%; 30B-A3B prefill +39%),
// at the cost of a longer step while a long prompt is prefilled. 16384 for an MoE model: each
// prefill step reads every expert's weights, so twice the tokens a step halve that cost per
// token (30B-A3B prefill256 63,254 -> 66,811 prompt tok/s, balanced unchanged; the 0.6B
// measured slower at 16384). 2048 on the CPU.
int64_t EngineConfig::default_max_num_batched_tokens(const std::string& device, bool moe) {
    return device != "cuda" ? 2048 : moe ? 16384 : 8192;
}

void EngineConfig::resolve(const ModelConfig& model) {
    if (device != "cpu" && device != "cuda")
        fail("device '{}' is not supported (cpu, cuda)", device);
    check_engine_support(model, device, tensor_parallel_size);
    if (attention_backend != "auto" && attention_backend != "fa2" &&
        attention_backend != "flashinfer")
        fail("attention_backend '{}' is not supported (auto, fa2, flashinfer)", attention_backend);
    if (kv_cache_dtype != "auto" && !fp8_kv_cache())
        fail("kv_cache_dtype '{}' is not supported (auto, fp8, fp8_e4m3)", kv_cache_dtype);
    if (generation_config != "auto" && generation_config != "vllm" &&
        !std::filesystem::exists(std::filesystem::path(generation_config) /
                                 "generation_config.json"))
        fail("generation_config '{}': not auto, vllm or a folder with a generation_config.json",
             generation_config);
    if (max_num_seqs < 1) fail("max_num_seqs must be at least 1, got {}", max_num_seqs);
    if (tensor_parallel_size < 1 || tensor_parallel_size > 64)
        fail("tensor_parallel_size must be in [1, 64], got {}", tensor_parallel_size);
    if (nnodes < 1 || tensor_parallel_size % nnodes != 0)
        fail("nnodes must be at least 1 and divide tensor_parallel_size {}, got {}",
             tensor_parallel_size, nnodes);
    if (node_rank < 0 || node_rank >= nnodes)
        fail("node_rank must be in [0, nnodes = {}), got {}", nnodes, node_rank);
    if (master_port < 0 || master_port > 65535)
        fail("master_port must be in [0, 65535], got {}", master_port);
    if (page_size < 1 || page_size > 1024)
        fail("page_size must be in [1, 1024], got {}", page_size);
    if (!(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0))
        fail("gpu_memory_utilization must be in (0, 1], got {}", gpu_memory_utilization);
    if (max_model_len < 0 || kv_cache_bytes < 0 || num_pages < 0 || max_num_batched_tokens < 0 ||
        num_state_slots < 0 || state_snapshot_interval < 1)
        fail(
            "max_model_len, kv_cache_bytes, num_pages, num_state_slots and max_num_batched_tokens "
            "must not be negative, state_snapshot_interval must be positive");
    if (max_model_len == 0) max_model_len = model.max_context_len();
    if (max_model_len > model.max_context_len())
        fail("max_model_len {} exceeds the model's {}", max_model_len,
             model.max_context_len() == model.max_position_embeddings
                 ? fmt::format("max_position_embeddings {}", model.max_position_embeddings)
                 : fmt::format("YaRN context {} (original_max_position_embeddings {} x factor {})",
                               model.max_context_len(),
                               model.rope_scaling.original_max_position_embeddings,
                               model.rope_scaling.factor));
    if (max_num_batched_tokens == 0)
        max_num_batched_tokens = default_max_num_batched_tokens(device, model.num_experts > 0);
    if (model.num_linear_attention_layers() > 0 && num_state_slots == 0 && device != "cuda")
        // A slot for every running request and, with prefix caching, as many for snapshots;
        // within the CPU cache's 4 GiB bound. (The CUDA runner sizes its own from free memory.)
        num_state_slots = std::clamp<int64_t>((int64_t(4) << 30) / model.gdn_state_bytes(), 1,
                                              max_num_seqs * (enable_prefix_caching ? 2 : 1));
    if (num_pages == 0 && device == "cuda")
        return;  // the CUDA runner sizes the cache from free memory
    if (num_pages == 0) {
        const int64_t per_token = kv_bytes_per_token(model);
        if (kv_cache_bytes == 0)  // enough for every sequence at up to 2048 tokens, capped at 4 GiB
            kv_cache_bytes = std::min<int64_t>(
                int64_t(4) << 30,
                max_num_seqs * std::min<int64_t>(max_model_len, 2048) * per_token);
        num_pages = kv_cache_bytes / (per_token * page_size);
    }
    const int64_t pages_for_one = (max_model_len + page_size - 1) / page_size;
    if (num_pages < 1) fail("the KV cache budget holds no page of {} tokens", page_size);
    if (num_pages < pages_for_one)
        max_model_len = num_pages * page_size;  // a request must fit the whole cache on its own
}

// One list of the fields for both directions, so a new field cannot be forgotten in one.
template <typename Config, typename Visit>
static void visit_fields(Config& c, Visit&& visit) {
    visit("model_dir", c.model_dir);
    visit("device", c.device);
    visit("load_format", c.load_format);
    visit("max_num_seqs", c.max_num_seqs);
    visit("max_model_len", c.max_model_len);
    visit("max_num_batched_tokens", c.max_num_batched_tokens);
    visit("page_size", c.page_size);
    visit("gpu_memory_utilization", c.gpu_memory_utilization);
    visit("kv_cache_bytes", c.kv_cache_bytes);
    visit("num_pages", c.num_pages);
    visit("num_state_slots", c.num_state_slots);
    visit("state_snapshot_interval", c.state_snapshot_interval);
    visit("enable_prefix_caching", c.enable_prefix_caching);
    visit("enforce_eager", c.enforce_eager);
    visit("disable_overlap", c.disable_overlap);
    visit("measure_gpu_idle", c.measure_gpu_idle);
    visit("attention_backend", c.attention_backend);
    visit("kv_cache_dtype", c.kv_cache_dtype);
    visit("tensor_parallel_size", c.tensor_parallel_size);
    visit("enable_expert_parallel", c.enable_expert_parallel);
    visit("nnodes", c.nnodes);
    visit("node_rank", c.node_rank);
    visit("master_addr", c.master_addr);
    visit("master_port", c.master_port);
    visit("scripted_outputs", c.scripted_outputs);
    visit("use_multiprocess", c.use_multiprocess);
    visit("detokenize", c.detokenize);
    visit("seed", c.seed);
    visit("generation_config", c.generation_config);
}

Json EngineConfig::to_json() const {
    Json j = Json::object();
    visit_fields(*this, [&](const char* name, const auto& value) { j[name] = value; });
    return j;
}

EngineConfig EngineConfig::from_json(const Json& json) {
    EngineConfig c;
    visit_fields(c, [&](const char* name, auto& value) {
        value = json_get<std::decay_t<decltype(value)>>(json, name, "engine config");
    });
    return c;
}

}  // namespace miniinfer
