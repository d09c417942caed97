// Element types and the bf16/f16 <-> f32 conversions every backend shares.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace miniinfer {

enum class DType : uint8_t { kF32, kF16, kBF16, kI32, kI64, kU8 };

constexpr size_t dtype_size(DType dtype) {
    switch (dtype) {
        case DType::kF32:
            return 4;
        case DType::kF16:
            return 2;
        case DType::kBF16:
            return 2;
        case DType::kI32:
            return 4;
        case DType::kI64:
            return 8;
        case DType::kU8:
            return 1;
    }
    return 0;
}

constexpr std::string_view dtype_name(DType dtype) {
    switch (dtype) {
        case DType::kF32:
            return "f32";
        case DType::kF16:
            return "f16";
        case DType::kBF16:
            return "bf16";
        case DType::kI32:
            return "i32";
        case DType::kI64:
            return "i64";
        case DType::kU8:
            return "u8";
    }
    return "?";
}

// bf16 is the top half of an f32: widening is exact, narrowing rounds to nearest even.
inline float bf16_to_f32(uint16_t bits) {
    return std::bit_cast<float>(uint32_t(bits) << 16);
}

inline uint16_t f32_to_bf16(float value) {
    uint32_t bits = std::bit_cast<uint32_t>(value);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);  // quiet NaN
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return uint16_t(bits >> 16);
}

// IEEE half: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
inline float f16_to_f32(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t exponent = (h >> 10) & 0x1fu;
    uint32_t mantissa = h & 0x3ffu;
    uint32_t bits;
    if (exponent == 0x1f) {
        bits = sign | 0x7f800000u | (mantissa << 13);  // inf / NaN
    } else if (exponent != 0) {
        bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
    } else if (mantissa == 0) {
        bits = sign;  // +-0
    } else {          // subnormal: normalise
        int shift = std::countl_zero(uint16_t(mantissa)) - 5;
        mantissa = (mantissa << shift) & 0x3ffu;
        bits = sign | (uint32_t(113 - shift) << 23) | (mantissa << 13);
    }
    return std::bit_cast<float>(bits);
}

inline uint16_t f32_to_f16(float value) {
    uint32_t bits = std::bit_cast<uint32_t>(value);
    uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
    uint32_t abs = bits & 0x7fffffffu;
    if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
    if (abs >= 0x477ff000u) return sign | 0x7c00u;  // overflow (>= 65520 rounds to inf)
    if (abs < 0x38800000u) {                        // result is subnormal or zero
        if (abs < 0x33000000u) return sign;         // < 2^-25 rounds to zero
        uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
        int shift = 126 - int(abs >> 23);  // 14..24
        uint32_t half = mantissa >> shift;
        uint32_t rest = mantissa & ((1u << shift) - 1);
        uint32_t halfway = 1u << (shift - 1);
        if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
        return sign | uint16_t(half);
    }
    abs += 0xfffu + ((abs >> 13) & 1u);  // round to nearest even
    return sign | uint16_t(((abs >> 13) - (112u << 10)) & 0x7fffu);
}

}  // namespace miniinfer
