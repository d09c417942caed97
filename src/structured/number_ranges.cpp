#include "structured/number_ranges.h"

#include <algorithm>
#include <string>

namespace miniinfer::structured {

namespace {

std::string digits_of(uint64_t v) {
    return std::to_string(v);
}

// Decimal strings of equal length, lo <= hi: the numbers between them, digit by digit.
ExprPtr digits_between(const std::string& lo, const std::string& hi) {
    if (lo.empty()) return empty_expr();
    const std::string lo_rest = lo.substr(1), hi_rest = hi.substr(1);
    const bool lo_min = lo_rest.find_first_not_of('0') == std::string::npos;
    const bool hi_max = hi_rest.find_first_not_of('9') == std::string::npos;
    auto any_digits = [](size_t n) { return repeat(byte_range('0', '9'), int(n), int(n)); };
    if (lo[0] == hi[0]) return seq({literal(lo.substr(0, 1)), digits_between(lo_rest, hi_rest)});
    if (lo_min && hi_max) return seq({byte_range(lo[0], hi[0]), any_digits(lo_rest.size())});
    std::vector<ExprPtr> branches;
    char first = lo[0];
    if (!lo_min) {
        branches.push_back(seq(
            {literal(lo.substr(0, 1)), digits_between(lo_rest, std::string(lo_rest.size(), '9'))}));
        ++first;
    }
    const char last = hi_max ? hi[0] : char(hi[0] - 1);
    if (first <= last)
        branches.push_back(seq({byte_range(first, last), any_digits(lo_rest.size())}));
    if (!hi_max)
        branches.push_back(seq(
            {literal(hi.substr(0, 1)), digits_between(std::string(hi_rest.size(), '0'), hi_rest)}));
    return alt(std::move(branches));
}

}  // namespace

ExprPtr uint_range(uint64_t lo, uint64_t hi) {
    std::vector<ExprPtr> branches;
    const bool bounded = hi != kNoLimit;
    const size_t lo_len = digits_of(lo).size();
    const size_t hi_len = bounded ? digits_of(hi).size() : lo_len;
    uint64_t pow = 1;
    for (size_t k = 1; k < lo_len; ++k) pow *= 10;  // 10^(len-1)
    for (size_t len = lo_len; len <= hi_len; ++len, pow *= 10) {
        const uint64_t a = std::max(lo, len == 1 ? 0 : pow);
        const uint64_t top = len >= 20 ? ~uint64_t(0) : pow * 10 - 1;
        const uint64_t b = bounded ? std::min(hi, top) : top;
        if (a <= b) branches.push_back(digits_between(digits_of(a), digits_of(b)));
    }
    if (!bounded)  // any number with more digits
        branches.push_back(
            seq({byte_range('1', '9'), repeat(byte_range('0', '9'), int(lo_len), -1)}));
    if (branches.empty()) return alt({});
    return branches.size() == 1 ? branches[0] : alt(std::move(branches));
}

ExprPtr int_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
    std::vector<ExprPtr> branches;
    if (!hi || *hi >= 0) {
        const uint64_t a = lo && *lo > 0 ? uint64_t(*lo) : 0;
        branches.push_back(uint_range(a, hi ? uint64_t(*hi) : kNoLimit));
    }
    if (!lo || *lo < 0) {
        const uint64_t a = hi && *hi < 0 ? uint64_t(-*hi) : 1;
        branches.push_back(seq({literal("-"), uint_range(a, lo ? uint64_t(-*lo) : kNoLimit)}));
    }
    return branches.size() == 1 ? branches[0] : alt(std::move(branches));
}

ExprPtr unsigned_number(uint64_t a, uint64_t b) {
    const ExprPtr frac = optional(seq({literal("."), plus(byte_range('0', '9'))}));
    std::vector<ExprPtr> branches;
    if (b == kNoLimit) return seq({uint_range(a, kNoLimit), frac});
    if (b > a) branches.push_back(seq({uint_range(a, b - 1), frac}));
    branches.push_back(
        seq({literal(std::to_string(b)), optional(seq({literal("."), plus(literal("0"))}))}));
    return branches.size() == 1 ? branches[0] : alt(std::move(branches));
}

}  // namespace miniinfer::structured
