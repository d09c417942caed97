// Loading the hybrid Gated DeltaNet checkpoints (tests/fixtures/qwen3.5-tiny, qwen3.5-moe-tiny,
// qwen3-next-tiny) into the one layout models/weights.h documents: every field's shape, and its
// values against the safetensors, index by index, written from transformers' modeling code
// (Qwen3-Next's fix_query_key_value_ordering, the q_proj chunk into query and gate).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "loader/checkpoint.h"
#include "models/qwen_model.h"
#include "models/weights.h"
#include "safetensors_writer.h"

using namespace miniinfer;
using namespace miniinfer::testing;
using ::testing::HasSubstr;

namespace {
const std::filesystem::path kFixtures = MINIINFER_FIXTURES;
const char* const kHybrids[] = {"qwen3.5-tiny", "qwen3.5-moe-tiny", "qwen3-next-tiny"};

// Every tensor field of `w`, named (the hybrid ones too).
std::vector<std::pair<std::string, Tensor>> fields(const ModelWeights& w) {
    std::vector<std::pair<std::string, Tensor>> out = {
        {"embed", w.embed}, {"norm", w.norm}, {"lm_head", w.lm_head}};
    for (size_t l = 0; l < w.layers.size(); ++l) {
        const LayerWeights& lw = w.layers[l];
        const LinearAttentionWeights& la = lw.linear_attn;
        const std::pair<const char*, Tensor> named[] = {
            {"input_norm", lw.input_norm},
            {"post_attention_norm", lw.post_attention_norm},
            {"qkv", lw.qkv},
            {"q_norm", lw.q_norm},
            {"k_norm", lw.k_norm},
            {"o_proj", lw.o_proj},
            {"gate_up", lw.gate_up},
            {"down", lw.down},
            {"router", lw.router},
            {"experts_gate_up", lw.experts_gate_up},
            {"experts_down", lw.experts_down},
            {"shared_gate_up", lw.shared_gate_up},
            {"shared_down", lw.shared_down},
            {"shared_expert_gate", lw.shared_expert_gate},
            {"in_proj_qkv", la.in_proj_qkv},
            {"in_proj_z", la.in_proj_z},
            {"in_proj_b", la.in_proj_b},
            {"in_proj_a", la.in_proj_a},
            {"conv1d", la.conv1d},
            {"A_log", la.A_log},
            {"dt_bias", la.dt_bias},
            {"linear_norm", la.norm},
            {"out_proj", la.out_proj}};
        for (const auto& [name, t] : named) out.emplace_back(fmt::format("{}.{}", l, name), t);
    }
    return out;
}

// A checkpoint tensor in f32, flat.
std::vector<float> source(const Checkpoint& ckpt, const std::string& name) {
    const Tensor t = ckpt.get_any(name).to_f32();
    return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

// Row r (of `cols` elements) of a loaded f32 tensor, and of a flat source.
std::vector<float> row(const Tensor& t, int64_t r) {
    const int64_t cols = t.numel() / t.size(0);
    return std::vector<float>(t.data<float>() + r * cols, t.data<float>() + (r + 1) * cols);
}
std::vector<float> row(const std::vector<float>& flat, int64_t cols, int64_t r) {
    return std::vector<float>(flat.begin() + r * cols, flat.begin() + (r + 1) * cols);
}

std::vector<float> values(const Tensor& t) {
    return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

// The fixture's config and checkpoint in a fresh directory, without the tensors `drop`.
std::filesystem::path copy_without(const std::string& fixture, const std::string& tag,
                                   const std::set<std::string>& drop) {
    auto dir = fresh_dir(tag);
    std::filesystem::copy_file(kFixtures / fixture / "config.json", dir / "config.json");
    SafetensorsFile src = SafetensorsFile::open(kFixtures / fixture / "model.safetensors");
    std::vector<FakeTensor> kept;
    for (const auto& [name, e] : src.entries()) {
        if (drop.count(name)) continue;
        Tensor t = src.tensor(name);
        const auto* p = static_cast<const uint8_t*>(t.raw());
        kept.push_back({name, e.dtype_name, e.shape, std::vector<uint8_t>(p, p + t.nbytes())});
    }
    write_safetensors(dir / "model.safetensors", kept);
    return dir;
}
}  // namespace

// Qwen3.5's flat save: in_proj_qkv / z / b / a as stored, conv1d [C, 1, K] -> [C, K], and the
// full-attention q_proj's per-head [query; gate] rows de-interleaved into [q; k; v; gate].
TEST(HybridWeights, Qwen35DenseLayout) {
    const auto dir = kFixtures / "qwen3.5-tiny";
    const ModelConfig c = ModelConfig::load(dir);
    const ModelWeights w = load_weights(c, dir);
    const Checkpoint ckpt = Checkpoint::open(dir);
    const int64_t H = c.hidden_size, D = c.head_dim, q = c.q_size(), kv = c.kv_size();
    const LinearAttentionConfig& g = c.linear_attention;
    ASSERT_EQ(w.layers.size(), 8u);
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const LayerWeights& lw = w.layers[size_t(l)];
        const std::string p = fmt::format("model.layers.{}.", l);
        EXPECT_EQ(lw.gate_up.shape(), (Shape{2 * c.intermediate_size, H}));
        EXPECT_EQ(values(lw.input_norm), source(ckpt, p + "input_layernorm.weight"));
        if (c.is_linear_attention_layer(l)) {
            const LinearAttentionWeights& la = lw.linear_attn;
            EXPECT_FALSE(lw.qkv.defined());
            EXPECT_FALSE(lw.o_proj.defined());
            EXPECT_EQ(la.in_proj_qkv.shape(), (Shape{g.conv_dim(), H}));
            EXPECT_EQ(la.in_proj_z.shape(), (Shape{g.value_dim(), H}));
            EXPECT_EQ(la.in_proj_b.shape(), (Shape{g.num_value_heads, H}));
            EXPECT_EQ(la.in_proj_a.shape(), (Shape{g.num_value_heads, H}));
            EXPECT_EQ(la.conv1d.shape(), (Shape{g.conv_dim(), g.conv_kernel_dim}));
            EXPECT_EQ(la.A_log.shape(), (Shape{g.num_value_heads}));
            EXPECT_EQ(la.norm.shape(), (Shape{g.value_head_dim}));
            EXPECT_EQ(la.out_proj.shape(), (Shape{H, g.value_dim()}));
            const std::string a = p + "linear_attn.";
            for (const auto& [t, name] : {std::pair{la.in_proj_qkv, "in_proj_qkv.weight"},
                                          {la.in_proj_z, "in_proj_z.weight"},
                                          {la.in_proj_b, "in_proj_b.weight"},
                                          {la.in_proj_a, "in_proj_a.weight"},
                                          {la.conv1d, "conv1d.weight"},
                                          {la.A_log, "A_log"},
                                          {la.dt_bias, "dt_bias"},
                                          {la.norm, "norm.weight"},
                                          {la.out_proj, "out_proj.weight"}})
                EXPECT_EQ(values(t), source(ckpt, a + name)) << l << " " << name;
            continue;
        }
        EXPECT_FALSE(lw.linear_attn.defined());
        ASSERT_EQ(lw.qkv.shape(), (Shape{2 * q + 2 * kv, H}));
        // transformers: q_proj(x).view(..., heads, 2 D).chunk(2): head h's query rows are
        // [2 h D, 2 h D + D), its gate rows the next D.
        const auto q_proj = source(ckpt, p + "self_attn.q_proj.weight");
        const auto k_proj = source(ckpt, p + "self_attn.k_proj.weight");
        const auto v_proj = source(ckpt, p + "self_attn.v_proj.weight");
        for (int64_t h = 0; h < c.num_heads; ++h)
            for (int64_t i = 0; i < D; ++i) {
                EXPECT_EQ(row(lw.qkv, h * D + i), row(q_proj, H, 2 * h * D + i));
                EXPECT_EQ(row(lw.qkv, q + 2 * kv + h * D + i), row(q_proj, H, 2 * h * D + D + i));
            }
        for (int64_t i = 0; i < kv; ++i) {
            EXPECT_EQ(row(lw.qkv, q + i), row(k_proj, H, i));
            EXPECT_EQ(row(lw.qkv, q + kv + i), row(v_proj, H, i));
        }
        EXPECT_EQ(lw.o_proj.shape(), (Shape{H, q}));
        EXPECT_EQ(values(lw.q_norm), source(ckpt, p + "self_attn.q_norm.weight"));
    }
    EXPECT_NE(w.lm_head.raw(), w.embed.raw());
}

// Qwen3-Next's in_proj_qkvz / in_proj_ba, grouped per key head, split into Qwen3.5's parts.
TEST(HybridWeights, Qwen3NextSplitsTheGroupedProjections) {
    const auto dir = kFixtures / "qwen3-next-tiny";
    const ModelConfig c = ModelConfig::load(dir);
    const ModelWeights w = load_weights(c, dir);
    const Checkpoint ckpt = Checkpoint::open(dir);
    const LinearAttentionConfig& g = c.linear_attention;
    const int64_t H = c.hidden_size, nk = g.num_key_heads, dk = g.key_head_dim,
                  dv = g.value_head_dim, r = g.num_value_heads / nk, kd = g.key_dim();
    const int64_t stride = 2 * dk + 2 * r * dv;  // one key head's rows of in_proj_qkvz
    for (int64_t l : {0, 1, 2}) {
        const LinearAttentionWeights& la = w.layers[size_t(l)].linear_attn;
        const std::string p = fmt::format("model.layers.{}.linear_attn.", l);
        const auto qkvz = source(ckpt, p + "in_proj_qkvz.weight");
        const auto ba = source(ckpt, p + "in_proj_ba.weight");
        ASSERT_EQ(la.in_proj_qkv.shape(), (Shape{g.conv_dim(), H}));
        ASSERT_EQ(la.in_proj_z.shape(), (Shape{g.value_dim(), H}));
        ASSERT_EQ(la.in_proj_b.shape(), (Shape{g.num_value_heads, H}));
        // fix_query_key_value_ordering: [ng, 2 dk + 2 r dv] split into q, k, v, z; v and z
        // reshaped so that value head g r + j is key head g's j-th.
        for (int64_t kh = 0; kh < nk; ++kh) {
            for (int64_t i = 0; i < dk; ++i) {
                EXPECT_EQ(row(la.in_proj_qkv, kh * dk + i), row(qkvz, H, kh * stride + i));
                EXPECT_EQ(row(la.in_proj_qkv, kd + kh * dk + i),
                          row(qkvz, H, kh * stride + dk + i));
            }
            for (int64_t j = 0; j < r; ++j) {
                const int64_t vh = kh * r + j;
                for (int64_t i = 0; i < dv; ++i) {
                    EXPECT_EQ(row(la.in_proj_qkv, 2 * kd + vh * dv + i),
                              row(qkvz, H, kh * stride + 2 * dk + j * dv + i));
                    EXPECT_EQ(row(la.in_proj_z, vh * dv + i),
                              row(qkvz, H, kh * stride + 2 * dk + r * dv + j * dv + i));
                }
                EXPECT_EQ(row(la.in_proj_b, vh), row(ba, H, kh * 2 * r + j));
                EXPECT_EQ(row(la.in_proj_a, vh), row(ba, H, kh * 2 * r + r + j));
            }
        }
        EXPECT_EQ(values(la.conv1d), source(ckpt, p + "conv1d.weight"));
        EXPECT_EQ(values(la.A_log), source(ckpt, p + "A_log"));
    }
    // Per-expert experts stacked, the shared expert's gate/up fused; layer 1 dense.
    const int64_t I = c.moe_intermediate_size, S = c.shared_expert_intermediate_size;
    const LayerWeights& l2 = w.layers[2];
    EXPECT_EQ(l2.experts_gate_up.shape(), (Shape{16, 2 * I, H}));
    const auto up5 = source(ckpt, "model.layers.2.mlp.experts.5.up_proj.weight");
    EXPECT_EQ(l2.experts_gate_up.data<float>()[(5 * 2 * I + I) * H + 7], up5[7]);
    EXPECT_EQ(l2.shared_gate_up.shape(), (Shape{2 * S, H}));
    EXPECT_EQ(row(l2.shared_gate_up, S),
              row(source(ckpt, "model.layers.2.mlp.shared_expert.up_proj.weight"), H, 0));
    EXPECT_EQ(l2.shared_down.shape(), (Shape{H, S}));
    EXPECT_EQ(values(l2.shared_expert_gate),
              source(ckpt, "model.layers.2.mlp.shared_expert_gate.weight"));
    const LayerWeights& l1 = w.layers[1];
    EXPECT_FALSE(l1.experts_gate_up.defined());
    EXPECT_FALSE(l1.shared_gate_up.defined());
    EXPECT_EQ(l1.gate_up.shape(), (Shape{2 * c.intermediate_size, H}));
    EXPECT_EQ(w.layers[3].qkv.shape(), (Shape{2 * c.q_size() + 2 * c.kv_size(), H}));
}

// The multimodal Qwen3.5-MoE: model.language_model.*, fused experts, F32 A_log and gated norm
// among bf16 tensors, the vision tower and the MTP layer skipped.
TEST(HybridWeights, Qwen35MoeMultimodal) {
    const auto dir = kFixtures / "qwen3.5-moe-tiny";
    const ModelConfig c = ModelConfig::load(dir);
    const Checkpoint ckpt = Checkpoint::open(dir);
    const CheckpointLayout layout = detect_layout(c, ckpt);
    EXPECT_EQ(layout, default_layout(c));
    EXPECT_EQ(layout.prefix, "model.language_model.");
    EXPECT_TRUE(layout.fused_experts);
    EXPECT_FALSE(layout.grouped_gdn);
    const ModelWeights w = load_weights(c, dir);
    const ModelWeights bf16 = load_weights(c, dir, {.dtype = DType::kBF16});
    const int64_t E = c.num_experts, I = c.moe_intermediate_size, H = c.hidden_size;
    const std::string p = "model.language_model.layers.";
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const LayerWeights& lw = w.layers[size_t(l)];
        const std::string mlp = fmt::format("{}{}.mlp.", p, l);
        ASSERT_EQ(lw.experts_gate_up.shape(), (Shape{E, 2 * I, H}));
        ASSERT_EQ(lw.experts_down.shape(), (Shape{E, H, I}));
        EXPECT_EQ(values(lw.experts_gate_up), source(ckpt, mlp + "experts.gate_up_proj"));
        EXPECT_EQ(values(lw.experts_down), source(ckpt, mlp + "experts.down_proj"));
        EXPECT_EQ(values(lw.router), source(ckpt, mlp + "gate.weight"));
        EXPECT_EQ(lw.shared_gate_up.shape(), (Shape{2 * c.shared_expert_intermediate_size, H}));
        EXPECT_EQ(lw.shared_expert_gate.shape(), (Shape{1, H}));
    }
    // F32 sources: exact in the f32 load, rounded in the bf16 one.
    const std::string a_log = p + "0.linear_attn.A_log";
    ASSERT_EQ(ckpt.get_any(a_log).dtype(), DType::kF32);
    const Tensor& a32 = w.layers[0].linear_attn.A_log;
    EXPECT_EQ(values(a32), source(ckpt, a_log));
    for (int64_t i = 0; i < a32.numel(); ++i)
        EXPECT_EQ(bf16.layers[0].linear_attn.A_log.data<uint16_t>()[i],
                  f32_to_bf16(a32.data<float>()[i]));
    ASSERT_EQ(ckpt.get_any(p + "2.linear_attn.norm.weight").dtype(), DType::kF32);
    EXPECT_EQ(values(w.layers[2].linear_attn.norm), source(ckpt, p + "2.linear_attn.norm.weight"));

    // What is skipped, by kind; nothing else is left over.
    int64_t num_visual = 0, num_mtp = 0;
    for (const std::string& name : ckpt.names()) {
        num_visual += name.starts_with("model.visual.");
        num_mtp += name.starts_with("mtp.");
    }
    const auto expected = expected_tensors(c, layout);
    const UnusedTensors unused = unused_tensors(ckpt, expected);
    EXPECT_GT(num_visual, 0);
    EXPECT_GT(num_mtp, 0);
    EXPECT_EQ(unused.vision, num_visual);
    EXPECT_EQ(unused.mtp, num_mtp);
    EXPECT_EQ(unused.other, 0);
    EXPECT_EQ(int64_t(expected.size()) + num_visual + num_mtp, int64_t(ckpt.num_tensors()));
    EXPECT_EQ(w.stats.num_tensors, int64_t(expected.size()));
}

// Each source tensor is listed once (even when it is read in parts), every fixture's checkpoint
// is the expected tensors plus what is skipped, and the bf16 load is the f32 one rounded.
TEST(HybridWeights, EveryFixtureLoadsInF32AndBf16) {
    for (const char* name : kHybrids) {
        SCOPED_TRACE(name);
        const ModelConfig c = ModelConfig::load(kFixtures / name);
        const Checkpoint ckpt = Checkpoint::open(kFixtures / name);
        const auto expected = expected_tensors(c, detect_layout(c, ckpt));
        std::set<std::string> names;
        for (const auto& [n, shape] : expected) EXPECT_TRUE(names.insert(n).second) << n;
        EXPECT_EQ(unused_tensors(ckpt, expected).other, 0);
        const ModelWeights f32 = load_weights(c, kFixtures / name);
        const ModelWeights bf16 = load_weights(c, kFixtures / name, {.dtype = DType::kBF16});
        EXPECT_EQ(f32.stats.num_tensors, int64_t(expected.size()));
        int64_t bytes = 0;
        const auto ff = fields(f32), bf = fields(bf16);
        for (size_t i = 0; i < ff.size(); ++i) {
            const Tensor &a = ff[i].second, &b = bf[i].second;
            ASSERT_EQ(a.defined(), b.defined()) << ff[i].first;
            if (!a.defined()) continue;
            bytes += int64_t(a.nbytes());
            ASSERT_EQ(a.shape(), b.shape()) << ff[i].first;
            for (int64_t e = 0; e < a.numel(); ++e)
                ASSERT_EQ(b.data<uint16_t>()[e], f32_to_bf16(a.data<float>()[e]))
                    << ff[i].first << " @" << e;
        }
        EXPECT_EQ(f32.stats.bytes_written, bytes);
        // Dummy weights take the same layout.
        const ModelWeights dummy = dummy_weights(c, 1);
        const auto df = fields(dummy);
        for (size_t i = 0; i < ff.size(); ++i)
            EXPECT_EQ(df[i].second.shape(), ff[i].second.shape()) << ff[i].first;
    }
}

// A multimodal checkpoint's files under the text model's own config (qwen3_5_moe_text, whose
// default names are model.*): the loader finds model.language_model.* and loads the same
// weights.
TEST(HybridWeights, LayoutFoundFromTheCheckpointNames) {
    auto dir = fresh_dir("hybrid_text_config");
    std::filesystem::copy_file(kFixtures / "qwen3.5-moe-tiny" / "model.safetensors",
                               dir / "model.safetensors");
    std::ofstream(dir / "config.json")
        << read_json_file(kFixtures / "qwen3.5-moe-tiny" / "config.json")["text_config"].dump();
    const ModelConfig c = ModelConfig::load(dir);
    EXPECT_EQ(default_layout(c).prefix, "model.");
    EXPECT_EQ(detect_layout(c, Checkpoint::open(dir)).prefix, "model.language_model.");
    const ModelWeights w = load_weights(c, dir);
    const ModelWeights ref = load_weights(ModelConfig::load(kFixtures / "qwen3.5-moe-tiny"),
                                          kFixtures / "qwen3.5-moe-tiny");
    const auto wf = fields(w), rf = fields(ref);
    ASSERT_EQ(wf.size(), rf.size());
    for (size_t i = 0; i < wf.size(); ++i)
        if (rf[i].second.defined()) {
            EXPECT_EQ(values(wf[i].second), values(rf[i].second)) << rf[i].first;
        }
}

TEST(HybridWeights, MissingOrMisshapenTensorsAreNamed) {
    auto next = copy_without("qwen3-next-tiny", "hybrid_missing_ba",
                             {"model.layers.2.linear_attn.in_proj_ba.weight"});
    EXPECT_THAT(
        error_message([&] { load_weights(ModelConfig::load(next), next); }),
        HasSubstr("checkpoint has no tensor 'model.layers.2.linear_attn.in_proj_ba.weight'"));
    auto moe = copy_without("qwen3.5-moe-tiny", "hybrid_missing_alog",
                            {"model.language_model.layers.1.linear_attn.A_log"});
    EXPECT_THAT(error_message([&] { load_weights(ModelConfig::load(moe), moe); }),
                HasSubstr("no tensor 'model.language_model.layers.1.linear_attn.A_log'"));
    auto gate = copy_without("qwen3.5-moe-tiny", "hybrid_missing_shared_gate",
                             {"model.language_model.layers.3.mlp.shared_expert_gate.weight"});
    EXPECT_THAT(
        error_message([&] { load_weights(ModelConfig::load(gate), gate); }),
        HasSubstr("no tensor 'model.language_model.layers.3.mlp.shared_expert_gate.weight'"));

    // A config whose sizes are not the checkpoint's: the first tensor that disagrees, named.
    auto dir = fresh_dir("hybrid_misshapen");
    std::filesystem::copy_file(kFixtures / "qwen3.5-tiny" / "model.safetensors",
                               dir / "model.safetensors");
    Json json = read_json_file(kFixtures / "qwen3.5-tiny" / "config.json");
    json["linear_num_value_heads"] = 4;
    std::ofstream(dir / "config.json") << json.dump();
    EXPECT_THAT(error_message([&] { load_weights(ModelConfig::load(dir), dir); }),
                HasSubstr("tensor 'model.layers.0.linear_attn.in_proj_qkv.weight' has shape "
                          "[640, 64], expected [512, 64] from config.json"));
    json = read_json_file(kFixtures / "qwen3.5-tiny" / "config.json");
    json["linear_conv_kernel_dim"] = 3;
    std::ofstream(dir / "config.json") << json.dump();
    EXPECT_THAT(error_message([&] { load_weights(ModelConfig::load(dir), dir); }),
                HasSubstr("'model.layers.0.linear_attn.conv1d.weight' has shape [640, 1, 4], "
                          "expected [640, 1, 3]"));
}

TEST(HybridWeights, ParallelismRefused) {
    const ModelConfig c = ModelConfig::load(kFixtures / "qwen3.5-tiny");
    EXPECT_THAT(error_message(
                    [&] { load_weights(c, kFixtures / "qwen3.5-tiny", {.rank = 0, .world = 2}); }),
                HasSubstr("model_type qwen3_5_text: tensor and expert parallelism are not "
                          "supported for the hybrid Gated DeltaNet models yet"));
}
