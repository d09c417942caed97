// StateCache: the hybrid models' per-slot Gated DeltaNet state (conv window and S per layer).
#include <gtest/gtest.h>

#include <filesystem>

#include "core/check.h"
#include "kvcache/state_cache.h"

using namespace miniinfer;

namespace {
const std::filesystem::path kFixtures = MINIINFER_FIXTURES;

// Slot `slot` of every layer's window and S filled with `value`.
void fill_slot(StateCache& c, int32_t slot, float value) {
    for (int64_t l = 0; l < c.num_layers(); ++l)
        for (Tensor* t : {&c.conv(l), &c.recurrent(l)}) {
            const int64_t n = t->numel() / t->size(0);
            std::fill_n(t->data<float>() + slot * n, n, value);
        }
}

// Whether every element of slot `slot` in every layer equals `value`.
bool slot_is(StateCache& c, int32_t slot, float value) {
    for (int64_t l = 0; l < c.num_layers(); ++l)
        for (Tensor* t : {&c.conv(l), &c.recurrent(l)}) {
            const int64_t n = t->numel() / t->size(0);
            for (int64_t i = 0; i < n; ++i)
                if (t->data<float>()[slot * n + i] != value) return false;
        }
    return true;
}
}  // namespace

TEST(StateCache, OneSlotPerRequestInEveryGatedDeltaNetLayer) {
    const ModelConfig model = ModelConfig::load(kFixtures / "qwen3.5-tiny");
    StateCache c(model, 3);
    EXPECT_EQ(c.num_layers(), model.num_linear_attention_layers());
    EXPECT_EQ(c.num_layers(), 6);  // (linear x3, full x1) x2
    EXPECT_EQ(c.slot_bytes(), model.gdn_state_bytes(4));
    const LinearAttentionConfig& la = model.linear_attention;
    EXPECT_EQ(c.conv(0).shape(), (Shape{3, la.conv_kernel_dim - 1, la.conv_dim()}));
    EXPECT_EQ(c.recurrent(5).shape(),
              (Shape{3, la.num_value_heads, la.key_head_dim, la.value_head_dim}));

    fill_slot(c, 0, 7.f);
    fill_slot(c, 1, 2.f);
    c.copy(1, 2);
    EXPECT_TRUE(slot_is(c, 2, 2.f));
    c.reset(1);
    EXPECT_TRUE(slot_is(c, 1, 0.f));
    EXPECT_TRUE(slot_is(c, 2, 2.f));
    EXPECT_TRUE(slot_is(c, 0, 7.f)) << "other slots untouched";
}

TEST(StateCache, NoneForAModelWithoutGatedDeltaNetLayers) {
    const StateCache c(ModelConfig::load(kFixtures / "qwen3-tiny"), 4);
    EXPECT_EQ(c.num_layers(), 0);
    EXPECT_EQ(c.slot_bytes(), 0);
}
