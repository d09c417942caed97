#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "config/engine_config.h"
#include "config/generation_config.h"
#include "config/model_config.h"

using namespace miniinfer;

namespace {
const std::filesystem::path kFixtures = MINIINFER_FIXTURES;

// As published on the Hugging Face hub (transformers 4.x field names).
Json qwen3_0_6b() {
    return Json::parse(R"({
      "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
      "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
      "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
      "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
      "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
      "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
      "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_cache": true,
      "use_sliding_window": false, "vocab_size": 151936})");
}

std::string error_of(const Json& json) {
    try {
        ModelConfig::from_json(json, "config.json");
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}
}  // namespace

TEST(ModelConfig, HubQwen3) {
    ModelConfig c = ModelConfig::from_json(qwen3_0_6b(), "config.json");
    EXPECT_EQ(c.arch, Arch::kQwen3);
    EXPECT_EQ(c.head_dim, 128);
    EXPECT_EQ(c.q_size(), 2048);
    EXPECT_EQ(c.kv_size(), 1024);
    EXPECT_TRUE(c.qk_norm);
    EXPECT_FALSE(c.attention_bias);
    EXPECT_TRUE(c.tie_word_embeddings);
    EXPECT_EQ(c.rope_theta, 1e6);
    EXPECT_EQ(c.rope_scaling.kind, RopeScaling::Kind::kNone);
    EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{151645}));
    EXPECT_EQ(c.dtype, DType::kBF16);
    EXPECT_FALSE(c.is_moe_layer(0));
}

TEST(ModelConfig, HubQwen2HasBiasAndDerivedHeadDim) {
    Json j = Json::parse(R"({"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
      "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
      "vocab_size": 151936, "rope_theta": 1000000.0, "sliding_window": 32768,
      "use_sliding_window": false, "max_window_layers": 21, "tie_word_embeddings": true,
      "eos_token_id": [151645, 151643], "torch_dtype": "float16", "hidden_act": "silu"})");
    ModelConfig c = ModelConfig::from_json(j, "config.json");
    EXPECT_EQ(c.arch, Arch::kQwen2);
    EXPECT_EQ(c.head_dim, 64);
    EXPECT_TRUE(c.attention_bias);
    EXPECT_FALSE(c.qk_norm);
    EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{151645, 151643}));
    EXPECT_EQ(c.dtype, DType::kF16);
}

TEST(ModelConfig, HubQwen3MoeSparseLayers) {
    Json j = qwen3_0_6b();
    j["model_type"] = "qwen3_moe";
    j["num_experts"] = 128;
    j["num_experts_per_tok"] = 8;
    j["moe_intermediate_size"] = 768;
    j["norm_topk_prob"] = true;
    j["decoder_sparse_step"] = 2;
    j["mlp_only_layers"] = {3};
    ModelConfig c = ModelConfig::from_json(j, "config.json");
    EXPECT_EQ(c.num_experts, 128);
    EXPECT_FALSE(c.is_moe_layer(0));  // (0 + 1) % 2 != 0
    EXPECT_TRUE(c.is_moe_layer(1));
    EXPECT_FALSE(c.is_moe_layer(3));  // mlp_only_layers
    EXPECT_TRUE(c.is_moe_layer(5));
}

// The step budget when none is given: 2048 on the CPU, 8192 on CUDA, 16384 for an MoE model on
// CUDA (each of its prefill steps reads every expert's weights); a budget given stays.
TEST(EngineConfig, DefaultStepBudgetByDeviceAndModel) {
    const ModelConfig dense = ModelConfig::from_json(qwen3_0_6b(), "config.json");
    Json j = qwen3_0_6b();
    j["model_type"] = "qwen3_moe";
    j["num_experts"] = 128;
    j["num_experts_per_tok"] = 8;
    j["moe_intermediate_size"] = 768;
    const ModelConfig moe = ModelConfig::from_json(j, "config.json");
    const auto budget = [](const ModelConfig& m, const char* device, int64_t given) {
        EngineConfig c;
        c.device = device;
        c.max_num_batched_tokens = given;
        c.resolve(m);
        return c.max_num_batched_tokens;
    };
    EXPECT_EQ(budget(dense, "cpu", 0), 2048);
    EXPECT_EQ(budget(moe, "cpu", 0), 2048);
    EXPECT_EQ(budget(dense, "cuda", 0), 8192);
    EXPECT_EQ(budget(moe, "cuda", 0), 16384);
    EXPECT_EQ(budget(moe, "cuda", 4096), 4096);
    EXPECT_EQ(budget(dense, "cpu", 512), 512);
}

TEST(ModelConfig, LinearRopeScalingAndRopeParameters) {
    Json j = qwen3_0_6b();
    j["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
    ModelConfig c = ModelConfig::from_json(j, "config.json");
    EXPECT_EQ(c.rope_scaling.kind, RopeScaling::Kind::kLinear);
    EXPECT_EQ(c.rope_scaling.factor, 4.0);
    // transformers 5 spelling
    Json k = qwen3_0_6b();
    k.erase("rope_theta");
    k.erase("rope_scaling");
    k["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5e5}};
    EXPECT_EQ(ModelConfig::from_json(k, "config.json").rope_theta, 5e5);
}

TEST(ModelConfig, EveryFixtureParses) {
    for (auto [name, arch] : {std::pair{"qwen2-tiny", Arch::kQwen2},
                              {"qwen3-tiny", Arch::kQwen3},
                              {"qwen3-moe-tiny", Arch::kQwen3Moe},
                              {"qwen3-demo", Arch::kQwen3}}) {
        ModelConfig c = ModelConfig::load(kFixtures / name);
        EXPECT_EQ(c.arch, arch) << name;
        EXPECT_GT(c.num_layers, 0);
    }
    ModelConfig moe = ModelConfig::load(kFixtures / "qwen3-moe-tiny");
    EXPECT_EQ(moe.num_experts, 8);  // written as num_local_experts by transformers 5
    EXPECT_EQ(moe.num_experts_per_tok, 2);
    EXPECT_EQ(moe.mlp_only_layers, (std::vector<int64_t>{1}));
    EXPECT_TRUE(moe.is_moe_layer(0));
    EXPECT_FALSE(moe.is_moe_layer(1));
}

TEST(ModelConfig, BrokenConfigsNameTheField) {
    auto with = [](const char* key, Json value) {
        Json j = qwen3_0_6b();
        j[key] = std::move(value);
        return j;
    };
    auto without = [](const char* key) {
        Json j = qwen3_0_6b();
        j.erase(key);
        return j;
    };
    EXPECT_NE(error_of(with("model_type", "llama")).find("model_type 'llama' is not supported"),
              std::string::npos);
    EXPECT_NE(error_of(with("rope_scaling", {{"type", "yarn"}, {"factor", 4.0}}))
                  .find("rope_scaling type 'yarn'"),
              std::string::npos);
    EXPECT_NE(error_of(with("rope_scaling", {{"rope_type", "dynamic"}, {"factor", 2.0}}))
                  .find("'dynamic'"),
              std::string::npos);
    EXPECT_NE(error_of(with("use_sliding_window", true)).find("use_sliding_window"),
              std::string::npos);
    EXPECT_NE(error_of(with("hidden_act", "gelu")).find("hidden_act 'gelu'"), std::string::npos);
    EXPECT_NE(error_of(without("hidden_size")).find("missing field 'hidden_size'"),
              std::string::npos);
    EXPECT_NE(
        error_of(with("num_hidden_layers", "28")).find("'num_hidden_layers' has the wrong type"),
        std::string::npos);
    EXPECT_NE(error_of(with("num_key_value_heads", 5)).find("not a multiple"), std::string::npos);
    EXPECT_NE(error_of(with("torch_dtype", "int8")).find("torch_dtype"), std::string::npos);
    EXPECT_NE(error_of(with("vocab_size", 0)).find("'vocab_size' must be positive"),
              std::string::npos);
    Json moe = with("model_type", "qwen3_moe");
    EXPECT_NE(error_of(moe).find("missing field 'num_local_experts'"), std::string::npos);
    EXPECT_NE(error_of(Json::array()).find("expected a JSON object"), std::string::npos);
}

TEST(ModelConfig, MissingOrInvalidFiles) {
    auto dir = std::filesystem::temp_directory_path() / "miniinfer_test_config";
    std::filesystem::create_directories(dir);
    std::filesystem::remove(dir / "config.json");
    try {
        ModelConfig::load(dir);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("config.json: cannot open"), std::string::npos)
            << e.what();
    }
    std::ofstream(dir / "config.json") << "{\"model_type\": ";
    try {
        ModelConfig::load(dir);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos) << e.what();
    }
    EXPECT_THROW(ModelConfig::load(dir / "nope"), Error);
}

TEST(GenerationConfig, DemoDefaultsAndAbsentFile) {
    GenerationConfig g = GenerationConfig::load(kFixtures / "qwen3-demo");
    EXPECT_EQ(g.eos_token_ids, (std::vector<int64_t>{151645, 151643}));
    EXPECT_EQ(g.temperature, 0.6);
    EXPECT_EQ(g.top_k, 20);
    EXPECT_EQ(g.top_p, 0.95);
    GenerationConfig none = GenerationConfig::load(std::filesystem::temp_directory_path());
    EXPECT_TRUE(none.eos_token_ids.empty());
    EXPECT_FALSE(none.temperature.has_value());
    EXPECT_THROW(GenerationConfig::from_json(Json{{"temperature", "hot"}}, "g"), Error);
}
