#include "models/weights.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <optional>
#include <random>
#include <tuple>

#include <fmt/ranges.h>

#include "core/host_memory.h"
#include "core/logging.h"
#include "core/thread_pool.h"
#include "kernels/cpu/fp8_linear.h"
#include "loader/checkpoint.h"
#include "models/fp8_weights.h"
#include "models/hybrid_weights.h"
#include "models/weight_assembler.h"

namespace miniinfer {
namespace {

using Block = WeightBlock;

// The k/v projections' target: the rank's own share, or with fewer KV heads than ranks the one
// head it replicates (as rank r / (world / kv) of a world of kv).
WeightTarget kv_target(const ModelConfig& c, const WeightTarget& t) {
    if (t.world <= c.num_kv_heads) return t;
    WeightTarget kv = t;
    kv.world = c.num_kv_heads;
    kv.rank = t.rank / (t.world / c.num_kv_heads);
    return kv;
}

}  // namespace

std::pair<int64_t, int64_t> vocab_range(int64_t vocab_size, int64_t rank, int64_t world) {
    return expert_range(vocab_size, rank, world);
}

std::pair<int64_t, int64_t> expert_range(int64_t num_experts, int64_t rank, int64_t world) {
    return {num_experts * rank / world, num_experts * (rank + 1) / world};
}

int64_t kv_heads_per_rank(int64_t num_kv_heads, int64_t world) {
    return std::max<int64_t>(1, num_kv_heads / world);
}

namespace {

ModelWeights assemble(const ModelConfig& c, const CheckpointLayout& layout, const WeightTarget& t,
                      WeightAssembler& a) {
    const int64_t H = c.hidden_size, D = c.head_dim, q = c.q_size(), kv = c.kv_size();
    const Shard kCol = Shard::kColumn, kRow = Shard::kRow;
    const WeightTarget kv_t = kv_target(c, t);
    // A projection: its weight, and its block scales in an FP8 checkpoint.
    const auto projection = [&](const std::vector<WeightAssembler::Part>& parts,
                                const Shape& view = {}) {
        const ProjectionWeights p = assemble_projection(c, t, a, parts, view);
        return std::pair{p.weight, p.scale};
    };
    ModelWeights w;
    // Vocab-parallel: each rank holds a range of the vocabulary's rows (vocab_range).
    w.embed = a.single(layout.prefix + "embed_tokens.weight", {c.vocab_size, H}, kCol);
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const std::string p = fmt::format("{}layers.{}.", layout.prefix, l),
                          attn = p + "self_attn.", mlp = p + "mlp.";
        LayerWeights lw;
        lw.input_norm = a.single(p + "input_layernorm.weight", {H});
        lw.post_attention_norm = a.single(p + "post_attention_layernorm.weight", {H});
        if (c.is_linear_attention_layer(l)) {
            lw.linear_attn = assemble_linear_attention(c, layout, p + "linear_attn.", a);
        } else {
            if (c.attn_output_gate) {
                lw.qkv = assemble_gated_qkv(c, attn, a);
            } else {
                std::tie(lw.qkv, lw.qkv_scale) =
                    projection({{attn + "q_proj.weight", {q, H}, kCol},
                                {attn + "k_proj.weight", {kv, H}, kCol, kv_t},
                                {attn + "v_proj.weight", {kv, H}, kCol, kv_t}});
            }
            if (c.attention_bias)
                lw.qkv_bias = a.fused({{attn + "q_proj.bias", {q}, kCol},
                                       {attn + "k_proj.bias", {kv}, kCol, kv_t},
                                       {attn + "v_proj.bias", {kv}, kCol, kv_t}});
            if (c.qk_norm) {
                lw.q_norm = a.single(attn + "q_norm.weight", {D});
                lw.k_norm = a.single(attn + "k_norm.weight", {D});
            }
            std::tie(lw.o_proj, lw.o_proj_scale) =
                projection({{attn + "o_proj.weight", {H, q}, kRow}});
            // Replicated: added once to the row-parallel sum, not on every rank's partial.
            if (c.attention_bias && c.arch != Arch::kQwen2)
                lw.o_bias = a.single(attn + "o_proj.bias", {H});
        }
        if (c.is_moe_layer(l)) {
            // Expert parallelism keeps the experts whole (each rank uses its range of them).
            const int64_t E = c.num_experts, I = c.moe_intermediate_size,
                          I_r = t.expert_parallel ? I : I / t.world;
            const Shard e_col = t.expert_parallel ? Shard::kReplicated : kCol;
            const Shard e_row = t.expert_parallel ? Shard::kReplicated : kRow;
            lw.router = a.single(mlp + "gate.weight", {E, H});
            if (layout.fused_experts) {
                assemble_fused_experts(c, mlp, a, lw);
            } else {
                std::vector<WeightAssembler::Part> gate_up, down;
                for (int64_t e = 0; e < E; ++e) {
                    const std::string ep = fmt::format("{}experts.{}.", mlp, e);
                    gate_up.push_back({ep + "gate_proj.weight", {I, H}, e_col});
                    gate_up.push_back({ep + "up_proj.weight", {I, H}, e_col});
                    down.push_back({ep + "down_proj.weight", {H, I}, e_row});
                }
                std::tie(lw.experts_gate_up, lw.experts_gate_up_scale) =
                    projection(gate_up, {E, 2 * I_r, H});
                std::tie(lw.experts_down, lw.experts_down_scale) = projection(down, {E, H, I_r});
            }
            if (c.shared_expert_intermediate_size > 0) assemble_shared_expert(c, mlp, a, lw);
        } else {
            const int64_t I = c.intermediate_size;
            std::tie(lw.gate_up, lw.gate_up_scale) = projection(
                {{mlp + "gate_proj.weight", {I, H}, kCol}, {mlp + "up_proj.weight", {I, H}, kCol}});
            std::tie(lw.down, lw.down_scale) =
                projection({{mlp + "down_proj.weight", {H, I}, kRow}});
        }
        w.layers.push_back(std::move(lw));
    }
    w.norm = a.single(layout.prefix + "norm.weight", {H});
    w.lm_head =
        c.tie_word_embeddings ? w.embed : a.single("lm_head.weight", {c.vocab_size, H}, kCol);
    a.run(&w.stats);
    return w;
}

// A bad target is the user's error, found before any work.
void check_target(const ModelConfig& c, const WeightTarget& t) {
    if (t.dtype != DType::kF32 && t.dtype != DType::kBF16)
        fail("weights in {} are not supported (f32, bf16)", dtype_name(t.dtype));
    if (t.world < 1 || t.rank < 0 || t.rank >= t.world)
        fail("tensor-parallel rank {} of world {}: need world >= 1 and 0 <= rank < world", t.rank,
             t.world);
    if (c.is_hybrid() && (t.world > 1 || t.expert_parallel))
        fail(
            "model_type {}: tensor and expert parallelism are not supported for the hybrid Gated "
            "DeltaNet models yet",
            c.model_type);
    auto check_divides = [&](const char* what, int64_t n) {
        if (n % t.world != 0)
            fail("tensor-parallel world {} does not divide {} = {}", t.world, what, n);
    };
    check_divides("num_attention_heads", c.num_heads);
    if (t.world <= c.num_kv_heads)
        check_divides("num_key_value_heads", c.num_kv_heads);
    else if (t.world % c.num_kv_heads != 0)
        fail(
            "tensor-parallel world {} is not a multiple of num_key_value_heads = {} (KV heads are "
            "replicated when there are fewer than ranks)",
            t.world, c.num_kv_heads);
    bool any_dense = false, any_moe = false;
    for (int64_t l = 0; l < c.num_layers; ++l) (c.is_moe_layer(l) ? any_moe : any_dense) = true;
    if (any_dense) check_divides("intermediate_size", c.intermediate_size);
    if (any_moe && !t.expert_parallel)
        check_divides("moe_intermediate_size", c.moe_intermediate_size);
    if (any_moe && t.expert_parallel && c.num_experts < t.world)
        fail("expert parallelism over {} ranks needs at least as many experts ({})", t.world,
             c.num_experts);
}

// Copies `b` of checkpoint tensor `name` into dst as `dtype`, a few MiB of source at a time,
// giving each stretch's pages back once copied: even the embedding is never resident twice.
void copy_block(const Checkpoint& ckpt, const std::string& name, const Shape& shape, const Block& b,
                DType dtype, void* dst) {
    constexpr int64_t kStepBytes = 8 << 20;
    const Tensor src = ckpt.get(name, shape);
    const int64_t src_size = int64_t(dtype_size(src.dtype())), row_bytes = b.cols * src_size;
    const int64_t width = b.col_end - b.col_begin,
                  rows_per_step = std::max<int64_t>(1, kStepBytes / row_bytes);
    const auto* base = static_cast<const char*>(src.raw());
    auto* out = static_cast<char*>(dst);
    const size_t out_row_bytes = size_t(width) * dtype_size(dtype);
    for (int64_t r0 = b.row_begin; r0 < b.row_end; r0 += rows_per_step) {
        const int64_t r1 = std::min(b.row_end, r0 + rows_per_step);
        if (width == b.cols) {  // whole rows: one contiguous run
            convert_elements(base + r0 * row_bytes, src.dtype(), out, dtype, (r1 - r0) * b.cols);
            out += size_t(r1 - r0) * out_row_bytes;
        } else {  // a column slice: a piece of every row
            for (int64_t r = r0; r < r1; ++r, out += out_row_bytes)
                convert_elements(base + r * row_bytes + b.col_begin * src_size, src.dtype(), out,
                                 dtype, width);
        }
        ckpt.release(name, size_t(r0 * row_bytes), size_t(r1 * row_bytes));
    }
}

// The dummy tensor is generated whole, row by row in one seeded stream (so every target sees
// the same numbers), keeping only `b`'s part: one row of f32 at a time, never the tensor.
void generate_block(uint64_t seed, const std::string& name, const Shape& shape, const Block& b,
                    DType dtype, void* dst) {
    std::mt19937_64 rng(seed ^ std::hash<std::string>{}(name));
    std::normal_distribution<float> normal(0.f, 1.f);
    // An e4m3 weight is unit-scale: its block scales carry the 1 / sqrt(in_features).
    const DummyInit init = dtype == DType::kF8E4M3 ? DummyInit{} : dummy_init(name, shape);
    const int64_t width = b.col_end - b.col_begin;
    const size_t out_row_bytes = size_t(width) * dtype_size(dtype);
    std::vector<float> row(size_t(b.cols));
    auto* out = static_cast<char*>(dst);
    for (int64_t r = 0; r < b.row_end; ++r) {
        for (float& x : row)
            x = init.scale == 0.f ? init.constant : init.constant + normal(rng) * init.scale;
        if (r < b.row_begin) continue;
        convert_elements(row.data() + b.col_begin, DType::kF32, out, dtype, width);
        out += out_row_bytes;
    }
}

}  // namespace

DummyInit dummy_init(const std::string& name, const Shape& shape) {
    if (name.ends_with("weight_scale_inv")) {
        const float c = 1.f / std::sqrt(float(cpu::kFp8Block * shape.back()));
        return {.scale = c / 10.f, .constant = c};
    }
    if (name.find("norm") != std::string::npos) return {.scale = 0.f, .constant = 1.f};
    if (name.ends_with("bias")) return {.scale = 0.f, .constant = 0.f};
    if (shape.size() >= 2 && name.find("embed_tokens") == std::string::npos)
        return {.scale = 1.f / std::sqrt(float(shape[1]))};
    return {};
}

namespace {

// assemble_weights once the target has been checked.
ModelWeights assemble_checked(const ModelConfig& config, const CheckpointLayout& layout,
                              const WeightTarget& target, WeightWriter writer) {
    WeightAssembler a(std::move(writer), target);
    return assemble(config, layout, target, a);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::vector<std::pair<std::string, Shape>> expected_tensors(const ModelConfig& config) {
    return expected_tensors(config, default_layout(config));
}

std::vector<std::pair<std::string, Shape>> expected_tensors(const ModelConfig& config,
                                                            const CheckpointLayout& layout) {
    WeightAssembler plan(WeightWriter{}, WeightTarget{});
    assemble(config, layout, WeightTarget{}, plan);
    return plan.planned();
}

LoadFormat parse_load_format(const std::string& name) {
    if (name == "auto" || name == "safetensors") return LoadFormat::kSafetensors;
    if (name == "dummy") return LoadFormat::kDummy;
    fail("load format '{}' is not supported (auto, safetensors, dummy)", name);
}

namespace {
// An FP8 weight must be stored as e4m3 and nothing else may be: widening or narrowing either
// without its scales would load a different model.
void check_fp8_dtype(const Checkpoint& ckpt, const std::string& name, DType stored,
                     DType written_as, const ModelConfig& config) {
    const bool want_e4m3 = written_as == DType::kF8E4M3;
    if (want_e4m3 == (stored == DType::kF8E4M3)) return;
    if (want_e4m3)
        fail(
            "{}: tensor '{}' is {}, but quantization_config ({}) makes it an FP8 weight "
            "(F8_E4M3, with a weight_scale_inv)",
            ckpt.dir().string(), name, dtype_name(stored), config.quantization.describe());
    fail("{}: tensor '{}' is F8_E4M3, but quantization_config ({}) does not quantize it",
         ckpt.dir().string(), name, config.quantization.describe());
}

// A KV cache scale of the checkpoint: one positive number (shape [] or [1], any float dtype), or
// 0 when the checkpoint has no such tensor.
float kv_scale(const Checkpoint& ckpt, const std::string& name) {
    if (!ckpt.contains(name)) return 0.f;
    const Tensor t = ckpt.get_any(name);
    if (t.numel() != 1)
        fail("{}: tensor '{}' has shape {}, expected one number (a KV cache scale)",
             ckpt.dir().string(), name, shape_str(t.shape()));
    const float v = t.to_f32().data<float>()[0];
    if (!(v > 0.f) || !std::isfinite(v))
        fail("{}: KV cache scale '{}' is {}, expected a positive number", ckpt.dir().string(), name,
             v);
    return v;
}
}  // namespace

ModelWeights load_weights(const ModelConfig& config, const std::filesystem::path& model_dir,
                          const WeightTarget& target) {
    const auto start = std::chrono::steady_clock::now();
    check_target(config, target);
    Checkpoint ckpt = Checkpoint::open(model_dir);
    const CheckpointLayout layout = detect_layout(config, ckpt);
    WeightAssembler plan(WeightWriter{}, WeightTarget{});
    assemble(config, layout, WeightTarget{}, plan);
    const auto expected = plan.planned();
    const auto written_as = plan.planned_dtypes();
    for (const auto& [name, shape] : expected)  // all errors before any work
        check_fp8_dtype(ckpt, name, ckpt.get(name, shape).dtype(), written_as.at(name), config);
    // The KV cache scales an FP8-quantised checkpoint carries: per layer (k, v), 0 for none.
    std::vector<std::pair<float, float>> kv_scales;
    for (int64_t l = 0; l < config.num_layers; ++l) {
        const std::string prefix = fmt::format("{}layers.{}.self_attn.", layout.prefix, l);
        kv_scales.emplace_back(kv_scale(ckpt, prefix + "k_scale"),
                               kv_scale(ckpt, prefix + "v_scale"));
    }
    const UnusedTensors unused = unused_tensors(ckpt, expected);
    std::vector<std::string> skipped;
    if (unused.vision > 0)
        skipped.push_back(fmt::format(
            "{} vision tensors (model.visual.*: image input is not supported)", unused.vision));
    if (unused.mtp > 0)
        skipped.push_back(
            fmt::format("{} multi-token-prediction tensors (mtp.*: not supported)", unused.mtp));
    if (!skipped.empty())
        MI_LOG_INFO("{}: skipped {}", model_dir.string(), fmt::join(skipped, " and "));
    if (unused.other > 0)
        MI_LOG_WARN("{}: {} checkpoint tensors are not used by the model", model_dir.string(),
                    unused.other);
    WeightWriter writer;
    writer.write = [&](const std::string& name, const Shape& shape, const Block& b, DType dtype,
                       void* dst) { copy_block(ckpt, name, shape, b, dtype, dst); };
    ModelWeights w = assemble_checked(config, layout, target, std::move(writer));
    for (int64_t l = 0; l < config.num_layers; ++l)
        std::tie(w.layers[size_t(l)].k_scale, w.layers[size_t(l)].v_scale) = kv_scales[size_t(l)];
    LoadStats& s = w.stats;
    s.seconds = seconds_since(start);
    s.peak_host_bytes = peak_host_memory_bytes();
    MI_LOG_INFO(
        "loaded {} tensors, {:.2f} GB of {} (rank {} of {}) in {:.2f} s ({:.2f} GB/s), peak host "
        "memory {:.2f} GB",
        s.num_tensors, double(s.bytes_written) / 1e9, dtype_name(target.dtype), target.rank,
        target.world, s.seconds, double(s.bytes_written) / 1e9 / std::max(s.seconds, 1e-9),
        double(s.peak_host_bytes) / 1e9);
    return w;
}

ModelWeights dummy_weights(const ModelConfig& config, uint64_t seed, const WeightTarget& target) {
    const auto start = std::chrono::steady_clock::now();
    WeightWriter writer;
    writer.write = [&](const std::string& name, const Shape& shape, const Block& b, DType dtype,
                       void* dst) { generate_block(seed, name, shape, b, dtype, dst); };
    ModelWeights w = assemble_weights(config, target, std::move(writer));
    w.stats.seconds = seconds_since(start);
    w.stats.peak_host_bytes = peak_host_memory_bytes();
    return w;
}

ModelWeights assemble_weights(const ModelConfig& config, const WeightTarget& target,
                              WeightWriter writer) {
    check_target(config, target);
    return assemble_checked(config, default_layout(config), target, std::move(writer));
}

namespace {
// weight [..., rows, cols] e4m3 with scale [..., ceil(rows / 128), ceil(cols / 128)] -> f32.
void dequantize_in_place(Tensor& weight, Tensor& scale) {
    if (!scale.defined()) return;
    const int64_t rows = weight.size(-2), cols = weight.size(-1);
    const int64_t count = weight.numel() / (rows * cols);
    const int64_t scales_each = scale.numel() / count;
    Tensor out = Tensor::zeros(weight.shape(), DType::kF32);
    for (int64_t m = 0; m < count; ++m)
        cpu::dequantize_fp8_blocks(weight.data<uint8_t>() + m * rows * cols,
                                   scale.data<float>() + m * scales_each, rows, cols,
                                   out.data<float>() + m * rows * cols);
    weight = out;
    scale = Tensor();
}
}  // namespace

void dequantize_fp8_weights(ModelWeights& weights) {
    for (LayerWeights& l : weights.layers) for_each_fp8_projection(l, dequantize_in_place);
}

}  // namespace miniinfer
