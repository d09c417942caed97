#include "config/sampling_params.h"

#include <algorithm>
#include <charconv>
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

std::vector<std::string> read_strings(const char* key, const Json& value) {
    if (!value.is_array()) wrong_type(key, value, "a list of strings");
    std::vector<std::string> out;
    for (const Json& s : value) {
        if (!s.is_string()) wrong_type(key, value, "a list of strings");
        out.push_back(s.get<std::string>());
    }
    return out;
}

// OpenAI's form: {"<token id>": bias}; the ids are checked against the vocabulary in validate().
std::vector<std::pair<int32_t, float>> read_logit_bias(const Json& value) {
    if (!value.is_object()) wrong_type("logit_bias", value, "an object of token id -> bias");
    std::vector<std::pair<int32_t, float>> out;
    for (const auto& [key, bias] : value.items()) {
        int64_t id = -1;
        const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
        if (ec != std::errc() || end != key.data() + key.size() || key.empty())
            fail("{}: 'logit_bias' keys must be token ids, got \"{}\"", kWhere, key.substr(0, 32));
        if (!bias.is_number()) wrong_type("logit_bias", bias, "a number for each token id");
        out.emplace_back(int32_t(std::clamp<int64_t>(id, -1, INT32_MAX)), bias.get<float>());
    }
    return out;
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
    auto check_id = [&](const char* field, int64_t id) {
        if (id < 0 || id >= vocab_size)
            fail("{}: '{}' token id {} is outside the vocabulary [0, {})", kWhere, field, id,
                 vocab_size);
    };
    for (auto [id, bias] : logit_bias) {
        check_id("logit_bias", id);
        if (!std::isfinite(bias) || bias < -100.f || bias > 100.f)
            fail("{}: 'logit_bias' of token {} must be in [-100, 100], got {}", kWhere, id, bias);
    }
    if (allowed_token_ids) {
        if (allowed_token_ids->empty()) fail("{}: 'allowed_token_ids' is empty", kWhere);
        for (int64_t id : *allowed_token_ids) check_id("allowed_token_ids", id);
    }
    for (size_t i = 0; i < bad_words.size(); ++i)
        if (bad_words[i].empty()) fail("{}: 'bad_words' entry {} is empty", kWhere, i);
    for (const auto& ids : bad_words_token_ids) {
        if (ids.empty()) fail("{}: 'bad_words_token_ids' holds an empty sequence", kWhere);
        for (int32_t id : ids) check_id("bad_words", id);
    }
    if (truncate_prompt_tokens && *truncate_prompt_tokens < 1 && *truncate_prompt_tokens != -1)
        fail("{}: 'truncate_prompt_tokens' must be -1 (max_model_len) or >= 1, got {}", kWhere,
             *truncate_prompt_tokens);
    // A finished grammar allows only EOS: masking EOS would leave no token at all.
    if (structured_outputs && ignore_eos)
        fail("{}: 'ignore_eos' cannot be combined with structured output", kWhere);
    if (structured_outputs && min_tokens > 0)
        fail("{}: 'min_tokens' cannot be combined with structured output", kWhere);
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
    read(json, "include_stop_str_in_output", p.include_stop_str_in_output);
    if (const Json* v = present(json, "logit_bias")) p.logit_bias = read_logit_bias(*v);
    if (const Json* v = present(json, "allowed_token_ids"))
        p.allowed_token_ids = read_token_ids("allowed_token_ids", *v);
    if (const Json* v = present(json, "bad_words")) p.bad_words = read_strings("bad_words", *v);
    if (const Json* v = present(json, "bad_words_token_ids")) {
        if (!v->is_array()) wrong_type("bad_words_token_ids", *v, "a list of lists of integers");
        p.bad_words_token_ids.clear();
        for (const Json& word : *v) {
            std::vector<int32_t> ids;
            for (int64_t id : read_token_ids("bad_words_token_ids", word))
                ids.push_back(int32_t(std::clamp<int64_t>(id, -1, INT32_MAX)));
            p.bad_words_token_ids.push_back(std::move(ids));
        }
    }
    if (const Json* v = present(json, "truncate_prompt_tokens"))
        p.truncate_prompt_tokens = as_int64("truncate_prompt_tokens", *v);
    if (const Json* v = present(json, "structured_outputs"))
        p.structured_outputs = StructuredOutput::from_json(*v);
    return p;
}

Json SamplingParams::to_json() const {
    Json j = {{"temperature", temperature},
              {"top_k", top_k},
              {"top_p", top_p},
              {"min_p", min_p},
              {"repetition_penalty", repetition_penalty},
              {"presence_penalty", presence_penalty},
              {"frequency_penalty", frequency_penalty},
              {"max_tokens", max_tokens},
              {"min_tokens", min_tokens},
              {"stop", stop},
              {"stop_token_ids", stop_token_ids},
              {"ignore_eos", ignore_eos},
              {"skip_special_tokens", skip_special_tokens},
              {"include_stop_str_in_output", include_stop_str_in_output}};
    j["seed"] = seed ? Json(*seed) : Json(nullptr);
    j["logprobs"] = logprobs ? Json(*logprobs) : Json(nullptr);
    if (!logit_bias.empty()) {
        Json bias = Json::object();
        for (auto [id, b] : logit_bias) bias[std::to_string(id)] = b;
        j["logit_bias"] = std::move(bias);
    }
    if (allowed_token_ids) j["allowed_token_ids"] = *allowed_token_ids;
    if (!bad_words.empty()) j["bad_words"] = bad_words;
    if (!bad_words_token_ids.empty()) j["bad_words_token_ids"] = bad_words_token_ids;
    if (truncate_prompt_tokens) j["truncate_prompt_tokens"] = *truncate_prompt_tokens;
    if (structured_outputs) j["structured_outputs"] = structured_outputs->to_json();
    return j;
}

}  // namespace miniinfer
