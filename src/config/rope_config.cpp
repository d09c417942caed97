// Reading the rotary embedding's fields of config.json (config_parsing.h).
#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/config_parsing.h"

namespace miniinfer {

std::string RopeScaling::describe() const {
    switch (kind) {
        case Kind::kNone:
            return "none";
        case Kind::kLinear:
            return fmt::format("linear (factor {})", factor);
        case Kind::kYarn:
            return fmt::format(
                "yarn (factor {}, original_max_position_embeddings {}, beta_fast {}, beta_slow "
                "{}, attention_factor {}, truncate {})",
                factor, original_max_position_embeddings, beta_fast, beta_slow, attention_factor,
                truncate);
    }
    return "?";
}

namespace config_parsing {
namespace {

// One rope dictionary ("rope_parameters" or "rope_scaling") as transformers 5 reads it, and the
// rope_theta it names, if any.
struct ParsedRope {
    RopeScaling scaling;
    std::optional<double> theta;
    // The hybrids' fields (refused in any other model's dictionaries).
    std::optional<double> partial_rotary_factor;
    std::optional<std::vector<int64_t>> mrope_section;
    std::optional<bool> mrope_interleaved;
};

ParsedRope parse_rope_dict(const Json& dict, const std::string& field, const ModelConfig& cfg) {
    if (!dict.is_object()) fail("{}: must be an object or null", field);
    ParsedRope out;
    // "type" is the 4.x spelling of "rope_type"; transformers takes rope_type where both are.
    std::string kind = json_get_or<std::string>(dict, "type", "default", field);
    if (dict.contains("rope_type")) {
        const auto rope_type = json_get<std::string>(dict, "rope_type", field);
        if (dict.contains("type") && rope_type != kind)
            fail("{}: 'rope_type' is '{}' but 'type' is '{}'", field, rope_type, kind);
        kind = rope_type;
    }
    std::vector<std::string> known = {"rope_type", "type", "rope_theta", "partial_rotary_factor"};
    RopeScaling& rs = out.scaling;
    if (kind == "default") {
        rs.kind = RopeScaling::Kind::kNone;
    } else if (kind == "linear") {
        rs.kind = RopeScaling::Kind::kLinear;
        rs.factor = json_get<double>(dict, "factor", field);
        known.push_back("factor");
    } else if (kind == "yarn") {
        rs.kind = RopeScaling::Kind::kYarn;
        rs.factor = json_get<double>(dict, "factor", field);
        // transformers fills it in from max_position_embeddings when absent.
        rs.original_max_position_embeddings = json_get_or<int64_t>(
            dict, "original_max_position_embeddings", cfg.max_position_embeddings, field);
        if (rs.original_max_position_embeddings <= 0)
            fail("{}: 'original_max_position_embeddings' must be positive, got {}", field,
                 rs.original_max_position_embeddings);
        // transformers reads these with `or`: 0 means the default, as null does.
        const double beta_fast = json_get_or<double>(dict, "beta_fast", 0.0, field);
        const double beta_slow = json_get_or<double>(dict, "beta_slow", 0.0, field);
        rs.beta_fast = beta_fast != 0.0 ? beta_fast : 32.0;
        rs.beta_slow = beta_slow != 0.0 ? beta_slow : 1.0;
        rs.truncate = json_get_or<bool>(dict, "truncate", true, field);
        auto mscale = [](double scale, double m) {
            return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
        };
        const double m = json_get_or<double>(dict, "mscale", 0.0, field);
        const double m_all = json_get_or<double>(dict, "mscale_all_dim", 0.0, field);
        if (dict.contains("attention_factor") && !dict["attention_factor"].is_null()) {
            rs.attention_factor = json_get<double>(dict, "attention_factor", field);
            if (!(rs.attention_factor > 0.0))
                fail("{}: 'attention_factor' must be > 0, got {}", field, rs.attention_factor);
        } else if (m != 0.0 && m_all != 0.0) {
            rs.attention_factor = mscale(rs.factor, m) / mscale(rs.factor, m_all);
        } else {
            rs.attention_factor = mscale(rs.factor, 1.0);
        }
        for (const char* k :
             {"factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "truncate",
              "mscale", "mscale_all_dim", "attention_factor"})
            known.push_back(k);
    } else {
        fail("{}: rope type '{}' is not implemented (supported: default, linear, yarn)", field,
             kind);
    }
    if (rs.kind != RopeScaling::Kind::kNone && !(rs.factor >= 1.0))
        fail("{}: 'factor' must be >= 1, got {}", field, rs.factor);
    if (cfg.is_hybrid()) {
        auto present = [&](const char* key) { return dict.contains(key) && !dict[key].is_null(); };
        if (present("partial_rotary_factor"))
            out.partial_rotary_factor = json_get<double>(dict, "partial_rotary_factor", field);
        if (present("mrope_section"))
            out.mrope_section = json_get<std::vector<int64_t>>(dict, "mrope_section", field);
        if (present("mrope_interleaved"))
            out.mrope_interleaved = json_get<bool>(dict, "mrope_interleaved", field);
        known.push_back("mrope_section");
        known.push_back("mrope_interleaved");
    } else {
        // Rotating only part of each head (partial_rotary_factor < 1): the hybrids only.
        const double partial = json_get_or<double>(dict, "partial_rotary_factor", 1.0, field);
        if (partial != 1.0)
            fail("{}: 'partial_rotary_factor' is {}; only 1 (the whole head rotates) is supported",
                 field, partial);
    }
    if (dict.contains("rope_theta") && !dict["rope_theta"].is_null())
        out.theta = json_get<double>(dict, "rope_theta", field);
    for (const auto& [key, value] : dict.items())
        if (std::find(known.begin(), known.end(), key) == known.end())
            fail(
                "{}: field '{}' is not read for rope type '{}' (it would change nothing here; "
                "remove it or use a supported rope type)",
                field, key, kind);
    return out;
}

// Every value given for one field (top level, rope_parameters, rope_scaling) must agree; the
// first one given, or none.
template <typename T>
std::optional<T> agreed(const std::vector<std::pair<std::string, std::optional<T>>>& given,
                        const std::string& where) {
    std::optional<std::pair<std::string, T>> first;
    for (const auto& [name, value] : given) {
        if (!value) continue;
        if (!first)
            first.emplace(name, *value);
        else if (*value != first->second)
            fail("{}: '{}' ({}) and '{}' ({}) disagree", where, first->first,
                 fmt::format("{}", first->second), name, fmt::format("{}", *value));
    }
    if (!first) return std::nullopt;
    return first->second;
}

// A field of a rope dictionary that may be absent.
template <typename T>
std::optional<T> from(const std::optional<ParsedRope>& rope, std::optional<T> ParsedRope::*field) {
    return rope ? (*rope).*field : std::nullopt;
}

// The hybrids' partial rotary (Qwen3-Next's config has partial_rotary_factor at the top level,
// Qwen3.5's in rope_parameters too; transformers defaults it to 0.25) and Qwen3.5's mRoPE
// sections, which must cover the rotary's rotary_dim / 2 frequencies.
void parse_partial_rotary(const Json& json, const std::string& where,
                          const std::optional<ParsedRope>& params,
                          const std::optional<ParsedRope>& scaling, ModelConfig& cfg) {
    std::optional<double> top;
    if (json.contains("partial_rotary_factor") && !json["partial_rotary_factor"].is_null())
        top = json_get<double>(json, "partial_rotary_factor", where);
    cfg.partial_rotary_factor =
        agreed<double>({{"partial_rotary_factor", top},
                        {"rope_parameters.partial_rotary_factor",
                         from(params, &ParsedRope::partial_rotary_factor)},
                        {"rope_scaling.partial_rotary_factor",
                         from(scaling, &ParsedRope::partial_rotary_factor)}},
                       where)
            .value_or(0.25);
    const double factor = cfg.partial_rotary_factor;
    if (!(factor > 0.0 && factor <= 1.0))
        fail("{}: 'partial_rotary_factor' must be in (0, 1], got {}", where, factor);
    cfg.rotary_dim = int64_t(double(cfg.head_dim) * factor);  // transformers truncates too
    if (cfg.rotary_dim < 2 || cfg.rotary_dim % 2 != 0)
        fail(
            "{}: 'partial_rotary_factor' {} of head_dim {} rotates {} dims; rotary needs an even "
            "number of at least 2",
            where, factor, cfg.head_dim, cfg.rotary_dim);

    const auto section = agreed<std::vector<int64_t>>(
        {{"rope_parameters.mrope_section", from(params, &ParsedRope::mrope_section)},
         {"rope_scaling.mrope_section", from(scaling, &ParsedRope::mrope_section)}},
        where);
    cfg.mrope_interleaved =
        agreed<bool>(
            {{"rope_parameters.mrope_interleaved", from(params, &ParsedRope::mrope_interleaved)},
             {"rope_scaling.mrope_interleaved", from(scaling, &ParsedRope::mrope_interleaved)}},
            where)
            .value_or(false);
    if (!section) return;
    cfg.mrope_section = *section;
    int64_t total = 0;
    for (int64_t n : cfg.mrope_section) {
        if (n < 0) fail("{}: 'mrope_section' has a negative section ({})", where, n);
        total += n;
    }
    if (cfg.mrope_section.size() != 3 || total != cfg.rotary_dim / 2)
        fail(
            "{}: 'mrope_section' {} must be 3 sections (temporal, height, width) covering the "
            "rotary's {} frequencies (rotary_dim {} / 2)",
            where, fmt::format("{}", cfg.mrope_section), cfg.rotary_dim / 2, cfg.rotary_dim);
}

// Newer transformers write "rope_parameters" {rope_type, rope_theta, factor, ...}; older ones
// "rope_theta" and "rope_scaling" {type | rope_type, factor, ...}. Both mean the same; where a
// config has both, they must agree (transformers would take rope_scaling and drop the other).
}  // namespace

void parse_rope(const Json& json, const std::string& where, ModelConfig& cfg) {
    auto present = [&](const char* key) { return json.contains(key) && !json[key].is_null(); };
    std::optional<ParsedRope> params, scaling;
    if (present("rope_parameters"))
        params = parse_rope_dict(json["rope_parameters"], where + " rope_parameters", cfg);
    if (present("rope_scaling"))
        scaling = parse_rope_dict(json["rope_scaling"], where + " rope_scaling", cfg);
    if (params && scaling && params->scaling != scaling->scaling)
        fail("{}: 'rope_parameters' ({}) and 'rope_scaling' ({}) disagree", where,
             params->scaling.describe(), scaling->scaling.describe());
    // rope_theta may sit at the top level or in either dictionary; every one given must agree.
    std::vector<std::pair<std::string, double>> thetas;
    if (present("rope_theta"))
        thetas.emplace_back("rope_theta", json_get<double>(json, "rope_theta", where));
    if (params && params->theta) thetas.emplace_back("rope_parameters.rope_theta", *params->theta);
    if (scaling && scaling->theta) thetas.emplace_back("rope_scaling.rope_theta", *scaling->theta);
    for (const auto& [name, theta] : thetas)
        if (theta != thetas.front().second)
            fail("{}: '{}' ({}) and '{}' ({}) disagree", where, thetas.front().first,
                 thetas.front().second, name, theta);
    if (!thetas.empty()) cfg.rope_theta = thetas.front().second;
    if (!(cfg.rope_theta > 1.0)) fail("{}: rope_theta must be > 1, got {}", where, cfg.rope_theta);
    if (params)
        cfg.rope_scaling = params->scaling;
    else if (scaling)
        cfg.rope_scaling = scaling->scaling;
    cfg.rotary_dim = cfg.head_dim;
    if (cfg.is_hybrid()) parse_partial_rotary(json, where, params, scaling, cfg);
}

}  // namespace config_parsing
}  // namespace miniinfer
