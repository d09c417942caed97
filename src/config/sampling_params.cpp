#include "config/sampling_params.h"

#include <cmath>
#include <limits>

namespace miniinfer {
namespace {

constexpr const char* kWhere = "sampling params";

// Bounds are inclusive unless `open_low`; NaN and infinities fail every check.
void check_range(const char* field, double value, double low, double high, bool open_low = false) {
    bool ok = std::isfinite(value) && (open_low ? value > low : value >= low) && value <= high;
    if (ok) return;
    if (std::isinf(high))
        fail("{}: '{}' must be {} {} and finite, got {}", kWhere, field, open_low ? ">" : ">=", low,
             value);
    fail("{}: '{}' must be in {}{}, {}], got {}", kWhere, field, open_low ? "(" : "[", low, high,
         value);
}

const Json* present(const Json& json, const char* key) {
    auto it = json.find(key);
    return it == json.end() || it->is_null() ? nullptr : &*it;
}

// Names the field and the type found, never the value (it may be huge or deeply nested).
[[noreturn]] void wrong_type(const char* key, const Json& value, const char* expected) {
    fail("{}: field '{}' must be {}, got {}", kWhere, key, expected, value.type_name());
}

int64_t as_int64(const char* key, const Json& value) {
    if (!value.is_number_integer()) wrong_type(key, value, "an integer");
    if (value.is_number_unsigned() &&
        value.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
        fail("{}: field '{}' is out of range (larger than a signed 64-bit integer)", kWhere, key);
    return value.get<int64_t>();
}

void read(const Json& json, const char* key, double& out) {
    const Json* v = present(json, key);
    if (!v) return;
    if (!v->is_number()) wrong_type(key, *v, "a number");
    out = v->get<double>();
}

void read(const Json& json, const char* key, int64_t& out) {
    if (const Json* v = present(json, key)) out = as_int64(key, *v);
}

void read(const Json& json, const char* key, bool& out) {
    const Json* v = present(json, key);
    if (!v) return;
    if (!v->is_boolean()) wrong_type(key, *v, "a boolean");
    out = v->get<bool>();
}

std::vector<std::string> read_stop(const Json& value) {
    constexpr const char* kExpected = "a string or a list of strings";
    if (value.is_string()) return {value.get<std::string>()};
    if (!value.is_array()) wrong_type("stop", value, kExpected);
    std::vector<std::string> stop;
    for (const Json& s : value) {
        if (!s.is_string()) wrong_type("stop", value, kExpected);
        stop.push_back(s.get<std::string>());
    }
    return stop;
}

std::vector<int64_t> read_token_ids(const char* key, const Json& value) {
    if (!value.is_array()) wrong_type(key, value, "a list of integers");
    std::vector<int64_t> ids;
    for (const Json& id : value) {
        if (!id.is_number_integer()) wrong_type(key, value, "a list of integers");
        ids.push_back(as_int64(key, id));
    }
    return ids;
}

}  // namespace

void SamplingParams::validate(int64_t vocab_size) const {
    MI_CHECK(vocab_size > 0, "vocab_size {}", vocab_size);
    constexpr double kInf = std::numeric_limits<double>::infinity();
    check_range("temperature", temperature, 0.0, kInf);
    if (top_k < -1)
        fail("{}: 'top_k' must be -1, 0 (all tokens) or positive, got {}", kWhere, top_k);
    check_range("top_p", top_p, 0.0, 1.0, /*open_low=*/true);
    check_range("min_p", min_p, 0.0, 1.0);
    check_range("repetition_penalty", repetition_penalty, 0.0, kInf, /*open_low=*/true);
    check_range("presence_penalty", presence_penalty, -2.0, 2.0);
    check_range("frequency_penalty", frequency_penalty, -2.0, 2.0);
    if (max_tokens < 1) fail("{}: 'max_tokens' must be at least 1, got {}", kWhere, max_tokens);
    if (min_tokens < 0) fail("{}: 'min_tokens' must be >= 0, got {}", kWhere, min_tokens);
    if (min_tokens > max_tokens)
        fail("{}: 'min_tokens' ({}) must not exceed 'max_tokens' ({})", kWhere, min_tokens,
             max_tokens);
    for (size_t i = 0; i < stop.size(); ++i)
        if (stop[i].empty()) fail("{}: 'stop' string {} is empty", kWhere, i);
    for (size_t i = 0; i < stop_token_ids.size(); ++i)
        if (stop_token_ids[i] < 0 || stop_token_ids[i] >= vocab_size)
            fail("{}: 'stop_token_ids' entry {} is outside the vocabulary [0, {})", kWhere,
                 stop_token_ids[i], vocab_size);
    if (logprobs && (*logprobs < 0 || *logprobs > 20))
        fail("{}: 'logprobs' must be in [0, 20], got {}", kWhere, *logprobs);
}

SamplingParams SamplingParams::from_defaults(const GenerationConfig& gen) {
    SamplingParams p;
    p.temperature = gen.temperature.value_or(p.temperature);
    p.top_p = gen.top_p.value_or(p.top_p);
    p.top_k = gen.top_k.value_or(p.top_k) == -1 ? 0 : gen.top_k.value_or(p.top_k);
    p.min_p = gen.min_p.value_or(p.min_p);
    p.repetition_penalty = gen.repetition_penalty.value_or(p.repetition_penalty);
    return p;
}

SamplingParams SamplingParams::from_json(const Json& json, const SamplingParams& base) {
    if (!json.is_object()) fail("{}: expected a JSON object, got {}", kWhere, json.type_name());
    SamplingParams p = base;
    read(json, "temperature", p.temperature);
    read(json, "top_p", p.top_p);
    read(json, "top_k", p.top_k);
    if (p.top_k == -1) p.top_k = 0;
    read(json, "min_p", p.min_p);
    read(json, "repetition_penalty", p.repetition_penalty);
    read(json, "presence_penalty", p.presence_penalty);
    read(json, "frequency_penalty", p.frequency_penalty);
    if (const Json* v = present(json, "seed")) {
        if (!v->is_number_integer()) wrong_type("seed", *v, "an integer");
        p.seed = v->is_number_unsigned() ? v->get<uint64_t>() : uint64_t(v->get<int64_t>());
    }
    read(json, "max_tokens", p.max_tokens);
    read(json, "min_tokens", p.min_tokens);
    if (const Json* v = present(json, "stop")) p.stop = read_stop(*v);
    if (const Json* v = present(json, "stop_token_ids"))
        p.stop_token_ids = read_token_ids("stop_token_ids", *v);
    read(json, "ignore_eos", p.ignore_eos);
    if (const Json* v = present(json, "logprobs")) {
        if (v->is_boolean()) {
            int64_t top = 0;
            read(json, "top_logprobs", top);
            p.logprobs = v->get<bool>() ? std::optional<int64_t>(top) : std::nullopt;
        } else {
            if (!v->is_number_integer()) wrong_type("logprobs", *v, "an integer or a boolean");
            p.logprobs = as_int64("logprobs", *v);
        }
    }
    read(json, "skip_special_tokens", p.skip_special_tokens);
    return p;
}

}  // namespace miniinfer
