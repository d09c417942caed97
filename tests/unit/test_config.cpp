#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "config/engine_config.h"
#include "config/generation_config.h"
#include "config/model_config.h"
#include "config/tuning.h"
#include "config_testing.h"

using namespace miniinfer;
using miniinfer::testing::error_of;

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

// Qwen3's documented recipe for long contexts (its model cards), 4.x spelling.
TEST(ModelConfig, YarnAsQwen3Documents) {
    Json j = qwen3_0_6b();
    j["rope_scaling"] = Json::parse(
        R"({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})");
    const ModelConfig c = ModelConfig::from_json(j, "config.json");
    const RopeScaling& rs = c.rope_scaling;
    EXPECT_EQ(rs.kind, RopeScaling::Kind::kYarn);
    EXPECT_EQ(rs.factor, 4.0);
    EXPECT_EQ(rs.original_max_position_embeddings, 32768);
    EXPECT_EQ(rs.beta_fast, 32.0);
    EXPECT_EQ(rs.beta_slow, 1.0);
    EXPECT_DOUBLE_EQ(rs.attention_factor, 0.1 * std::log(4.0) + 1.0);
    EXPECT_TRUE(rs.truncate);
    EXPECT_EQ(c.rope_theta, 1e6);
    // The context it extends to: 32768 x 4, past max_position_embeddings (40960), what the
    // engine allows by default.
    EXPECT_EQ(c.max_context_len(), 131072);
    EngineConfig e;
    e.device = "cuda";  // the CUDA runner sizes its cache later; the CPU's caps the length
    e.resolve(c);
    EXPECT_EQ(e.max_model_len, 131072);
    EngineConfig too_long;
    too_long.max_model_len = 131073;
    try {
        too_long.resolve(c);
        ADD_FAILURE() << "no error";
    } catch (const Error& err) {
        EXPECT_NE(std::string(err.what())
                      .find("exceeds the model's YaRN context 131072 "
                            "(original_max_position_embeddings 32768 x factor 4)"),
                  std::string::npos)
            << err.what();
    }

    // transformers 5 spelling, the same model: equal, field for field.
    Json k = qwen3_0_6b();
    k.erase("rope_scaling");
    k.erase("rope_theta");
    k["rope_parameters"] = Json::parse(R"({"rope_type": "yarn", "factor": 4.0,
      "original_max_position_embeddings": 32768, "rope_theta": 1000000.0})");
    EXPECT_EQ(ModelConfig::from_json(k, "config.json").rope_scaling, rs);
    // Both spellings at once, agreeing: fine.
    k["rope_scaling"] = j["rope_scaling"];
    k["rope_theta"] = 1e6;
    EXPECT_EQ(ModelConfig::from_json(k, "config.json").rope_scaling, rs);
}

TEST(ModelConfig, YarnOptionalFields) {
    auto yarn = [](const char* fields) {
        Json j = qwen3_0_6b();
        j["rope_scaling"] =
            Json::parse(fmt::format(R"({{"type": "yarn", "factor": 8.0 {}}})", fields));
        return ModelConfig::from_json(j, "config.json").rope_scaling;
    };
    // No original_max_position_embeddings: transformers takes max_position_embeddings.
    EXPECT_EQ(yarn("").original_max_position_embeddings, 40960);
    EXPECT_DOUBLE_EQ(yarn("").attention_factor, 0.1 * std::log(8.0) + 1.0);
    EXPECT_EQ(yarn(R"(, "attention_factor": 1.5)").attention_factor, 1.5);
    // mscale and mscale_all_dim (DeepSeek's): the ratio of their two magnitudes.
    EXPECT_DOUBLE_EQ(yarn(R"(, "mscale": 1.0, "mscale_all_dim": 0.5)").attention_factor,
                     (0.1 * std::log(8.0) + 1.0) / (0.05 * std::log(8.0) + 1.0));
    // One of them alone changes nothing, as in transformers.
    EXPECT_DOUBLE_EQ(yarn(R"(, "mscale": 0.7)").attention_factor, 0.1 * std::log(8.0) + 1.0);
    const RopeScaling betas = yarn(R"(, "beta_fast": 16, "beta_slow": 2, "truncate": false)");
    EXPECT_EQ(betas.beta_fast, 16.0);
    EXPECT_EQ(betas.beta_slow, 2.0);
    EXPECT_FALSE(betas.truncate);
    // transformers reads the betas with `or`: 0 or null is the default.
    EXPECT_EQ(yarn(R"(, "beta_fast": 0, "beta_slow": null)").beta_fast, 32.0);
    EXPECT_EQ(yarn(R"(, "beta_fast": 0, "beta_slow": null)").beta_slow, 1.0);
    EXPECT_EQ(yarn(R"(, "attention_factor": null)").attention_factor, yarn("").attention_factor);
}

TEST(ModelConfig, RopeSpellingsMustAgree) {
    auto error = [](const char* rope_parameters, const char* rope_scaling, Json theta) {
        Json j = qwen3_0_6b();
        j.erase("rope_theta");
        if (!theta.is_null()) j["rope_theta"] = theta;
        j["rope_parameters"] = Json::parse(rope_parameters);
        j["rope_scaling"] = Json::parse(rope_scaling);
        return error_of(j);
    };
    const char* yarn4 = R"({"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6,
                            "original_max_position_embeddings": 32768})";
    EXPECT_EQ(error(yarn4, yarn4, 1e6), "");
    EXPECT_EQ(error(R"({"rope_type": "default", "rope_theta": 1e6})", "null", 1e6), "");
    const std::string kinds = error(yarn4, R"({"type": "linear", "factor": 4.0})", Json());
    EXPECT_NE(kinds.find("config.json: 'rope_parameters' (yarn (factor 4, "
                         "original_max_position_embeddings 32768"),
              std::string::npos)
        << kinds;
    EXPECT_NE(kinds.find("and 'rope_scaling' (linear (factor 4)) disagree"), std::string::npos)
        << kinds;
    EXPECT_NE(
        error(yarn4, R"({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096})",
              Json())
            .find("disagree"),
        std::string::npos);
    EXPECT_NE(error(R"({"rope_type": "default", "rope_theta": 1e6})",
                    R"({"rope_type": "yarn", "factor": 2.0})", Json())
                  .find("disagree"),
              std::string::npos);
    // rope_theta: at the top level and in rope_parameters, different.
    const std::string theta = error(R"({"rope_type": "default", "rope_theta": 5e5})", "null", 1e6);
    EXPECT_NE(theta.find("'rope_theta' (1000000) and 'rope_parameters.rope_theta' (500000) "
                         "disagree"),
              std::string::npos)
        << theta;
    // rope_type and its 4.x spelling type, different.
    EXPECT_NE(error(R"({"rope_type": "yarn", "type": "linear", "factor": 2.0})", "null", 1e6)
                  .find("'rope_type' is 'yarn' but 'type' is 'linear'"),
              std::string::npos);
}

TEST(ModelConfig, RopeFieldsRefusedByName) {
    auto error = [](const char* rope_scaling) {
        Json j = qwen3_0_6b();
        j["rope_scaling"] = Json::parse(rope_scaling);
        return error_of(j);
    };
    EXPECT_NE(error(R"({"rope_type": "yarn"})").find("missing field 'factor'"), std::string::npos);
    EXPECT_NE(error(R"({"rope_type": "yarn", "factor": 0.5})").find("'factor' must be >= 1"),
              std::string::npos);
    EXPECT_NE(error(R"({"rope_type": "yarn", "factor": 2, "attention_factor": -1})")
                  .find("'attention_factor' must be > 0"),
              std::string::npos);
    EXPECT_NE(error(R"({"rope_type": "yarn", "factor": 2, "original_max_position_embeddings": 0})")
                  .find("'original_max_position_embeddings' must be positive"),
              std::string::npos);
    EXPECT_NE(error(R"({"rope_type": "linear", "factor": 2, "beta_fast": 8})")
                  .find("field 'beta_fast' is not read for rope type 'linear'"),
              std::string::npos);
    EXPECT_NE(error(R"({"rope_type": "default", "partial_rotary_factor": 0.5})")
                  .find("'partial_rotary_factor' is 0.5"),
              std::string::npos);
    EXPECT_NE(error(R"({"rope_type": "longrope", "short_factor": [1]})")
                  .find("rope type 'longrope' is not implemented"),
              std::string::npos);
    EXPECT_NE(error("[1]").find("rope_scaling: must be an object or null"), std::string::npos);
}

Json fp8_quantization() {
    return {{"quant_method", "fp8"},
            {"fmt", "e4m3"},
            {"activation_scheme", "dynamic"},
            {"weight_block_size", {128, 128}}};
}

TEST(ModelConfig, QuantizationConfigOnlyBlockScaledFp8) {
    auto error = [](Json quantization) {
        Json j = qwen3_0_6b();
        j["quantization_config"] = std::move(quantization);
        return error_of(j);
    };
    EXPECT_EQ(error(nullptr), "");
    EXPECT_EQ(error(fp8_quantization()), "");
    EXPECT_NE(error({{"quant_method", "awq"}, {"bits", 4}})
                  .find("config.json quantization_config: quantization method 'awq' is not "
                        "supported (supported: fp8)"),
              std::string::npos);
    EXPECT_NE(error({{"bits", 4}}).find("missing field 'quant_method'"), std::string::npos);
    EXPECT_NE(error("awq").find("quantization_config: must be an object"), std::string::npos);
    // Every other FP8 flavour is refused by its field and value.
    auto with = [](const char* key, Json value) {
        Json q = fp8_quantization();
        if (value.is_null())
            q.erase(key);
        else
            q[key] = std::move(value);
        return q;
    };
    EXPECT_NE(error(with("fmt", "e5m2")).find("field 'fmt' is 'e5m2'"), std::string::npos);
    EXPECT_NE(error(with("activation_scheme", "static"))
                  .find("field 'activation_scheme' is 'static'; only 'dynamic'"),
              std::string::npos);
    EXPECT_NE(error(with("weight_block_size", {64, 64}))
                  .find("field 'weight_block_size' is [64, 64]; only [128, 128] is supported"),
              std::string::npos);
    EXPECT_NE(error(with("weight_block_size", {128})).find("is [128]"), std::string::npos);
    EXPECT_NE(error(with("weight_block_size", nullptr))
                  .find("field 'weight_block_size' is missing; only block-scaled FP8"),
              std::string::npos);
    EXPECT_NE(error(with("modules_to_not_convert", {"lm_head", "(bad"}))
                  .find("modules_to_not_convert entry '(bad' is not a regular expression"),
              std::string::npos);
    // fmt and activation_scheme default as transformers' FineGrainedFP8Config does.
    EXPECT_EQ(error(with("fmt", nullptr)), "");
    EXPECT_EQ(error(with("activation_scheme", nullptr)), "");
}

TEST(ModelConfig, Fp8QuantizationParsed) {
    Json j = qwen3_0_6b();
    EXPECT_FALSE(ModelConfig::from_json(j, "c").quantization.is_fp8());
    EXPECT_EQ(ModelConfig::from_json(j, "c").quantization.describe(), "none");
    j["quantization_config"] = fp8_quantization();
    j["quantization_config"]["modules_to_not_convert"] = {"lm_head", "model.layers.1.mlp",
                                                          "o_proj"};
    const QuantizationConfig q = ModelConfig::from_json(j, "c").quantization;
    EXPECT_TRUE(q.is_fp8());
    EXPECT_EQ(q.block_out, 128);
    EXPECT_EQ(q.block_in, 128);
    EXPECT_EQ(q.describe(),
              "fp8 e4m3, dynamic activations, blocks 128x128 (not converted: lm_head, "
              "model.layers.1.mlp, o_proj)");
    // transformers' should_convert_module: an entry excludes the names it starts or ends.
    EXPECT_TRUE(q.quantizes("model.layers.0.mlp.down_proj"));
    EXPECT_FALSE(q.quantizes("model.layers.1.mlp.down_proj"));
    EXPECT_FALSE(q.quantizes("model.layers.0.self_attn.o_proj"));
    EXPECT_TRUE(q.quantizes("model.layers.0.self_attn.q_proj"));
    EXPECT_FALSE(QuantizationConfig{}.quantizes("model.layers.0.self_attn.q_proj"));
    // Both devices run FP8 checkpoints (the GPU needs an sm_90 one: make_cuda_model says so).
    const ModelConfig c = ModelConfig::from_json(j, "c");
    EXPECT_NO_THROW(check_engine_support(c, "cpu", 2));
    EXPECT_NO_THROW(check_engine_support(c, "cuda", 2));
}

TEST(ModelConfig, EveryFixtureParses) {
    for (auto [name, arch] : {std::pair{"qwen2-tiny", Arch::kQwen2},
                              {"qwen3-tiny", Arch::kQwen3},
                              {"qwen3-moe-tiny", Arch::kQwen3Moe},
                              {"qwen3-demo", Arch::kQwen3},
                              {"qwen3.5-tiny", Arch::kQwen35},
                              {"qwen3.5-moe-tiny", Arch::kQwen35Moe},
                              {"qwen3-next-tiny", Arch::kQwen3Next}}) {
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
    // Qwen2/3/3-MoE: every layer full attention, the whole head rotating, K/V in every layer.
    for (const char* name : {"qwen2-tiny", "qwen3-tiny", "qwen3-moe-tiny"}) {
        ModelConfig c = ModelConfig::load(kFixtures / name);
        EXPECT_FALSE(c.is_hybrid()) << name;
        EXPECT_EQ(c.layer_types,
                  std::vector<LayerType>(size_t(c.num_layers), LayerType::kFullAttention));
        EXPECT_EQ(c.num_kv_layers(), c.num_layers);
        EXPECT_EQ(c.rotary_dim, c.head_dim);
        EXPECT_EQ(c.gdn_state_bytes(), 0);
        EXPECT_FALSE(c.attn_output_gate || c.zero_centered_norm || c.has_vision);
    }
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
    EXPECT_NE(error_of(with("rope_scaling", {{"rope_type", "dynamic"}, {"factor", 2.0}}))
                  .find("rope_scaling: rope type 'dynamic' is not implemented (supported: "
                        "default, linear, yarn)"),
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

// bench's --tuning: every field by name, integers checked, the error naming the key or value.
TEST(Tuning, SetsFieldsByNameAndRefusesTheRest) {
    Tuning t;
    EXPECT_EQ(to_string(t),
              "pdl=1 decode_min_keys=64 decode_qkv_max_seqs=32 decode_cluster_splits=-1 "
              "decode_longest_first=1 moe_silu_tile=32");
    set_tuning(t, "pdl=0");
    set_tuning(t, "decode_min_keys=128");
    set_tuning(t, "decode_cluster_splits=0");
    EXPECT_FALSE(t.pdl);
    EXPECT_EQ(t.decode_min_keys, 128);
    EXPECT_EQ(t.decode_cluster_splits, 0);
    const auto message = [&](const char* kv) {
        try {
            set_tuning(t, kv);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_NE(message("decode_splits=4").find("'decode_splits' is not a key"), std::string::npos);
    EXPECT_NE(message("pdl=2").find("expected 0 or 1"), std::string::npos);
    EXPECT_NE(message("moe_silu_tile=x").find("'x' is not an integer"), std::string::npos);
    EXPECT_NE(message("decode_min_keys").find("expected key=value"), std::string::npos);
    EXPECT_NE(message("decode_min_keys=-5").find("expected -1 or more"), std::string::npos);
}
