#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "core/host_memory.h"
#include "loader/checkpoint.h"
#include "models/qwen_model.h"
#include "models/sequence_runner.h"
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

// Every tensor field of `w`, named.
std::vector<std::pair<std::string, Tensor>> fields(const ModelWeights& w) {
    std::vector<std::pair<std::string, Tensor>> out = {
        {"embed", w.embed}, {"norm", w.norm}, {"lm_head", w.lm_head}};
    for (size_t l = 0; l < w.layers.size(); ++l) {
        const LayerWeights& lw = w.layers[l];
        const std::pair<const char*, Tensor> named[] = {
            {"input_norm", lw.input_norm},
            {"post_attention_norm", lw.post_attention_norm},
            {"qkv", lw.qkv},
            {"qkv_bias", lw.qkv_bias},
            {"q_norm", lw.q_norm},
            {"k_norm", lw.k_norm},
            {"o_proj", lw.o_proj},
            {"o_bias", lw.o_bias},
            {"gate_up", lw.gate_up},
            {"down", lw.down},
            {"router", lw.router},
            {"experts_gate_up", lw.experts_gate_up},
            {"experts_down", lw.experts_down}};
        for (const auto& [name, t] : named) out.emplace_back(fmt::format("{}.{}", l, name), t);
    }
    return out;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
    const auto* p = static_cast<const uint8_t*>(t.raw());
    return std::vector<uint8_t>(p, p + t.nbytes());
}

// bf16 == each f32 element rounded, with the same shape.
void expect_rounded(const Tensor& bf16, const Tensor& f32, const std::string& what) {
    ASSERT_EQ(bf16.defined(), f32.defined()) << what;
    if (!f32.defined()) return;
    ASSERT_EQ(bf16.dtype(), DType::kBF16) << what;
    ASSERT_EQ(bf16.shape(), f32.shape()) << what;
    for (int64_t i = 0; i < f32.numel(); ++i)
        ASSERT_EQ(bf16.data<uint16_t>()[i], f32_to_bf16(f32.data<float>()[i])) << what << " @" << i;
}

// Un-fuses the ranks' row shards: part 0 of every rank in turn, then part 1, ... Sizes count
// rows of a weight, elements of a bias, rows of every expert for stacked [E, rows, H] experts.
std::vector<uint8_t> join_rows(const std::vector<Tensor>& shards,
                               const std::vector<int64_t>& part_rows) {
    int64_t rows = 0;
    for (int64_t r : part_rows) rows += r;
    const size_t row_bytes = shards[0].nbytes() / size_t(rows);
    std::vector<uint8_t> out;
    int64_t row = 0;
    for (int64_t n : part_rows) {
        for (const Tensor& s : shards) {
            const auto* p = static_cast<const uint8_t*>(s.raw()) + size_t(row) * row_bytes;
            out.insert(out.end(), p, p + size_t(n) * row_bytes);
        }
        row += n;
    }
    return out;
}

// Joins the ranks' column shards (the last dimension) back into whole rows.
std::vector<uint8_t> join_cols(const std::vector<Tensor>& shards) {
    const size_t piece_bytes = size_t(shards[0].size(-1)) * dtype_size(shards[0].dtype());
    const size_t rows = shards[0].nbytes() / piece_bytes;
    std::vector<uint8_t> out;
    for (size_t r = 0; r < rows; ++r)
        for (const Tensor& s : shards) {
            const auto* p = static_cast<const uint8_t*>(s.raw()) + r * piece_bytes;
            out.insert(out.end(), p, p + piece_bytes);
        }
    return out;
}

// The ranks' shards of every field, put back together, equal the world-1 weights.
void expect_shards_join(const ModelConfig& c, const ModelWeights& whole,
                        const std::vector<ModelWeights>& ranks) {
    const int64_t world = int64_t(ranks.size()), q = c.q_size() / world, kv = c.kv_size() / world;
    const int64_t inter = c.intermediate_size / world, moe = c.moe_intermediate_size / world;
    std::vector<int64_t> experts_rows(size_t(2 * c.num_experts), moe);
    std::vector<std::vector<std::pair<std::string, Tensor>>> shard_fields;
    for (const ModelWeights& w : ranks) shard_fields.push_back(fields(w));
    const auto whole_fields = fields(whole);
    int num_sharded = 0;
    for (size_t f = 0; f < whole_fields.size(); ++f) {
        const auto& [name, t] = whole_fields[f];
        std::vector<Tensor> shards;
        for (const auto& sf : shard_fields) shards.push_back(sf[f].second);
        if (!t.defined()) {
            for (const Tensor& s : shards) EXPECT_FALSE(s.defined()) << name;
            continue;
        }
        std::vector<uint8_t> joined;
        if (name == "embed" || name == "lm_head") {  // vocab-parallel: rows in rank order
            size_t bytes = 0;
            for (const Tensor& s : shards) {
                const std::vector<uint8_t> b = bytes_of(s);
                joined.insert(joined.end(), b.begin(), b.end());
                bytes += s.nbytes();
            }
            EXPECT_EQ(bytes, t.nbytes()) << name;
            EXPECT_EQ(joined, bytes_of(t)) << name;
            ++num_sharded;
            continue;
        }
        if (name.ends_with(".qkv") || name.ends_with(".qkv_bias"))
            joined = join_rows(shards, {q, kv, kv});
        else if (name.ends_with(".gate_up"))
            joined = join_rows(shards, {inter, inter});
        else if (name.ends_with(".experts_gate_up"))
            joined = join_rows(shards, experts_rows);
        else if (name.ends_with(".o_proj") || name.ends_with("down"))
            joined = join_cols(shards);
        else {  // replicated
            for (const Tensor& s : shards) EXPECT_EQ(bytes_of(s), bytes_of(t)) << name;
            continue;
        }
        ++num_sharded;
        for (const Tensor& s : shards) EXPECT_EQ(s.nbytes() * size_t(world), t.nbytes()) << name;
        EXPECT_EQ(joined, bytes_of(t)) << name;
    }
    EXPECT_GT(num_sharded, 0);
}

// A checkpoint of random values for `config_json`, tensor i written as dtypes[i % size].
std::filesystem::path random_checkpoint(const std::string& tag, const Json& config_json,
                                        const std::vector<std::string>& dtypes) {
    auto dir = fresh_dir(tag);
    std::ofstream(dir / "config.json") << config_json.dump();
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<FakeTensor> tensors;
    for (const auto& [name, shape] : expected_tensors(ModelConfig::load(dir))) {
        const std::string& dtype = dtypes[tensors.size() % dtypes.size()];
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        FakeTensor t{name, dtype, shape, {}};
        for (int64_t i = 0; i < n; ++i) {
            const float x = normal(rng);
            const uint16_t h = dtype == "BF16" ? f32_to_bf16(x) : f32_to_f16(x);
            const auto* p = dtype == "F32" ? reinterpret_cast<const uint8_t*>(&x)
                                           : reinterpret_cast<const uint8_t*>(&h);
            t.bytes.insert(t.bytes.end(), p, p + (dtype == "F32" ? 4 : 2));
        }
        tensors.push_back(std::move(t));
    }
    write_safetensors(dir / "model.safetensors", tensors);
    return dir;
}

// qwen3-tiny with q/k/v/o biases and 4 kv heads: shards for world 2 and 4, biases included.
Json biased_qwen3_config() {
    Json json = read_json_file(kFixtures / "qwen3-tiny" / "config.json");
    json["attention_bias"] = true;
    json["num_key_value_heads"] = 4;
    return json;
}

WeightTarget bf16_rank(int64_t rank, int64_t world) {
    return {.dtype = DType::kBF16, .rank = rank, .world = world};
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

// A tensor of a dtype the loader does not read (an integer, or FP8 as a block-scaled
// checkpoint stores its weights) is named with its dtype, for the CPU's f32 and the GPU's bf16.
TEST(Weights, WrongDtypeInCheckpoint) {
    for (const auto& [dtype, bytes_per_element] : {std::pair{"I16", 2}, {"F8_E4M3", 1}}) {
        auto dir = fresh_dir("weights_dtype");
        std::filesystem::copy_file(kFixtures / "qwen3-tiny" / "config.json", dir / "config.json");
        SafetensorsFile src = SafetensorsFile::open(kFixtures / "qwen3-tiny" / "model.safetensors");
        std::vector<FakeTensor> tensors;
        for (const auto& [name, e] : src.entries()) {
            Tensor t = src.tensor(name);
            const auto* p = static_cast<const uint8_t*>(t.raw());
            // The bf16 bytes, declared as `dtype` (cut to its size): the shape is right, the
            // dtype is not.
            const bool odd = name == "model.norm.weight";
            const size_t n = odd ? size_t(t.numel() * bytes_per_element) : t.nbytes();
            tensors.push_back(
                {name, odd ? dtype : e.dtype_name, e.shape, std::vector<uint8_t>(p, p + n)});
        }
        write_safetensors(dir / "model.safetensors", tensors);
        // F8_E4M3 is read, but only where the config's quantization makes a weight FP8.
        const std::string want =
            std::string(dtype) == "F8_E4M3"
                ? "tensor 'model.norm.weight' is F8_E4M3, but quantization_config (none) does not "
                  "quantize it"
                : fmt::format("'model.norm.weight' has dtype {}", dtype);
        EXPECT_THAT(error_message([&] { load_weights(ModelConfig::load(dir), dir); }),
                    HasSubstr(want));
        EXPECT_THAT(error_message([&] {
                        load_weights(ModelConfig::load(dir), dir, {.dtype = DType::kBF16});
                    }),
                    HasSubstr(want));
    }
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

TEST(Checkpoint, ReleasedTensorStaysReadable) {
    Checkpoint ckpt = Checkpoint::open(kFixtures / "qwen3-tiny");
    Tensor embed = ckpt.get("model.embed_tokens.weight", {512, 128});
    const std::vector<uint8_t> before = bytes_of(embed);
    ckpt.release("model.embed_tokens.weight");
    ckpt.release("model.embed_tokens.weight", 100, 70000);
    EXPECT_EQ(bytes_of(embed), before);  // the pages fault back in from the file
}

TEST(Weights, Bf16LoadIsTheF32LoadRounded) {
    for (const char* fixture : {"qwen3-tiny", "qwen2-tiny", "qwen3-moe-tiny"}) {
        ModelConfig c = ModelConfig::load(kFixtures / fixture);
        ModelWeights f32 = load_weights(c, kFixtures / fixture);
        ModelWeights bf16 = load_weights(c, kFixtures / fixture, {.dtype = DType::kBF16});
        auto ff = fields(f32), bf = fields(bf16);
        for (size_t i = 0; i < ff.size(); ++i)
            expect_rounded(bf[i].second, ff[i].second, fixture + (" " + ff[i].first));
        EXPECT_EQ(bf16.lm_head.raw() == bf16.embed.raw(), c.tie_word_embeddings);
    }
}

TEST(Weights, F32AndF16SourcesConvertElementWise) {
    // Tensors alternate F32, F16 and BF16 in the file.
    auto dir = random_checkpoint("weights_mixed", biased_qwen3_config(), {"F32", "F16", "BF16"});
    ModelConfig c = ModelConfig::load(dir);
    ModelWeights f32 = load_weights(c, dir), bf16 = load_weights(c, dir, {.dtype = DType::kBF16});
    auto ff = fields(f32), bf = fields(bf16);
    for (size_t i = 0; i < ff.size(); ++i) expect_rounded(bf[i].second, ff[i].second, ff[i].first);
    EXPECT_TRUE(f32.layers[0].o_bias.defined());
}

TEST(Weights, ShardsJoinIntoTheWholeModel) {
    auto check = [](const std::filesystem::path& dir, int64_t world, DType dtype) {
        SCOPED_TRACE(fmt::format("{} world {} {}", dir.string(), world, dtype_name(dtype)));
        ModelConfig c = ModelConfig::load(dir);
        ModelWeights whole = load_weights(c, dir, {.dtype = dtype});
        std::vector<ModelWeights> ranks;
        for (int64_t r = 0; r < world; ++r)
            ranks.push_back(load_weights(c, dir, {.dtype = dtype, .rank = r, .world = world}));
        EXPECT_EQ(ranks[1].layers[0].qkv.shape(),
                  (Shape{(c.q_size() + 2 * c.kv_size()) / world, c.hidden_size}));
        expect_shards_join(c, whole, ranks);
    };
    check(kFixtures / "qwen3-tiny", 2, DType::kF32);
    check(kFixtures / "qwen3-tiny", 2, DType::kBF16);
    check(kFixtures / "qwen3-moe-tiny", 2, DType::kBF16);
    auto biased = random_checkpoint("weights_biased", biased_qwen3_config(), {"BF16"});
    check(biased, 2, DType::kBF16);
    check(biased, 4, DType::kBF16);
    check(biased, 4, DType::kF32);
}

TEST(Weights, BadShardIsAnError) {
    // Fewer KV heads than ranks: each rank holds one, replicated (qwen2-tiny has 1 kv head of
    // 64, 4 q heads; rank 1 of 2 holds q heads 2-3 and the kv head).
    ModelConfig qwen2 = ModelConfig::load(kFixtures / "qwen2-tiny");
    const ModelWeights full = load_weights(qwen2, kFixtures / "qwen2-tiny");
    const ModelWeights half = load_weights(qwen2, kFixtures / "qwen2-tiny", {DType::kF32, 1, 2});
    const int64_t D = qwen2.head_dim, q = qwen2.q_size(), H = qwen2.hidden_size;
    ASSERT_EQ(half.layers[0].qkv.size(0), q / 2 + 2 * D);
    const float* f = full.layers[0].qkv.data<float>();
    const float* h = half.layers[0].qkv.data<float>();
    EXPECT_TRUE(std::equal(h, h + (q / 2) * H, f + (q / 2) * H)) << "q heads 2-3";
    EXPECT_TRUE(std::equal(h + (q / 2) * H, h + (q / 2 + 2 * D) * H, f + q * H)) << "k and v";
    ModelConfig qwen3 = ModelConfig::load(kFixtures / "qwen3-tiny");
    EXPECT_THAT(error_message([&] { dummy_weights(qwen3, 1, bf16_rank(0, 3)); }),
                HasSubstr("world 3 does not divide num_attention_heads = 8"));
    ModelConfig moe = ModelConfig::load(kFixtures / "qwen3-moe-tiny");
    EXPECT_THAT(error_message([&] { dummy_weights(moe, 1, bf16_rank(0, 3)); }),
                HasSubstr("world 3 does not divide num_attention_heads = 4"));
    Json odd = read_json_file(kFixtures / "qwen3-moe-tiny" / "config.json");
    odd["moe_intermediate_size"] = 65;
    EXPECT_THAT(error_message(
                    [&] { dummy_weights(ModelConfig::from_json(odd, "odd"), 1, bf16_rank(1, 2)); }),
                HasSubstr("world 2 does not divide moe_intermediate_size = 65"));
    for (auto [rank, world] : std::vector<std::pair<int, int>>{{2, 2}, {-1, 2}, {0, 0}})
        EXPECT_THAT(error_message([&] {
                        load_weights(qwen3, kFixtures / "qwen3-tiny", bf16_rank(rank, world));
                    }),
                    HasSubstr(fmt::format("rank {} of world {}", rank, world)));
    EXPECT_THAT(error_message([&] { dummy_weights(qwen3, 1, {.dtype = DType::kF16}); }),
                HasSubstr("weights in f16 are not supported"));
}

TEST(Weights, DummyBf16IsTheF32DummyRoundedAndShards) {
    for (const char* fixture : {"qwen3-moe-tiny", "qwen2-tiny"}) {
        ModelConfig c = ModelConfig::load(kFixtures / fixture);
        ModelWeights f32 = dummy_weights(c, 3), bf16 = dummy_weights(c, 3, {.dtype = DType::kBF16});
        auto ff = fields(f32), bf = fields(bf16);
        for (size_t i = 0; i < ff.size(); ++i)
            expect_rounded(bf[i].second, ff[i].second, fixture + (" " + ff[i].first));
    }
    ModelConfig moe = ModelConfig::load(kFixtures / "qwen3-moe-tiny");
    expect_shards_join(
        moe, dummy_weights(moe, 3, {.dtype = DType::kBF16}),
        {dummy_weights(moe, 3, bf16_rank(0, 2)), dummy_weights(moe, 3, bf16_rank(1, 2))});
}

TEST(Weights, LoadStatsCountWhatWasWritten) {
    for (const char* fixture : {"qwen3-moe-tiny", "qwen2-tiny"}) {
        ModelConfig c = ModelConfig::load(kFixtures / fixture);
        for (const WeightTarget& target : {WeightTarget{}, bf16_rank(1, 2)}) {
            if (c.num_kv_heads % target.world != 0) continue;
            ModelWeights w = load_weights(c, kFixtures / fixture, target);
            int64_t bytes = 0;
            for (const auto& [name, t] : fields(w))
                if (t.defined() && !(name == "lm_head" && c.tie_word_embeddings))
                    bytes += int64_t(t.nbytes());
            EXPECT_EQ(w.stats.bytes_written, bytes) << fixture;
            EXPECT_EQ(w.stats.num_tensors, int64_t(expected_tensors(c).size())) << fixture;
            EXPECT_GT(w.stats.peak_host_bytes, 0);
            EXPECT_GE(w.stats.seconds, 0.0);
        }
    }
    EXPECT_GT(peak_host_memory_bytes(), 0);
}

// The "engine ready ... after the process started" log line's clock: this test process started
// before the test ran, and not before the machine booted.
TEST(HostMemory, ProcessAgeIsBetweenZeroAndUptime) {
    const double age = process_age_seconds();
    double uptime = 0;
    std::ifstream("/proc/uptime") >> uptime;
    ASSERT_GE(age, 0.0);
    EXPECT_LE(age, uptime);
}

// assemble_weights with a writer of its own (what the GPU's dummy weights use): the writer's
// allocate makes every destination, write is called once per source tensor with that rank's
// block of it (here rank 1 of 2: o_proj's second half of columns, q_proj's second half of
// rows), serially when parallel is off, and the layout is load_weights'.
TEST(Weights, AssembleWithAWriterOfItsOwn) {
    const ModelConfig c = ModelConfig::load(kFixtures / "qwen3-tiny");
    const WeightTarget target{.dtype = DType::kBF16, .rank = 1, .world = 2};
    int64_t allocated = 0;
    std::map<std::string, WeightBlock> blocks;
    std::thread::id writer_thread;
    bool one_thread = true;
    WeightWriter writer;
    writer.allocate = [&](const Shape& shape, DType dtype) {
        ++allocated;
        return Tensor::zeros(shape, dtype);
    };
    writer.write = [&](const std::string& name, const Shape&, const WeightBlock& b, DType, void*) {
        if (blocks.empty()) writer_thread = std::this_thread::get_id();
        one_thread = one_thread && std::this_thread::get_id() == writer_thread;
        EXPECT_TRUE(blocks.emplace(name, b).second) << name << " written twice";
    };
    writer.parallel = false;
    const ModelWeights w = assemble_weights(c, target, writer);
    const ModelWeights ref = load_weights(c, kFixtures / "qwen3-tiny", target);
    EXPECT_TRUE(one_thread);
    EXPECT_EQ(blocks.size(), expected_tensors(c).size());
    EXPECT_EQ(w.layers[0].qkv.shape(), ref.layers[0].qkv.shape());
    EXPECT_EQ(w.layers[0].o_proj.shape(), ref.layers[0].o_proj.shape());
    EXPECT_EQ(w.stats.num_tensors, ref.stats.num_tensors);
    EXPECT_EQ(w.stats.bytes_written, ref.stats.bytes_written);
    EXPECT_GT(allocated, 0);
    const WeightBlock o = blocks.at("model.layers.0.self_attn.o_proj.weight");
    EXPECT_EQ(o.col_begin, o.cols / 2);
    EXPECT_EQ(o.col_end, o.cols);
    EXPECT_EQ(o.row_end - o.row_begin, o.rows);
    const WeightBlock q = blocks.at("model.layers.0.self_attn.q_proj.weight");
    EXPECT_EQ(q.row_begin, q.rows / 2);
    EXPECT_EQ(q.col_end - q.col_begin, q.cols);
}

// An FP8-quantised checkpoint's KV cache scales (self_attn.k_scale / v_scale, one number each,
// [] or [1], any float dtype) are read per layer; layers without them get 0 (none); a scale that
// is not one positive number is an error naming the tensor. With --kv-cache-dtype fp8 the model
// then stores each layer's K/V at the checkpoint's scales: the same logits as giving those
// scales by hand, other logits than the default 1.0.
namespace {
std::filesystem::path with_kv_scales(const std::string& tag, const std::vector<FakeTensor>& extra) {
    auto dir = copy_fixture("qwen2-tiny", tag);
    write_safetensors(dir / "kv_scales.safetensors", extra);
    Json index = read_json_file(dir / "model.safetensors.index.json");
    for (const FakeTensor& t : extra) index["weight_map"][t.name] = "kv_scales.safetensors";
    std::ofstream(dir / "model.safetensors.index.json") << index.dump();
    return dir;
}
FakeTensor scalar(const std::string& name, float value, Shape shape = {}) {
    FakeTensor t{name, "F32", std::move(shape), std::vector<uint8_t>(4)};
    std::memcpy(t.bytes.data(), &value, 4);
    return t;
}
}  // namespace

TEST(Weights, Fp8KvScalesFromTheCheckpoint) {
    const ModelConfig config = ModelConfig::load(kFixtures / "qwen2-tiny");
    std::vector<FakeTensor> scales;
    for (int64_t l = 0; l < config.num_layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
        scales.push_back(scalar(p + "k_scale", 0.37f, l % 2 ? Shape{1} : Shape{}));
        scales.push_back(scalar(p + "v_scale", 2.5f));
    }
    const auto dir = with_kv_scales("kv_scales", scales);
    const ModelWeights w = load_weights(config, dir);
    for (int64_t l = 0; l < config.num_layers; ++l) {
        EXPECT_FLOAT_EQ(w.layers[size_t(l)].k_scale, 0.37f) << l;
        EXPECT_FLOAT_EQ(w.layers[size_t(l)].v_scale, 2.5f) << l;
    }
    // Only some scales: the others stay 0 (none).
    const auto partial =
        with_kv_scales("kv_scales_partial", {scalar("model.layers.1.self_attn.v_scale", 2.5f)});
    const ModelWeights wp = load_weights(config, partial);
    EXPECT_FLOAT_EQ(wp.layers[0].v_scale, 0.f);
    EXPECT_FLOAT_EQ(wp.layers[1].v_scale, 2.5f);
    EXPECT_FLOAT_EQ(wp.layers[1].k_scale, 0.f);

    // The model at the checkpoint's scales = the model given them by hand, bit for bit; at the
    // default 1.0 the logits differ (the scales change what the cache holds).
    const std::vector<int32_t> ids = {1, 5, 9, 200, 17, 3, 3, 42, 7, 100, 11, 60};
    auto logits = [&](QwenModel& m) {
        SequenceRunner r(m, int64_t(ids.size()), 4);  // pages of 4: K/V read back across pages
        return r.append(ids);
    };
    QwenModel from_ckpt(config, load_weights(config, dir));
    from_ckpt.use_fp8_kv_cache();
    const Tensor got = logits(from_ckpt);
    QwenModel by_hand(config, load_weights(config, kFixtures / "qwen2-tiny"));
    by_hand.use_fp8_kv_cache(0.37f, 2.5f);
    QwenModel unit(config, load_weights(config, kFixtures / "qwen2-tiny"));
    unit.use_fp8_kv_cache();
    const Tensor want = logits(by_hand), at_one = logits(unit);
    ASSERT_EQ(got.numel(), want.numel());
    EXPECT_EQ(std::memcmp(got.raw(), want.raw(), got.nbytes()), 0);
    EXPECT_NE(std::memcmp(got.raw(), at_one.raw(), got.nbytes()), 0);

    const auto bad =
        with_kv_scales("kv_scales_bad", {scalar("model.layers.0.self_attn.k_scale", -1.f)});
    EXPECT_THAT(error_message([&] { load_weights(config, bad); }),
                HasSubstr("KV cache scale 'model.layers.0.self_attn.k_scale' is -1"));
    FakeTensor two = f32_tensor("model.layers.1.self_attn.v_scale", {2}, 1.f);
    const auto wide = with_kv_scales("kv_scales_wide", {two});
    EXPECT_THAT(error_message([&] { load_weights(config, wide); }),
                HasSubstr("'model.layers.1.self_attn.v_scale' has shape [2], expected one number"));
}
