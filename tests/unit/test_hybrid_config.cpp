// ModelConfig for the hybrid Gated DeltaNet models (Qwen3.5, Qwen3.5-MoE, Qwen3-Next): the
// three fixtures in every form transformers writes them, and the errors naming the field.
#include <gtest/gtest.h>

#include <filesystem>

#include "config/engine_config.h"
#include "config/model_config.h"
#include "config_testing.h"

using namespace miniinfer;
using miniinfer::testing::error_of;

namespace {
const std::filesystem::path kFixtures = MINIINFER_FIXTURES;
constexpr LayerType kL = LayerType::kLinearAttention, kF = LayerType::kFullAttention;

Json fixture_json(const char* name) {
    return read_json_file(kFixtures / name / "config.json");
}

// The fields that make the text model, equal between the forms of one checkpoint.
void expect_same_text_model(const ModelConfig& a, const ModelConfig& b) {
    EXPECT_EQ(a.arch, b.arch);
    EXPECT_EQ(a.vocab_size, b.vocab_size);
    EXPECT_EQ(a.hidden_size, b.hidden_size);
    EXPECT_EQ(a.intermediate_size, b.intermediate_size);
    EXPECT_EQ(a.num_layers, b.num_layers);
    EXPECT_EQ(a.num_heads, b.num_heads);
    EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
    EXPECT_EQ(a.head_dim, b.head_dim);
    EXPECT_EQ(a.rope_theta, b.rope_theta);
    EXPECT_EQ(a.rotary_dim, b.rotary_dim);
    EXPECT_EQ(a.mrope_section, b.mrope_section);
    EXPECT_EQ(a.layer_types, b.layer_types);
    EXPECT_EQ(a.linear_attention, b.linear_attention);
    EXPECT_EQ(a.num_experts, b.num_experts);
    EXPECT_EQ(a.shared_expert_intermediate_size, b.shared_expert_intermediate_size);
    EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
    EXPECT_EQ(a.eos_token_ids, b.eos_token_ids);
    EXPECT_EQ(a.dtype, b.dtype);
}
}  // namespace

TEST(HybridConfig, Qwen35Dense) {
    const ModelConfig c = ModelConfig::load(kFixtures / "qwen3.5-tiny");
    EXPECT_EQ(c.arch, Arch::kQwen35);
    EXPECT_EQ(c.model_type, "qwen3_5_text");
    EXPECT_TRUE(c.is_hybrid());
    EXPECT_FALSE(c.has_vision);
    EXPECT_EQ(c.layer_types, (std::vector<LayerType>{kL, kL, kL, kF, kL, kL, kL, kF}));
    EXPECT_EQ(describe_layer_pattern(c.layer_types), "linear x3, full x1, repeated x2");
    EXPECT_EQ(c.num_linear_attention_layers(), 6);
    EXPECT_EQ(c.num_kv_layers(), 2);
    const LinearAttentionConfig& la = c.linear_attention;
    EXPECT_EQ(la.num_key_heads, 2);
    EXPECT_EQ(la.num_value_heads, 6);
    EXPECT_EQ(la.key_head_dim, 64);
    EXPECT_EQ(la.value_head_dim, 64);
    EXPECT_EQ(la.conv_kernel_dim, 4);
    EXPECT_EQ(la.conv_dim(), 640);  // the checkpoint's conv1d [640, 1, 4]
    EXPECT_EQ(c.head_dim, 64);
    EXPECT_EQ(c.partial_rotary_factor, 0.25);
    EXPECT_EQ(c.rotary_dim, 16);
    EXPECT_EQ(c.mrope_section, (std::vector<int64_t>{3, 3, 2}));
    EXPECT_TRUE(c.mrope_interleaved);
    EXPECT_EQ(c.rope_theta, 1e7);
    EXPECT_EQ(c.rope_scaling.kind, RopeScaling::Kind::kNone);
    EXPECT_TRUE(c.attn_output_gate);
    EXPECT_TRUE(c.zero_centered_norm);
    EXPECT_TRUE(c.qk_norm);
    EXPECT_FALSE(c.attention_bias);
    EXPECT_EQ(c.num_experts, 0);
    EXPECT_EQ(c.intermediate_size, 192);
    // Per request: 6 layers x (S: 6 heads x 64 x 64 fp32 + conv window: 3 x 640).
    EXPECT_EQ(c.gdn_state_bytes(), 6 * (6 * 64 * 64 * 4 + 3 * 640 * 4));
    EXPECT_EQ(c.gdn_state_bytes(2), 6 * (6 * 64 * 64 * 4 + 3 * 640 * 2));
}

TEST(HybridConfig, Qwen35MoeMultimodal) {
    const ModelConfig c = ModelConfig::load(kFixtures / "qwen3.5-moe-tiny");
    EXPECT_EQ(c.arch, Arch::kQwen35Moe);
    EXPECT_EQ(c.model_type, "qwen3_5_moe");
    EXPECT_TRUE(c.has_vision);
    EXPECT_EQ(c.layer_types, (std::vector<LayerType>{kL, kL, kL, kF}));
    EXPECT_EQ(c.linear_attention.conv_dim(), 512);
    EXPECT_EQ(c.num_heads, 8);
    EXPECT_EQ(c.num_kv_heads, 2);
    EXPECT_EQ(c.rotary_dim, 16);
    EXPECT_EQ(c.num_experts, 8);
    EXPECT_EQ(c.num_experts_per_tok, 2);
    EXPECT_EQ(c.moe_intermediate_size, 64);
    EXPECT_EQ(c.shared_expert_intermediate_size, 64);
    EXPECT_TRUE(c.norm_topk_prob);
    EXPECT_EQ(c.intermediate_size, 0);  // no dense layer
    for (int64_t l = 0; l < c.num_layers; ++l) EXPECT_TRUE(c.is_moe_layer(l)) << l;
    EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{2}));
    EXPECT_EQ(c.bos_token_id, 1);
    EXPECT_FALSE(c.tie_word_embeddings);
    EXPECT_EQ(c.gdn_state_bytes(), 3 * (4 * 64 * 64 * 4 + 3 * 512 * 4));

    // The text model's own save (qwen3_5_moe_text, flat) is the same model without the vision
    // tower.
    const Json text = fixture_json("qwen3.5-moe-tiny")["text_config"];
    const ModelConfig flat = ModelConfig::from_json(text, "text.json");
    EXPECT_EQ(flat.model_type, "qwen3_5_moe_text");
    EXPECT_FALSE(flat.has_vision);
    expect_same_text_model(flat, c);
}

TEST(HybridConfig, Qwen3NextOlderRopeSpelling) {
    const ModelConfig c = ModelConfig::load(kFixtures / "qwen3-next-tiny");
    EXPECT_EQ(c.arch, Arch::kQwen3Next);
    EXPECT_EQ(c.layer_types, (std::vector<LayerType>{kL, kL, kL, kF}));
    EXPECT_EQ(describe_layer_pattern(c.layer_types), "linear x3, full x1");
    EXPECT_EQ(c.rope_theta, 5e6);              // top-level rope_theta, rope_scaling null
    EXPECT_EQ(c.partial_rotary_factor, 0.25);  // top level
    EXPECT_EQ(c.rotary_dim, 16);
    EXPECT_TRUE(c.mrope_section.empty());
    EXPECT_EQ(c.num_experts, 16);
    EXPECT_EQ(c.num_experts_per_tok, 4);
    EXPECT_EQ(c.moe_intermediate_size, 32);
    EXPECT_EQ(c.shared_expert_intermediate_size, 64);
    EXPECT_EQ(c.intermediate_size, 128);
    EXPECT_TRUE(c.norm_topk_prob);
    EXPECT_EQ(c.mlp_only_layers, (std::vector<int64_t>{1}));
    EXPECT_TRUE(c.is_moe_layer(0));
    EXPECT_FALSE(c.is_moe_layer(1));
    EXPECT_FALSE(c.has_vision);
}

TEST(HybridConfig, Qwen35MultimodalDenseEqualsItsTextSave) {
    Json text = fixture_json("qwen3.5-tiny");
    const ModelConfig flat = ModelConfig::from_json(text, "flat");
    Json wrapped = {{"model_type", "qwen3_5"},
                    {"text_config", text},
                    {"tie_word_embeddings", false},
                    {"vision_config", {{"model_type", "qwen3_5_vision"}}}};
    const ModelConfig nested = ModelConfig::from_json(wrapped, "nested");
    EXPECT_EQ(nested.model_type, "qwen3_5");
    EXPECT_TRUE(nested.has_vision);
    expect_same_text_model(nested, flat);
    // The text config may leave out its own model_type; eos and dtype may sit outside it.
    wrapped["text_config"].erase("model_type");
    wrapped["text_config"].erase("eos_token_id");
    wrapped["text_config"].erase("dtype");
    wrapped["eos_token_id"] = 2;
    wrapped["dtype"] = "bfloat16";
    expect_same_text_model(ModelConfig::from_json(wrapped, "nested"), flat);
    // The wrapper's tie_word_embeddings decides, as transformers ties by the outer config.
    wrapped["tie_word_embeddings"] = true;
    EXPECT_TRUE(ModelConfig::from_json(wrapped, "nested").tie_word_embeddings);
}

TEST(HybridConfig, LayerTypesOrTheInterval) {
    Json j = fixture_json("qwen3.5-tiny");
    j.erase("layer_types");  // transformers' default interval: 4
    EXPECT_EQ(ModelConfig::from_json(j, "c").layer_types,
              (std::vector<LayerType>{kL, kL, kL, kF, kL, kL, kL, kF}));
    j["full_attention_interval"] = 2;
    EXPECT_EQ(describe_layer_pattern(ModelConfig::from_json(j, "c").layer_types),
              "linear x1, full x1, repeated x4");
    // Both given must agree.
    Json moe = fixture_json("qwen3.5-moe-tiny");
    EXPECT_EQ(error_of(moe), "");
    moe["text_config"]["full_attention_interval"] = 2;
    EXPECT_NE(error_of(moe).find("config.json text_config: 'layer_types' (linear x3, full x1) and "
                                 "'full_attention_interval' 2 disagree"),
              std::string::npos)
        << error_of(moe);
}

TEST(HybridConfig, BadLayerTypesNameTheField) {
    auto with = [](Json value) {
        Json j = fixture_json("qwen3.5-tiny");
        j["layer_types"] = std::move(value);
        return error_of(j);
    };
    EXPECT_NE(with({"linear_attention", "full_attention", "linear_attention"})
                  .find("'layer_types' has 3 entries for num_hidden_layers 8"),
              std::string::npos);
    Json types = fixture_json("qwen3.5-tiny")["layer_types"];
    types[2] = "mamba2";
    EXPECT_NE(with(types).find(
                  "'layer_types'[2] is 'mamba2' (supported: linear_attention, full_attention)"),
              std::string::npos)
        << with(types);
    EXPECT_NE(with("linear_attention").find("field 'layer_types' has the wrong type"),
              std::string::npos);
    Json j = fixture_json("qwen3.5-tiny");
    j.erase("layer_types");
    j["full_attention_interval"] = 0;
    EXPECT_NE(error_of(j).find("'full_attention_interval' must be positive"), std::string::npos);
    // Qwen3 still refuses any layer that is not full attention.
    Json qwen3 = fixture_json("qwen3-tiny");
    qwen3["layer_types"] = {"full_attention", "linear_attention", "full_attention"};
    EXPECT_NE(error_of(qwen3).find("only full_attention is supported"), std::string::npos);
}

TEST(HybridConfig, UnknownOrMismatchedModelTypes) {
    Json j = fixture_json("qwen3.5-tiny");
    j["model_type"] = "qwen3_5_vision";
    EXPECT_NE(error_of(j).find("model_type 'qwen3_5_vision' is not supported (supported: qwen2, "
                               "qwen3, qwen3_moe, qwen3_5, qwen3_5_text, qwen3_5_moe, "
                               "qwen3_5_moe_text, qwen3_next)"),
              std::string::npos)
        << error_of(j);
    Json moe = fixture_json("qwen3.5-moe-tiny");
    moe["text_config"]["model_type"] = "qwen3_5_text";
    EXPECT_NE(error_of(moe).find("config.json text_config: model_type 'qwen3_5_text' does not "
                                 "belong in a 'qwen3_5_moe' config (expected 'qwen3_5_moe_text')"),
              std::string::npos)
        << error_of(moe);
    moe.erase("text_config");
    EXPECT_NE(error_of(moe).find("config.json: missing field 'text_config'"), std::string::npos);
    // A text config given as the wrapper: its fields are not at the top level.
    Json flat_as_wrapper = fixture_json("qwen3.5-tiny");
    flat_as_wrapper["model_type"] = "qwen3_5";
    EXPECT_NE(error_of(flat_as_wrapper).find("missing field 'text_config'"), std::string::npos);
}

TEST(HybridConfig, RotaryFieldsMustAgree) {
    Json j = fixture_json("qwen3.5-tiny");
    j["partial_rotary_factor"] = 0.5;
    EXPECT_NE(error_of(j).find("'partial_rotary_factor' (0.5) and "
                               "'rope_parameters.partial_rotary_factor' (0.25) disagree"),
              std::string::npos)
        << error_of(j);
    // Neither says: transformers' 0.25.
    j.erase("partial_rotary_factor");
    j["rope_parameters"].erase("partial_rotary_factor");
    EXPECT_EQ(ModelConfig::from_json(j, "c").rotary_dim, 16);
    j["partial_rotary_factor"] = 0.5;  // 32 dims, 16 frequencies: the sections cover 8
    EXPECT_NE(error_of(j).find("'mrope_section' [3, 3, 2] must be 3 sections (temporal, height, "
                               "width) covering the rotary's 16 frequencies (rotary_dim 32 / 2)"),
              std::string::npos)
        << error_of(j);
    j["rope_parameters"]["mrope_section"] = {6, 6, 4};
    EXPECT_EQ(ModelConfig::from_json(j, "c").rotary_dim, 32);
    j["partial_rotary_factor"] = 0.3;  // 19 dims
    EXPECT_NE(error_of(j).find("rotates 19 dims; rotary needs an even number"), std::string::npos);
    j["partial_rotary_factor"] = 1.5;
    EXPECT_NE(error_of(j).find("'partial_rotary_factor' must be in (0, 1], got 1.5"),
              std::string::npos);
    // Qwen3-Next's rope_theta and partial_rotary_factor at the top level, a rope_parameters that
    // says otherwise: an error, not a choice.
    Json next = fixture_json("qwen3-next-tiny");
    next["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};
    EXPECT_NE(error_of(next).find("'rope_theta' (5000000) and 'rope_parameters.rope_theta' "
                                  "(1000000) disagree"),
              std::string::npos)
        << error_of(next);
    // mRoPE sections stay refused where nothing reads them.
    Json qwen3 = fixture_json("qwen3-tiny");
    qwen3["rope_scaling"] = {{"rope_type", "default"}, {"mrope_section", {16, 24, 24}}};
    EXPECT_NE(error_of(qwen3).find("field 'mrope_section' is not read for rope type 'default'"),
              std::string::npos)
        << error_of(qwen3);
}

TEST(HybridConfig, BrokenFieldsNameTheKey) {
    auto with = [](const char* fixture, const char* key, Json value) {
        Json j = fixture_json(fixture);
        if (value.is_null())
            j.erase(key);
        else
            j[key] = std::move(value);
        return error_of(j);
    };
    EXPECT_NE(with("qwen3.5-tiny", "linear_num_key_heads", nullptr)
                  .find("missing field 'linear_num_key_heads'"),
              std::string::npos);
    EXPECT_NE(with("qwen3.5-tiny", "linear_conv_kernel_dim", 0)
                  .find("field 'linear_conv_kernel_dim' must be positive"),
              std::string::npos);
    EXPECT_NE(with("qwen3.5-tiny", "linear_num_value_heads", 5)
                  .find("linear_num_value_heads (5) is not a multiple of linear_num_key_heads (2)"),
              std::string::npos);
    EXPECT_NE(with("qwen3.5-tiny", "head_dim", nullptr).find("missing field 'head_dim'"),
              std::string::npos);
    EXPECT_NE(with("qwen3.5-tiny", "attn_output_gate", false)
                  .find("attn_output_gate is false; only the gated attention is supported"),
              std::string::npos);
    EXPECT_NE(with("qwen3.5-tiny", "attention_bias", true).find("attention_bias is true"),
              std::string::npos);
    EXPECT_NE(with("qwen3-next-tiny", "shared_expert_intermediate_size", nullptr)
                  .find("missing field 'shared_expert_intermediate_size'"),
              std::string::npos);
    // Qwen3-Next's dense layer (mlp_only_layers [1]) needs intermediate_size; without dense
    // layers it may be absent.
    EXPECT_NE(with("qwen3-next-tiny", "intermediate_size", nullptr)
                  .find("missing field 'intermediate_size'"),
              std::string::npos);
    Json all_moe = fixture_json("qwen3-next-tiny");
    all_moe.erase("intermediate_size");
    all_moe.erase("mlp_only_layers");
    EXPECT_EQ(error_of(all_moe), "");
    // A qwen3_5_moe has experts in every layer, as transformers builds it whatever these say.
    Json moe = fixture_json("qwen3.5-moe-tiny");
    moe["text_config"]["mlp_only_layers"] = {1};
    moe["text_config"]["norm_topk_prob"] = false;
    const ModelConfig c = ModelConfig::from_json(moe, "c");
    EXPECT_TRUE(c.is_moe_layer(1));
    EXPECT_TRUE(c.norm_topk_prob);
    // A quantization_config is read in either config of a multimodal checkpoint, and FP8 is
    // refused for the hybrids.
    moe["text_config"]["quantization_config"] = {{"quant_method", "awq"}};
    EXPECT_NE(error_of(moe).find("text_config quantization_config: quantization method 'awq'"),
              std::string::npos);
    moe["text_config"]["quantization_config"] = {{"quant_method", "fp8"},
                                                 {"weight_block_size", {128, 128}}};
    EXPECT_NE(error_of(moe).find("text_config quantization_config: quantization method 'fp8' is "
                                 "not supported for model_type qwen3_5_moe yet"),
              std::string::npos)
        << error_of(moe);
}

TEST(HybridConfig, LayerPatternInWords) {
    EXPECT_EQ(describe_layer_pattern(std::vector<LayerType>(28, kF)), "full x28");
    EXPECT_EQ(describe_layer_pattern({kL, kF, kF}), "linear x1, full x2");
    EXPECT_EQ(describe_layer_pattern({kL, kL, kF, kL, kL, kF, kL, kF}),
              "linear x2, full x1, linear x2, full x1, linear x1, full x1");
    EXPECT_EQ(describe_layer_pattern({}), "no layers");
}

// The hybrids run on the CPU, one rank; CUDA and tensor parallelism refuse them in one place
// with one message each, also through EngineConfig::resolve.
TEST(HybridConfig, TheEngineRunsThemWithoutTensorParallelism) {
    auto expect_error = [](auto&& f, const std::string& want, const char* name) {
        try {
            f();
            ADD_FAILURE() << name << ": no error";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
        }
    };
    for (const char* name : {"qwen3.5-tiny", "qwen3.5-moe-tiny", "qwen3-next-tiny"}) {
        const ModelConfig c = ModelConfig::load(kFixtures / name);
        EXPECT_NO_THROW(check_engine_support(c, "cpu"));
        EXPECT_NO_THROW(check_engine_support(c, "cuda"));
        ModelConfig odd = c;  // a head size no GPU kernel is compiled for
        odd.head_dim = 96;
        expect_error([&] { check_engine_support(odd, "cuda"); },
                     "model_type " + c.model_type + ": head_dim 96 (the GPU's", name);
        EXPECT_NO_THROW(check_engine_support(odd, "cpu"));
        if (c.num_experts > 0) {  // Qwen3-Next-80B's and Qwen3.5-397B's 512 run, no more
            ModelConfig wide = c;
            wide.num_experts = 512;
            EXPECT_NO_THROW(check_engine_support(wide, "cuda"));
            wide.num_experts = 513;
            expect_error([&] { check_engine_support(wide, "cuda"); }, "num_experts 513 (the GPU's",
                         name);
        }
        EngineConfig engine;
        engine.model_dir = (kFixtures / name).string();
        engine.device = "cpu";
        engine.tensor_parallel_size = 2;
        expect_error([&] { engine.resolve(c); }, "tensor parallelism is not supported", name);
        engine.tensor_parallel_size = 1;
        engine.resolve(c);
        // A state slot per running request; K/V only for the full-attention layers (f32 on
        // the CPU).
        EXPECT_EQ(engine.num_state_slots, 2 * engine.max_num_seqs) << name;  // and snapshots
        EXPECT_EQ(engine.kv_bytes_per_token(c), 2 * c.num_kv_layers() * c.kv_size() * 4);
    }
    const ModelConfig qwen3 = ModelConfig::load(kFixtures / "qwen3-tiny");
    EXPECT_NO_THROW(check_engine_support(qwen3, "cuda", 8));
    EngineConfig engine;
    engine.resolve(qwen3);
    EXPECT_EQ(engine.num_state_slots, 0);
}

// The benchmark shapes (bench/qwen3.5-*: the public configs' dimensions, text-only) parse as
// the models they stand for.
TEST(HybridConfig, BenchShapesAreTheirModels) {
    const std::filesystem::path bench = kFixtures.parent_path().parent_path() / "bench";
    const ModelConfig moe = ModelConfig::load(bench / "qwen3.5-35b-a3b");
    EXPECT_EQ(moe.num_layers, 40);
    EXPECT_EQ(moe.num_kv_layers(), 10);
    EXPECT_EQ(moe.num_experts, 256);
    EXPECT_EQ(moe.rotary_dim, 64);
    EXPECT_EQ(moe.linear_attention.conv_dim(), 8192);
    // 30 layers of 32 heads of 128 x 128 f32 states, plus the conv windows.
    EXPECT_EQ(moe.gdn_state_bytes(), 30 * (32 * 128 * 128 * 4 + 3 * 8192 * 4));
    const ModelConfig dense = ModelConfig::load(bench / "qwen3.5-27b");
    EXPECT_EQ(dense.num_layers, 64);
    EXPECT_EQ(dense.num_kv_layers(), 16);
    EXPECT_EQ(dense.linear_attention.num_value_heads, 48);
    EXPECT_EQ(dense.intermediate_size, 17408);
    for (const ModelConfig* c : {&moe, &dense}) {
        EXPECT_NO_THROW(check_engine_support(*c, "cpu"));
        EXPECT_NO_THROW(check_engine_support(*c, "cuda"));  // head_dim 256, groups of 8 and 6
    }
}
