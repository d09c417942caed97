// Element types and the bf16/f16/e4m3 <-> f32 conversions every backend shares.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace miniinfer {

// kF8E4M3: FP8 e4m3 values (an FP8 checkpoint's weights, safetensors "F8_E4M3"); kU8: raw
// bytes (an FP8 KV cache's pages, parameter blocks).
enum class DType : uint8_t { kF32, kF16, kBF16, kI32, kI64, kU8, kF8E4M3 };

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
        case DType::kF8E4M3:
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
        case DType::kF8E4M3:
            return "f8e4m3";
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

// FP8 e4m3 ("e4m3fn", the KV cache's fp8): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no
// infinities, S.1111.111 is NaN, the largest finite value is 448. Widening is exact.
inline float e4m3_to_f32(uint8_t v) {
    const uint32_t sign = uint32_t(v & 0x80u) << 24;
    const uint32_t exponent = (v >> 3) & 0xfu, mantissa = v & 0x7u;
    if (exponent == 0xf && mantissa == 0x7) return std::bit_cast<float>(sign | 0x7fc00000u);
    if (exponent == 0)  // subnormal: mantissa * 2^-9
        return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(float(mantissa) / 512.f));
    return std::bit_cast<float>(sign | ((exponent + 120) << 23) | (mantissa << 20));
}

// Narrowing rounds to nearest even and saturates (|x| > 448 becomes +-448, as CUDA's
// __nv_cvt_float_to_fp8 with __NV_SATFINITE and vLLM's fp8 KV cache do); NaN stays NaN.
inline uint8_t f32_to_e4m3(float value) {
    const uint32_t bits = std::bit_cast<uint32_t>(value);
    const uint8_t sign = uint8_t((bits >> 24) & 0x80u);
    const uint32_t abs = bits & 0x7fffffffu;
    if (abs > 0x7f800000u) return sign | 0x7fu;   // NaN
    if (abs >= 0x43e00000u) return sign | 0x7eu;  // >= 448 (and inf): saturate
    if (abs < 0x3c800000u) {                      // < 2^-6: subnormal or zero, step 2^-9
        const float steps = std::bit_cast<float>(abs) * 512.f;  // exact: a power of two
        const uint32_t whole = uint32_t(steps);
        const float rest = steps - float(whole);
        const uint32_t q = whole + ((rest > 0.5f || (rest == 0.5f && (whole & 1u))) ? 1u : 0u);
        return sign | uint8_t(q);  // q == 8 is the smallest normal, 2^-6: the same code
    }
    uint32_t rounded = abs + 0x7ffffu + ((abs >> 20) & 1u);  // to 3 mantissa bits, ties to even
    const uint32_t code = ((rounded >> 23) - 120) << 3 | ((rounded >> 20) & 0x7u);
    return sign | uint8_t(code > 0x7eu ? 0x7eu : code);  // 464 rounds past 448: saturate
}

}  // namespace miniinfer
