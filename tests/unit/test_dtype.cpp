#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "core/dtype.h"

using namespace miniinfer;

TEST(DType, Bf16RoundTripsExactValues) {
    for (float v : {0.f, -0.f, 1.f, -2.5f, 3.140625f, 65504.f, 1e-30f})
        EXPECT_EQ(bf16_to_f32(f32_to_bf16(bf16_to_f32(f32_to_bf16(v)))),
                  bf16_to_f32(f32_to_bf16(v)));
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.f)), 1.f);
    EXPECT_EQ(f32_to_bf16(1.f), 0x3f80);
}

TEST(DType, Bf16RoundsToNearestEven) {
    // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.f + 1.f / 256)), 1.f);
    // 1 + 3 * 2^-8 is halfway between 1.0078125 (odd) and 1.015625 (even).
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.f + 3.f / 256)), 1.015625f);
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
    EXPECT_TRUE(std::isinf(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::infinity()))));
}

TEST(DType, F16KnownValues) {
    EXPECT_EQ(f16_to_f32(0x3c00), 1.f);
    EXPECT_EQ(f16_to_f32(0xc000), -2.f);
    EXPECT_EQ(f16_to_f32(0x7bff), 65504.f);
    EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.f, -24));  // smallest subnormal
    EXPECT_EQ(f16_to_f32(0x0200), std::ldexp(1.f, -15));  // a larger subnormal
    EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)));
    EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
    EXPECT_EQ(f32_to_f16(1.f), 0x3c00);
    EXPECT_EQ(f32_to_f16(65504.f), 0x7bff);
    EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
    EXPECT_EQ(f32_to_f16(std::ldexp(1.f, -24)), 0x0001);
    EXPECT_EQ(f32_to_f16(std::ldexp(1.f, -26)), 0x0000);
}

TEST(DType, F16RoundTripOfEveryHalf) {
    for (uint32_t h = 0; h < 0x10000; ++h) {
        float f = f16_to_f32(uint16_t(h));
        if (std::isnan(f)) continue;
        EXPECT_EQ(f32_to_f16(f), uint16_t(h)) << "half 0x" << std::hex << h;
    }
}

TEST(DType, F16RoundingMatchesNearestRepresentable) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-70000.f, 70000.f);
    for (int i = 0; i < 20000; ++i) {
        float v = dist(rng) * (i % 3 == 0 ? 1e-4f : 1.f);
        float r = f16_to_f32(f32_to_f16(v));
        if (std::fabs(v) > 65519.f) continue;
        // No other half is closer than the one chosen.
        uint16_t h = f32_to_f16(v);
        for (int d : {-1, 1}) {
            float other = f16_to_f32(uint16_t(h + d));
            if (!std::isfinite(other) || std::signbit(other) != std::signbit(r)) continue;
            EXPECT_LE(std::fabs(r - v), std::fabs(other - v)) << v;
        }
    }
}
