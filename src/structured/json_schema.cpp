#include "structured/json_schema.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "core/json.h"
#include "structured/number_ranges.h"
#include "structured/regex.h"
#include "structured/utf8_ranges.h"

namespace miniinfer::structured {

namespace {

using OJson = nlohmann::ordered_json;

const std::set<std::string> kAnnotations = {"title",    "description", "default",  "examples",
                                            "$schema",  "$id",         "$comment", "deprecated",
                                            "readOnly", "writeOnly",   "$defs",    "definitions"};
const std::set<std::string> kKeywords = {"type",
                                         "enum",
                                         "const",
                                         "anyOf",
                                         "oneOf",
                                         "allOf",
                                         "$ref",
                                         "nullable",
                                         "properties",
                                         "required",
                                         "additionalProperties",
                                         "items",
                                         "prefixItems",
                                         "minItems",
                                         "maxItems",
                                         "minLength",
                                         "maxLength",
                                         "pattern",
                                         "format",
                                         "minimum",
                                         "maximum",
                                         "exclusiveMinimum",
                                         "exclusiveMaximum",
                                         "uniqueItems"};

const std::map<std::string, std::string> kFormats = {
    {"date", R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))"},
    {"time", R"(([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"},
    {"date-time",
     R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"},
    {"uuid", R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"},
    {"email",
     R"([a-zA-Z0-9_%+-]+(\.[a-zA-Z0-9_%+-]+)*@[a-zA-Z0-9-]+(\.[a-zA-Z0-9-]+)*\.[a-zA-Z]{2,})"},
    {"ipv4", R"(((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))"},
    {"hostname",
     R"([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)*)"},
    {"uri", R"([a-zA-Z][a-zA-Z0-9+.-]*:[a-zA-Z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+)"},
};

class SchemaConverter {
  public:
    explicit SchemaConverter(OJson root) : root_(std::move(root)) { add_common_rules(); }

    Grammar build(std::string_view prefix = "", std::string_view suffix = "") {
        ExprPtr doc = convert(root_, "#");
        if (!prefix.empty() || !suffix.empty()) doc = seq({literal(prefix), doc, literal(suffix)});
        builder_.add_rule("root", doc);
        for (size_t i = 0; i < pending_refs_.size(); ++i) {
            auto [name, path] = pending_refs_[i];
            builder_.add_rule(name, convert(resolve(path), path));
        }
        return builder_.build("root");
    }

  private:
    [[noreturn]] static void error(const std::string& path, const std::string& what) {
        fail("JSON schema: {} at {}", what, path);
    }

    void add_common_rules() {
        // A string's body loops in one rule (characters, escapes, then the closing quote),
        // so a token inside a string never depends on what called it.
        std::vector<ExprPtr> body;
        ByteSet ascii;
        for (int c = 0x20; c < 0x80; ++c)
            if (c != '"' && c != '\\') ascii.set(c);
        body.push_back(seq({bytes_expr(ascii), ref("string_body")}));
        const ExprPtr non_ascii = utf8_class({{0x80, kMaxCodepoint}});
        for (const ExprPtr& branch : non_ascii->children)
            body.push_back(seq({branch, ref("string_body")}));
        body.push_back(seq({literal("\\"), ref("escape"), ref("string_body")}));
        body.push_back(literal("\""));
        builder_.add_rule("string_body", alt(std::move(body)));
        const ExprPtr hex = regex_to_expr("[0-9a-fA-F]");
        builder_.add_rule("escape", alt({regex_to_expr(R"(["\\/bfnrt])"),
                                         seq({literal("u"), repeat(hex, 4, 4)})}));
        builder_.add_rule("string", seq({literal("\""), ref("string_body")}));
        builder_.add_rule("integer", regex_to_expr("-?(0|[1-9][0-9]*)"));
        builder_.add_rule("number",
                          regex_to_expr("-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][-+]?[0-9]+)?"));
        builder_.add_rule("boolean", alt({literal("true"), literal("false")}));
        builder_.add_rule("null", literal("null"));
        builder_.add_rule("value", alt({ref("object"), ref("array"), ref("string"), ref("number"),
                                        ref("boolean"), ref("null")}));
        const ExprPtr member = seq({ref("string"), literal(":"), ref("value")});
        builder_.add_rule(
            "object", seq({literal("{"), optional(seq({member, star(seq({literal(","), member}))})),
                           literal("}")}));
        builder_.add_rule(
            "array", seq({literal("["),
                          optional(seq({ref("value"), star(seq({literal(","), ref("value")}))})),
                          literal("]")}));
    }

    const OJson& resolve(const std::string& path) {
        const OJson* node = &root_;
        std::string rest = path.substr(1);
        while (!rest.empty()) {
            if (rest[0] != '/') error(path, "unsupported $ref (only local '#/...' references)");
            size_t end = rest.find('/', 1);
            std::string key =
                rest.substr(1, end == std::string::npos ? std::string::npos : end - 1);
            for (size_t p; (p = key.find("~1")) != std::string::npos;) key.replace(p, 2, "/");
            for (size_t p; (p = key.find("~0")) != std::string::npos;) key.replace(p, 2, "~");
            if (!node->is_object() || !node->contains(key)) error(path, "$ref to a missing schema");
            node = &(*node)[key];
            rest = end == std::string::npos ? "" : rest.substr(end);
        }
        return *node;
    }

    ExprPtr ref_rule(const std::string& target, const std::string& path) {
        if (target.empty() || target[0] != '#')
            error(path, "unsupported $ref '" + target + "' (only '#...')");
        if (target == "#") return ref("root");
        auto it = ref_names_.find(target);
        if (it != ref_names_.end()) return ref(it->second);
        resolve(target);
        const std::string name = fmt::format("ref{}", ref_names_.size());
        ref_names_[target] = name;
        pending_refs_.emplace_back(name, target);
        return ref(name);
    }

    std::string fresh(const std::string& base) { return fmt::format("{}{}", base, ++num_rules_); }

    ExprPtr convert(const OJson& s, const std::string& path) {
        if (s.is_boolean()) return s.get<bool>() ? ref("value") : alt({});
        if (!s.is_object()) error(path, "a schema must be an object or a boolean");
        for (const auto& item : s.items()) {
            if (!kKeywords.count(item.key()) && !kAnnotations.count(item.key()))
                error(path, "unsupported JSON Schema keyword '" + item.key() + "'");
        }
        if (s.contains("uniqueItems") && s["uniqueItems"] != false)
            error(path, "unsupported JSON Schema keyword 'uniqueItems'");
        ExprPtr e = convert_type(s, path);
        if (s.contains("nullable") && !s["nullable"].is_boolean())
            error(path, "nullable must be a boolean");
        if (s.contains("nullable") && s["nullable"].get<bool>()) e = alt({e, ref("null")});
        return e;
    }

    ExprPtr convert_type(const OJson& s, const std::string& path) {
        if (s.contains("$ref")) {
            if (!s["$ref"].is_string()) error(path, "$ref must be a string");
            return ref_rule(s["$ref"].get<std::string>(), path);
        }
        if (s.contains("const")) return literal(s["const"].dump());
        if (s.contains("enum")) {
            if (!s["enum"].is_array() || s["enum"].empty())
                error(path, "enum must be a non-empty array");
            std::vector<ExprPtr> branches;
            for (const OJson& v : s["enum"]) branches.push_back(literal(v.dump()));
            return alt(std::move(branches));
        }
        for (const char* key : {"anyOf", "oneOf"}) {
            if (!s.contains(key)) continue;
            if (!s[key].is_array() || s[key].empty())
                error(path, fmt::format("{} must be a non-empty array", key));
            std::vector<ExprPtr> branches;
            for (size_t i = 0; i < s[key].size(); ++i)
                branches.push_back(convert(s[key][i], fmt::format("{}/{}/{}", path, key, i)));
            return alt(std::move(branches));
        }
        if (s.contains("allOf")) {
            if (!s["allOf"].is_array() || s["allOf"].size() != 1)
                error(path, "unsupported JSON Schema keyword 'allOf' with more than one schema");
            return convert(s["allOf"][0], path + "/allOf/0");
        }
        std::vector<std::string> types;
        if (s.contains("type")) {
            if (s["type"].is_string()) {
                types.push_back(s["type"].get<std::string>());
            } else if (s["type"].is_array()) {
                for (const OJson& t : s["type"]) {
                    if (!t.is_string()) error(path, "type must be a string or an array of strings");
                    types.push_back(t.get<std::string>());
                }
            } else {
                error(path, "type must be a string or an array of strings");
            }
        } else if (s.contains("properties") || s.contains("additionalProperties")) {
            types.push_back("object");
        } else if (s.contains("items") || s.contains("prefixItems")) {
            types.push_back("array");
        } else {
            return ref("value");
        }
        std::vector<ExprPtr> branches;
        for (const std::string& t : types) branches.push_back(convert_one_type(s, t, path));
        return branches.size() == 1 ? branches[0] : alt(std::move(branches));
    }

    ExprPtr convert_one_type(const OJson& s, const std::string& type, const std::string& path) {
        if (type == "object") return convert_object(s, path);
        if (type == "array") return convert_array(s, path);
        if (type == "string") return convert_string(s, path);
        if (type == "integer") return convert_integer(s, path);
        if (type == "number") return convert_number(s, path);
        if (type == "boolean") return ref("boolean");
        if (type == "null") return ref("null");
        error(path, "unknown type '" + type + "'");
    }

    ExprPtr convert_object(const OJson& s, const std::string& path) {
        struct Prop {
            ExprPtr member;
            bool required;
        };
        std::vector<Prop> props;
        std::set<std::string> required;
        if (s.contains("required")) {
            if (!s["required"].is_array()) error(path, "required must be an array");
            for (const OJson& r : s["required"]) {
                if (!r.is_string()) error(path, "required must list strings");
                required.insert(r.get<std::string>());
            }
        }
        std::set<std::string> listed;
        if (s.contains("properties")) {
            if (!s["properties"].is_object()) error(path, "properties must be an object");
            for (const auto& item : s["properties"].items()) {
                const std::string key = item.key();
                listed.insert(key);
                ExprPtr value = convert(item.value(), path + "/properties/" + key);
                props.push_back(
                    {seq({literal(OJson(key).dump() + ":"), value}), required.count(key) != 0});
            }
        }
        for (const std::string& r : required)
            if (!listed.count(r)) error(path, "required property '" + r + "' is not in properties");
        ExprPtr extra;
        if (s.contains("additionalProperties")) {
            const OJson& ap = s["additionalProperties"];
            if (!(ap.is_boolean() && !ap.get<bool>()))
                extra =
                    seq({ref("string"), literal(":"), convert(ap, path + "/additionalProperties")});
        }
        // first_i: properties i.. with none written yet; rest_i: at least one written.
        const std::string base = fresh("object");
        const size_t n = props.size();
        auto rest_name = [&](size_t i) { return fmt::format("{}_rest{}", base, i); };
        auto first_name = [&](size_t i) { return fmt::format("{}_first{}", base, i); };
        builder_.add_rule(rest_name(n), extra ? star(seq({literal(","), extra})) : empty_expr());
        builder_.add_rule(
            first_name(n),
            extra ? optional(seq({extra, star(seq({literal(","), extra}))})) : empty_expr());
        for (size_t i = n; i-- > 0;) {
            const ExprPtr with_comma = seq({literal(","), props[i].member, ref(rest_name(i + 1))});
            builder_.add_rule(rest_name(i), props[i].required
                                                ? with_comma
                                                : alt({with_comma, ref(rest_name(i + 1))}));
            const ExprPtr first = seq({props[i].member, ref(rest_name(i + 1))});
            builder_.add_rule(first_name(i),
                              props[i].required ? first : alt({first, ref(first_name(i + 1))}));
        }
        return seq({literal("{"), ref(first_name(0)), literal("}")});
    }

    static int count_field(const OJson& s, const char* key, const std::string& path) {
        if (!s.contains(key)) return -1;
        if (!s[key].is_number_integer() || s[key].get<int64_t>() < 0 ||
            s[key].get<int64_t>() > 100000)
            error(path, fmt::format("{} must be an integer from 0 to 100000", key));
        return int(s[key].get<int64_t>());
    }

    ExprPtr convert_array(const OJson& s, const std::string& path) {
        const int min_items = std::max(count_field(s, "minItems", path), 0);
        const int max_items = count_field(s, "maxItems", path);
        std::vector<ExprPtr> prefix;
        if (s.contains("prefixItems")) {
            if (!s["prefixItems"].is_array()) error(path, "prefixItems must be an array");
            for (size_t i = 0; i < s["prefixItems"].size(); ++i)
                prefix.push_back(
                    convert(s["prefixItems"][i], fmt::format("{}/prefixItems/{}", path, i)));
        }
        ExprPtr item;
        if (!s.contains("items")) {
            if (prefix.empty()) item = ref("value");
        } else if (!(s["items"].is_boolean() && !s["items"].get<bool>())) {
            item = convert(s["items"], path + "/items");
        }
        std::vector<ExprPtr> parts{literal("[")};
        const int num_prefix = int(prefix.size());
        for (int i = 0; i < num_prefix; ++i) {
            if (i > 0) parts.push_back(literal(","));
            parts.push_back(prefix[i]);
        }
        if (item && (max_items < 0 || max_items > num_prefix)) {
            const int more_min = std::max(min_items - num_prefix, 0);
            const int more_max = max_items < 0 ? -1 : max_items - num_prefix;
            const ExprPtr next = seq({literal(","), item});
            if (num_prefix > 0) {
                parts.push_back(repeat(next, more_min, more_max));
            } else if (more_min > 0) {
                parts.push_back(item);
                parts.push_back(repeat(next, more_min - 1, more_max < 0 ? -1 : more_max - 1));
            } else {
                parts.push_back(
                    optional(seq({item, repeat(next, 0, more_max < 0 ? -1 : more_max - 1)})));
            }
        } else if (min_items > num_prefix) {
            error(path, "minItems exceeds the items the array may hold");
        }
        parts.push_back(literal("]"));
        return seq(std::move(parts));
    }

    ExprPtr convert_string(const OJson& s, const std::string& path) {
        const int min_len = count_field(s, "minLength", path);
        const int max_len = count_field(s, "maxLength", path);
        const bool has_len = min_len >= 0 || max_len >= 0;
        if (s.contains("pattern") && s.contains("format"))
            error(path, "pattern together with format is not supported");
        if ((s.contains("pattern") || s.contains("format")) && has_len)
            error(path, "minLength/maxLength together with pattern or format is not supported");
        if (s.contains("pattern")) {
            if (!s["pattern"].is_string()) error(path, "pattern must be a string");
            return seq({literal("\""), regex_to_expr(s["pattern"].get<std::string>(), true),
                        literal("\"")});
        }
        if (s.contains("format")) {
            const std::string format =
                s["format"].is_string() ? s["format"].get<std::string>() : "";
            auto it = kFormats.find(format);
            if (it == kFormats.end()) error(path, "unsupported string format '" + format + "'");
            return seq({literal("\""), regex_to_expr(it->second, true), literal("\"")});
        }
        if (!has_len) return ref("string");
        const ExprPtr one_char = regex_to_expr("[\\x00-\\u{10FFFF}]", true);  // escapes included
        return seq({literal("\""), repeat(one_char, std::max(min_len, 0), max_len), literal("\"")});
    }

    // A bound as an integer; fractional bounds are refused (numbers keep integer bounds).
    static std::optional<int64_t> bound(const OJson& s, const char* key, const std::string& path) {
        if (!s.contains(key)) return std::nullopt;
        const OJson& v = s[key];
        if (!v.is_number()) error(path, fmt::format("{} must be a number", key));
        const double d = v.get<double>();
        if (d != std::floor(d) || std::fabs(d) > 1e17)
            error(path, fmt::format("unsupported JSON Schema keyword '{}' with a non-integer value",
                                    key));
        return int64_t(d);
    }

    ExprPtr convert_integer(const OJson& s, const std::string& path) {
        std::optional<int64_t> lo = bound(s, "minimum", path), hi = bound(s, "maximum", path);
        if (auto x = bound(s, "exclusiveMinimum", path)) lo = std::max(lo.value_or(*x + 1), *x + 1);
        if (auto x = bound(s, "exclusiveMaximum", path)) hi = std::min(hi.value_or(*x - 1), *x - 1);
        if (!lo && !hi) return ref("integer");
        if (lo && hi && *lo > *hi) error(path, "minimum above maximum");
        return int_range(lo, hi);
    }

    ExprPtr convert_number(const OJson& s, const std::string& path) {
        for (const char* key : {"exclusiveMinimum", "exclusiveMaximum"})
            if (s.contains(key))
                error(path, fmt::format("unsupported JSON Schema keyword '{}' on a number", key));
        const std::optional<int64_t> lo = bound(s, "minimum", path), hi = bound(s, "maximum", path);
        if (!lo && !hi) return ref("number");
        if (lo && hi && *lo > *hi) error(path, "minimum above maximum");
        std::vector<ExprPtr> branches;
        if (!hi || *hi >= 0) {
            const uint64_t a = lo && *lo > 0 ? uint64_t(*lo) : 0;
            branches.push_back(unsigned_number(a, hi ? uint64_t(*hi) : kNoLimit));
        }
        if (!lo || *lo < 0) {
            const uint64_t a = hi && *hi < 0 ? uint64_t(-*hi) : 0;
            branches.push_back(
                seq({literal("-"), unsigned_number(a, lo ? uint64_t(-*lo) : kNoLimit)}));
        }
        return branches.size() == 1 ? branches[0] : alt(std::move(branches));
    }

    OJson root_;
    GrammarBuilder builder_;
    std::map<std::string, std::string> ref_names_;
    std::vector<std::pair<std::string, std::string>> pending_refs_;
    int num_rules_ = 0;
};

}  // namespace

Grammar json_schema_grammar(std::string_view schema_json, std::string_view prefix,
                            std::string_view suffix) {
    return SchemaConverter(parse_untrusted_json<OJson>(schema_json, "JSON schema"))
        .build(prefix, suffix);
}

Grammar any_json_grammar() {
    return SchemaConverter(OJson::object()).build();
}

}  // namespace miniinfer::structured
