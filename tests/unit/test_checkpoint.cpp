#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "loader/checkpoint.h"
#include "models/weights.h"
#include "safetensors_writer.h"

using namespace miniinfer;
using namespace miniinfer::testing;
using ::testing::HasSubstr;

namespace {
const std::filesystem::path kFixtures = MINIINFER_FIXTURES;

// A copy of a fixture's config and checkpoint files in a fresh directory.
std::filesystem::path copy_fixture(const std::string& name, const std::string& tag) {
    auto dir = fresh_dir(tag);
    for (const auto& e : std::filesystem::directory_iterator(kFixtures / name))
        if (e.path().extension() == ".json" || e.path().filename().string().starts_with("model"))
            std::filesystem::copy_file(e.path(), dir / e.path().filename());
    return dir;
}
}  // namespace

TEST(Checkpoint, ShardedIndex) {
    Checkpoint ckpt = Checkpoint::open(kFixtures / "qwen2-tiny");
    EXPECT_EQ(ckpt.files().size(), 14u);
    EXPECT_EQ(ckpt.num_tensors(), 27u);
    EXPECT_TRUE(ckpt.contains("model.layers.1.self_attn.q_proj.bias"));
    EXPECT_EQ(ckpt.num_bytes(), size_t(ckpt.num_params()) * 2);  // all bf16
}

TEST(Checkpoint, MissingAndMisshapenTensors) {
    Checkpoint ckpt = Checkpoint::open(kFixtures / "qwen3-tiny");
    EXPECT_THAT(error_message([&] { ckpt.get("model.layers.9.mlp.up_proj.weight", {1}); }),
                HasSubstr("checkpoint has no tensor 'model.layers.9.mlp.up_proj.weight'"));
    std::string err = error_message([&] { ckpt.get("model.norm.weight", {64}); });
    EXPECT_THAT(
        err,
        HasSubstr("model.safetensors: tensor 'model.norm.weight' has shape [128], expected [64]"));
}

TEST(Checkpoint, BrokenDirectories) {
    EXPECT_THAT(error_message([&] { Checkpoint::open(kFixtures / "does-not-exist"); }),
                HasSubstr("not a directory"));
    auto empty = fresh_dir("ckpt_empty");
    EXPECT_THAT(error_message([&] { Checkpoint::open(empty); }), HasSubstr("no model.safetensors"));

    // The index names a shard that is not there.
    auto dir = copy_fixture("qwen2-tiny", "ckpt_noshard");
    std::filesystem::remove(dir / "model-00003-of-00014.safetensors");
    EXPECT_THAT(error_message([&] { Checkpoint::open(dir); }),
                HasSubstr("model-00003-of-00014.safetensors: cannot open"));

    // The index places a tensor in a shard that does not hold it.
    auto dir2 = copy_fixture("qwen2-tiny", "ckpt_badindex");
    Json index = read_json_file(dir2 / "model.safetensors.index.json");
    index["weight_map"]["model.norm.weight"] = "model-00001-of-00014.safetensors";
    std::ofstream(dir2 / "model.safetensors.index.json") << index.dump();
    EXPECT_THAT(error_message([&] { Checkpoint::open(dir2); }),
                HasSubstr("tensor 'model.norm.weight'"));
}

TEST(Weights, TruncatedCheckpointNamesTheFile) {
    auto dir = copy_fixture("qwen3-tiny", "weights_trunc");
    auto file = dir / "model.safetensors";
    std::filesystem::resize_file(file, std::filesystem::file_size(file) / 2);
    ModelConfig config = ModelConfig::load(dir);
    std::string err = error_message([&] { load_weights(config, dir); });
    EXPECT_THAT(err, HasSubstr(file.string()));
    EXPECT_THAT(err, HasSubstr("truncated"));
}

TEST(Weights, MissingTensorNamesTheTensor) {
    auto dir = copy_fixture("qwen3-tiny", "weights_missing");
    // Rewrite the checkpoint without one tensor.
    SafetensorsFile src = SafetensorsFile::open(kFixtures / "qwen3-tiny" / "model.safetensors");
    std::vector<FakeTensor> kept;
    for (const auto& [name, e] : src.entries()) {
        if (name == "model.layers.2.self_attn.k_norm.weight") continue;
        Tensor t = src.tensor(name);
        const auto* p = static_cast<const uint8_t*>(t.raw());
        kept.push_back({name, e.dtype_name, e.shape, std::vector<uint8_t>(p, p + t.nbytes())});
    }
    write_safetensors(dir / "model.safetensors", kept);
    ModelConfig config = ModelConfig::load(dir);
    EXPECT_THAT(error_message([&] { load_weights(config, dir); }),
                HasSubstr("no tensor 'model.layers.2.self_attn.k_norm.weight'"));
}

TEST(Weights, WrongDtypeInCheckpoint) {
    auto dir = fresh_dir("weights_dtype");
    std::filesystem::copy_file(kFixtures / "qwen3-tiny" / "config.json", dir / "config.json");
    SafetensorsFile src = SafetensorsFile::open(kFixtures / "qwen3-tiny" / "model.safetensors");
    std::vector<FakeTensor> tensors;
    for (const auto& [name, e] : src.entries()) {
        Tensor t = src.tensor(name);
        const auto* p = static_cast<const uint8_t*>(t.raw());
        // Same bytes, declared as I16: the shape is right, the dtype is not.
        tensors.push_back({name, name == "model.norm.weight" ? "I16" : e.dtype_name, e.shape,
                           std::vector<uint8_t>(p, p + t.nbytes())});
    }
    write_safetensors(dir / "model.safetensors", tensors);
    EXPECT_THAT(error_message([&] { load_weights(ModelConfig::load(dir), dir); }),
                HasSubstr("'model.norm.weight' has dtype I16"));
}

TEST(Weights, FusionLayout) {
    ModelConfig c = ModelConfig::load(kFixtures / "qwen2-tiny");
    ModelWeights w = load_weights(c, kFixtures / "qwen2-tiny");
    Checkpoint ckpt = Checkpoint::open(kFixtures / "qwen2-tiny");
    const LayerWeights& l1 = w.layers[1];
    EXPECT_EQ(l1.qkv.shape(), (Shape{c.q_size() + 2 * c.kv_size(), c.hidden_size}));
    // Row 0 of k_proj sits right after q_proj's rows; v_proj's last bias at the very end.
    Tensor k =
        ckpt.get("model.layers.1.self_attn.k_proj.weight", {c.kv_size(), c.hidden_size}).to_f32();
    EXPECT_EQ(l1.qkv.data<float>()[c.q_size() * c.hidden_size + 3], k.data<float>()[3]);
    Tensor vb = ckpt.get("model.layers.1.self_attn.v_proj.bias", {c.kv_size()}).to_f32();
    EXPECT_EQ(l1.qkv_bias.data<float>()[c.q_size() + 2 * c.kv_size() - 1],
              vb.data<float>()[c.kv_size() - 1]);
    Tensor up = ckpt.get("model.layers.1.mlp.up_proj.weight", {c.intermediate_size, c.hidden_size})
                    .to_f32();
    EXPECT_EQ(l1.gate_up.data<float>()[c.intermediate_size * c.hidden_size], up.data<float>()[0]);
    EXPECT_NE(w.lm_head.raw(), w.embed.raw());  // qwen2-tiny is not tied

    ModelConfig mc = ModelConfig::load(kFixtures / "qwen3-moe-tiny");
    ModelWeights mw = load_weights(mc, kFixtures / "qwen3-moe-tiny");
    EXPECT_EQ(mw.lm_head.raw(), mw.embed.raw());  // tied
    EXPECT_EQ(mw.layers[0].experts_gate_up.shape(),
              (Shape{8, 2 * mc.moe_intermediate_size, mc.hidden_size}));
    EXPECT_FALSE(mw.layers[1].experts_gate_up.defined());  // dense layer
    Checkpoint mck = Checkpoint::open(kFixtures / "qwen3-moe-tiny");
    Tensor up5 = mck.get("model.layers.2.mlp.experts.5.up_proj.weight",
                         {mc.moe_intermediate_size, mc.hidden_size})
                     .to_f32();
    const int64_t I = mc.moe_intermediate_size, H = mc.hidden_size;
    EXPECT_EQ(mw.layers[2].experts_gate_up.data<float>()[(5 * 2 * I + I) * H + 7],
              up5.data<float>()[7]);
}

TEST(Weights, DummyIsSeededAndNeedsNoCheckpoint) {
    ModelConfig c = ModelConfig::load(kFixtures / "qwen3-moe-tiny");
    ModelWeights a = dummy_weights(c, 1), b = dummy_weights(c, 1), d = dummy_weights(c, 2);
    const int64_t n = a.layers[0].qkv.numel();
    EXPECT_EQ(std::memcmp(a.layers[0].qkv.raw(), b.layers[0].qkv.raw(), size_t(n) * 4), 0);
    EXPECT_NE(std::memcmp(a.layers[0].qkv.raw(), d.layers[0].qkv.raw(), size_t(n) * 4), 0);
    EXPECT_EQ(expected_tensors(c).size(),
              79u);  // every tensor of the hub layout, tied head excluded
}
