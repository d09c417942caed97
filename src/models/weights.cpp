#include "models/weights.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "core/logging.h"
#include "core/thread_pool.h"
#include "loader/checkpoint.h"

namespace miniinfer {
namespace {

std::string layer_prefix(int64_t l) {
    return fmt::format("model.layers.{}.", l);
}

// Where a weight comes from: a checkpoint tensor, or seeded random numbers.
using Source = std::function<void(const std::string& name, const Shape& shape, float* dst)>;

// Collects (source tensor -> slice of a fused destination) copies, then runs them in parallel.
// Without a source it only lists the tensors it would read (and allocates nothing).
class Assembler {
  public:
    explicit Assembler(Source source) : source_(std::move(source)) {}

    // Concatenates the named tensors along dim 0 into one new f32 tensor, shaped `view` if given.
    Tensor fused(const std::vector<std::pair<std::string, Shape>>& parts, const Shape& view = {}) {
        if (!source_) {
            for (const auto& [name, s] : parts) jobs_.push_back({name, s, nullptr});
            return Tensor();
        }
        Shape shape = parts.at(0).second;
        int64_t row_elems = 1;
        for (size_t d = 1; d < shape.size(); ++d) row_elems *= shape[d];
        shape[0] = 0;
        for (const auto& [name, s] : parts) shape[0] += s[0];
        Tensor out = Tensor::zeros(shape, DType::kF32);
        float* dst = out.data<float>();
        for (const auto& [name, s] : parts) {
            jobs_.push_back({name, s, dst});
            dst += s[0] * row_elems;
        }
        return view.empty() ? out : out.view(view);
    }
    Tensor single(const std::string& name, const Shape& shape) { return fused({{name, shape}}); }

    std::vector<std::pair<std::string, Shape>> planned() const {
        std::vector<std::pair<std::string, Shape>> out;
        for (const auto& j : jobs_) out.emplace_back(j.name, j.shape);
        return out;
    }

    void run() {
        if (!source_) return;
        ThreadPool::global().parallel_for(int64_t(jobs_.size()), [&](int64_t begin, int64_t end) {
            for (int64_t i = begin; i < end; ++i)
                source_(jobs_[size_t(i)].name, jobs_[size_t(i)].shape, jobs_[size_t(i)].dst);
        });
    }

  private:
    struct Job {
        std::string name;
        Shape shape;
        float* dst;
    };
    Source source_;
    std::vector<Job> jobs_;
};

ModelWeights assemble(const ModelConfig& c, Assembler& a) {
    const int64_t H = c.hidden_size, D = c.head_dim, q = c.q_size(), kv = c.kv_size();
    ModelWeights w;
    w.embed = a.single("model.embed_tokens.weight", {c.vocab_size, H});
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const std::string p = layer_prefix(l), attn = p + "self_attn.", mlp = p + "mlp.";
        LayerWeights lw;
        lw.input_norm = a.single(p + "input_layernorm.weight", {H});
        lw.post_attention_norm = a.single(p + "post_attention_layernorm.weight", {H});
        lw.qkv = a.fused({{attn + "q_proj.weight", {q, H}},
                          {attn + "k_proj.weight", {kv, H}},
                          {attn + "v_proj.weight", {kv, H}}});
        if (c.attention_bias)
            lw.qkv_bias = a.fused({{attn + "q_proj.bias", {q}},
                                   {attn + "k_proj.bias", {kv}},
                                   {attn + "v_proj.bias", {kv}}});
        if (c.qk_norm) {
            lw.q_norm = a.single(attn + "q_norm.weight", {D});
            lw.k_norm = a.single(attn + "k_norm.weight", {D});
        }
        lw.o_proj = a.single(attn + "o_proj.weight", {H, q});
        if (c.attention_bias && c.arch != Arch::kQwen2)
            lw.o_bias = a.single(attn + "o_proj.bias", {H});
        if (c.is_moe_layer(l)) {
            const int64_t I = c.moe_intermediate_size;
            lw.router = a.single(mlp + "gate.weight", {c.num_experts, H});
            std::vector<std::pair<std::string, Shape>> gate_up, down;
            for (int64_t e = 0; e < c.num_experts; ++e) {
                const std::string ep = fmt::format("{}experts.{}.", mlp, e);
                gate_up.push_back({ep + "gate_proj.weight", {I, H}});
                gate_up.push_back({ep + "up_proj.weight", {I, H}});
                down.push_back({ep + "down_proj.weight", {H, I}});
            }
            lw.experts_gate_up = a.fused(gate_up, {c.num_experts, 2 * I, H});
            lw.experts_down = a.fused(down, {c.num_experts, H, I});
        } else {
            const int64_t I = c.intermediate_size;
            lw.gate_up =
                a.fused({{mlp + "gate_proj.weight", {I, H}}, {mlp + "up_proj.weight", {I, H}}});
            lw.down = a.single(mlp + "down_proj.weight", {H, I});
        }
        w.layers.push_back(std::move(lw));
    }
    w.norm = a.single("model.norm.weight", {H});
    w.lm_head = c.tie_word_embeddings ? w.embed : a.single("lm_head.weight", {c.vocab_size, H});
    a.run();
    return w;
}

}  // namespace

std::vector<std::pair<std::string, Shape>> expected_tensors(const ModelConfig& config) {
    Assembler plan(nullptr);
    assemble(config, plan);
    return plan.planned();
}

LoadFormat parse_load_format(const std::string& name) {
    if (name == "auto" || name == "safetensors") return LoadFormat::kSafetensors;
    if (name == "dummy") return LoadFormat::kDummy;
    fail("load format '{}' is not supported (auto, safetensors, dummy)", name);
}

ModelWeights load_weights(const ModelConfig& config, const std::filesystem::path& model_dir) {
    Checkpoint ckpt = Checkpoint::open(model_dir);
    auto expected = expected_tensors(config);
    for (const auto& [name, shape] : expected) ckpt.get(name, shape);  // all errors before any work
    if (ckpt.num_tensors() > expected.size())
        MI_LOG_WARN("{}: {} checkpoint tensors are not used by the model", model_dir.string(),
                    ckpt.num_tensors() - expected.size());
    Assembler a([&](const std::string& name, const Shape& shape, float* dst) {
        copy_to_f32(ckpt.get(name, shape), dst);
    });
    return assemble(config, a);
}

ModelWeights dummy_weights(const ModelConfig& config, uint64_t seed) {
    Assembler a([&](const std::string& name, const Shape& shape, float* dst) {
        std::mt19937_64 rng(seed ^ std::hash<std::string>{}(name));
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        const bool is_norm = name.find("norm") != std::string::npos;
        const bool is_bias = name.ends_with("bias");
        const float scale = shape.size() == 2 && !name.starts_with("model.embed")
                                ? 1.f / std::sqrt(float(shape[1]))
                                : 1.f;
        std::normal_distribution<float> normal(0.f, 1.f);
        for (int64_t i = 0; i < n; ++i)
            dst[i] = is_norm ? 1.f : is_bias ? 0.f : normal(rng) * scale;
    });
    return assemble(config, a);
}

}  // namespace miniinfer
