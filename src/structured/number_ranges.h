// Integer and decimal ranges as grammar, digit by digit (JSON Schema's minimum / maximum):
// [-5, 120] becomes "-" [1-5] | [0-9] | [1-9][0-9] | "1" [01][0-9] | "120", canonical
// decimals only (no leading zeros, no "+").
#pragma once

#include <cstdint>
#include <optional>

#include "structured/grammar.h"

namespace miniinfer::structured {

inline constexpr uint64_t kNoLimit = ~uint64_t(0);

// Canonical decimals (no leading zeros) in [lo, hi]; hi kNoLimit: unbounded.
ExprPtr uint_range(uint64_t lo, uint64_t hi);
// Integers in [lo, hi], either side open when nullopt ("-0" is not written).
ExprPtr int_range(std::optional<int64_t> lo, std::optional<int64_t> hi);
// Non-negative decimals in [a, b] (b kNoLimit: unbounded) with an optional fraction; at b
// itself only zeros may follow the point.
ExprPtr unsigned_number(uint64_t a, uint64_t b);

}  // namespace miniinfer::structured
