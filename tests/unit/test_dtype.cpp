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

// FP8 e4m3 (the fp8 KV cache): every code widens to the value its bits spell and narrows back;
// narrowing picks the nearest code (ties to the even code), saturates at 448, keeps NaN. The
// reference is a search over all 127 finite magnitudes.
TEST(DType, E4m3MatchesNearestCodeSearch) {
    EXPECT_EQ(e4m3_to_f32(0x38), 1.f);
    EXPECT_EQ(e4m3_to_f32(0x7e), 448.f);
    EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.f, -9));  // the smallest subnormal
    EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.f, -6));  // the smallest normal
    EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7f)) && std::isnan(e4m3_to_f32(0xff)));
    EXPECT_EQ(f32_to_e4m3(1000.f), 0x7e);
    EXPECT_EQ(f32_to_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
    EXPECT_EQ(f32_to_e4m3(std::nanf("")) & 0x7f, 0x7f);
    for (int c = 0; c < 0x7f; ++c) {
        EXPECT_EQ(f32_to_e4m3(e4m3_to_f32(uint8_t(c))), c) << c;
        EXPECT_EQ(f32_to_e4m3(e4m3_to_f32(uint8_t(c | 0x80))), c | 0x80) << c;
    }
    auto nearest = [](float x) {
        const float a = std::fabs(x);
        int best = 0x7e;
        if (a < 448.f) {
            float best_d = INFINITY;
            for (int c = 0; c < 0x7f; ++c) {
                const float d = std::fabs(e4m3_to_f32(uint8_t(c)) - a);
                if (d < best_d || (d == best_d && c % 2 == 0)) best = c, best_d = d;
            }
        }
        return (std::signbit(x) ? 0x80 : 0) | best;
    };
    for (int c = 0; c + 1 < 0x7f; ++c) {  // every midpoint: the tie goes to the even code
        const float mid = (e4m3_to_f32(uint8_t(c)) + e4m3_to_f32(uint8_t(c + 1))) / 2;
        EXPECT_EQ(f32_to_e4m3(mid), nearest(mid)) << mid;
    }
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> mantissa(-1.f, 1.f);
    std::uniform_int_distribution<int> exponent(-14, 10);
    for (int i = 0; i < 20000; ++i) {
        const float x = std::ldexp(mantissa(rng), exponent(rng));
        ASSERT_EQ(f32_to_e4m3(x), nearest(x)) << x;
    }
}
