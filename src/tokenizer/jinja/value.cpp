#include "tokenizer/jinja/value.h"

#include <charconv>
#include <cmath>

#include "core/check.h"
#include "core/json.h"
#include "tokenizer/utf8.h"

namespace miniinfer::jinja {

const Value* Dict::find(std::string_view key) const {
    for (const auto& [k, v] : items)
        if (k == key) return &v;
    return nullptr;
}

void Dict::set(const std::string& key, Value v) {
    for (auto& [k, old] : items)
        if (k == key) return void(old = std::move(v));
    items.emplace_back(key, std::move(v));
}

std::optional<Value> Args::get(size_t i, std::string_view name) const {
    for (const auto& [k, v] : named)
        if (k == name) return v;
    if (i < positional.size()) return positional[i];
    return std::nullopt;
}

Value Value::from_json(const nlohmann::ordered_json& j, int depth) {
    // Recursive: bounded, so a caller that skipped parse_untrusted_json still gets an Error,
    // not a stack overflow.
    if (depth > kMaxJsonDepth)
        fail("chat template: the value nests deeper than {} levels", kMaxJsonDepth);
    switch (j.type()) {
        case nlohmann::ordered_json::value_t::null:
            return nullptr;
        case nlohmann::ordered_json::value_t::boolean:
            return j.get<bool>();
        case nlohmann::ordered_json::value_t::number_integer:
            return j.get<int64_t>();
        case nlohmann::ordered_json::value_t::number_unsigned:
            return int64_t(j.get<uint64_t>());
        case nlohmann::ordered_json::value_t::number_float:
            return j.get<double>();
        case nlohmann::ordered_json::value_t::string:
            return j.get<std::string>();
        case nlohmann::ordered_json::value_t::array: {
            List l;
            for (const auto& e : j) l.push_back(from_json(e, depth + 1));
            return l;
        }
        case nlohmann::ordered_json::value_t::object: {
            Dict d;
            for (const auto& [k, v] : j.items()) d.items.emplace_back(k, from_json(v, depth + 1));
            return d;
        }
        default:
            fail("chat template: unsupported JSON value of type {}", j.type_name());
    }
}

void Value::wrong_kind(const char* expected) const {
    fail("expected {}, got {}", expected, type_name());
}

int64_t Value::as_int() const {
    return is_bool() ? int64_t(as_bool()) : get<int64_t>("int");
}

double Value::as_double() const {
    return is_float() ? std::get<double>(v_) : double(as_int());
}

std::string Value::type_name() const {
    static const char* names[] = {"Undefined", "NoneType", "bool", "int",     "float",
                                  "str",       "list",     "dict", "function"};
    if (is_dict() && as_dict().is_namespace) return "Namespace";
    if (markup_) return "Markup";
    return names[v_.index()];
}

bool Value::truthy() const {
    if (iterator_) return true;
    switch (v_.index()) {
        case 0:
        case 1:
            return false;
        case 2:
            return as_bool();
        case 3:
            return as_int() != 0;
        case 4:
            return as_double() != 0.0;
        case 5:
            return !as_string().empty();
        case 6:
            return !as_list().empty();
        case 7:
            return !as_dict().items.empty();
        default:
            return true;
    }
}

std::string format_float(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
    char buf[64];
    // Shortest digits that round-trip, then Python's layout: positional for 1e-4 <= |d| < 1e16.
    auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
    MI_CHECK(ec == std::errc(), "to_chars failed");
    std::string sci(buf, end);
    const size_t e = sci.find('e');
    std::string mantissa = sci.substr(0, e);
    const int exp = std::stoi(sci.substr(e + 1));
    const bool negative = mantissa[0] == '-';
    if (negative) mantissa.erase(0, 1);
    std::string digits;
    for (char c : mantissa)
        if (c != '.') digits += c;
    std::string out;
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            out = "0." + std::string(size_t(-exp - 1), '0') + digits;
        } else if (size_t(exp) + 1 >= digits.size()) {
            out = digits + std::string(size_t(exp) + 1 - digits.size(), '0') + ".0";
        } else {
            out = digits.substr(0, size_t(exp) + 1) + "." + digits.substr(size_t(exp) + 1);
        }
    } else {
        out = digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : "");
        out += fmt::format("e{}{:02d}", exp < 0 ? '-' : '+', std::abs(exp));
    }
    return negative ? "-" + out : out;
}

static std::string py_repr_string(const std::string& s) {
    const char quote =
        (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
    std::string out(1, quote);
    for (size_t pos = 0; pos < s.size();) {
        const size_t start = pos;
        const char32_t c = utf8::next(s, pos);
        if (c == char32_t(quote) || c == '\\')
            out += '\\', out += char(c);
        else if (c == '\n')
            out += "\\n";
        else if (c == '\r')
            out += "\\r";
        else if (c == '\t')
            out += "\\t";
        else if (c < 0x20 || c == 0x7F)
            out += fmt::format("\\x{:02x}", uint32_t(c));
        else if (c >= 0x80 && c < 0xA0)
            out += fmt::format("\\x{:02x}", uint32_t(c));
        else
            out.append(s, start, pos - start);
    }
    return out + quote;
}

std::string Value::repr() const {
    if (is_string()) return py_repr_string(as_string());
    return str();
}

std::string Value::str() const {
    switch (v_.index()) {
        case 0:
            return "";
        case 1:
            return "None";
        case 2:
            return as_bool() ? "True" : "False";
        case 3:
            return std::to_string(as_int());
        case 4:
            return format_float(as_double());
        case 5:
            return as_string();
        case 6: {
            std::string out = tuple_ ? "(" : "[";
            for (size_t i = 0; i < as_list().size(); ++i)
                out += (i ? ", " : "") + as_list()[i].repr();
            if (tuple_) return out + (as_list().size() == 1 ? ",)" : ")");
            return out + "]";
        }
        case 7: {
            if (as_dict().is_namespace) return "<Namespace>";
            std::string out = "{";
            bool first = true;
            for (const auto& [k, v] : as_dict().items) {
                out += (first ? "" : ", ") + py_repr_string(k) + ": " + v.repr();
                first = false;
            }
            return out + "}";
        }
        default:
            return "<function " + as_callable().name + ">";
    }
}

static void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
    out += '"';
    for (size_t pos = 0; pos < s.size();) {
        const size_t start = pos;
        const char32_t c = utf8::next(s, pos);
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            case '\b':
                out += "\\b";
                break;
            case '\f':
                out += "\\f";
                break;
            default:
                if (c < 0x20 || (ensure_ascii && c >= 0x80 && c < 0x10000)) {
                    out += fmt::format("\\u{:04x}", uint32_t(c));
                } else if (ensure_ascii && c >= 0x10000) {  // a UTF-16 surrogate pair
                    const uint32_t v = uint32_t(c) - 0x10000;
                    out +=
                        fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
                } else {
                    out.append(s, start, pos - start);
                }
        }
    }
    out += '"';
}

static void to_json_impl(const Value& v, const Value::JsonOptions& o, int depth, std::string& out) {
    const std::string item_sep = !o.item_sep.empty() ? o.item_sep : o.indent >= 0 ? "," : ", ";
    const std::string key_sep = !o.key_sep.empty() ? o.key_sep : ": ";
    auto newline = [&](int d) {
        if (o.indent >= 0) out += "\n" + std::string(size_t(o.indent * d), ' ');
    };
    if (v.is_none()) {
        out += "null";
    } else if (v.is_bool()) {
        out += v.as_bool() ? "true" : "false";
    } else if (v.is_int()) {
        out += std::to_string(v.as_int());
    } else if (v.is_float()) {
        const double d = v.as_double();
        out += std::isnan(d)   ? "NaN"
               : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity")
                               : format_float(d);
    } else if (v.is_string()) {
        json_string(out, v.as_string(), o.ensure_ascii);
    } else if (v.is_list()) {
        if (v.as_list().empty()) return void(out += "[]");
        out += '[';
        for (size_t i = 0; i < v.as_list().size(); ++i) {
            if (i) out += item_sep;
            newline(depth + 1);
            to_json_impl(v.as_list()[i], o, depth + 1, out);
        }
        newline(depth);
        out += ']';
    } else if (v.is_dict() && !v.as_dict().is_namespace) {
        if (v.as_dict().items.empty()) return void(out += "{}");
        std::vector<const std::pair<std::string, Value>*> items;
        for (const auto& kv : v.as_dict().items) items.push_back(&kv);
        if (o.sort_keys)
            std::stable_sort(items.begin(), items.end(),
                             [](auto* a, auto* b) { return a->first < b->first; });
        out += '{';
        for (size_t i = 0; i < items.size(); ++i) {
            if (i) out += item_sep;
            newline(depth + 1);
            json_string(out, items[i]->first, o.ensure_ascii);
            out += key_sep;
            to_json_impl(items[i]->second, o, depth + 1, out);
        }
        newline(depth);
        out += '}';
    } else {
        fail("Object of type {} is not JSON serializable", v.type_name());
    }
}

std::string Value::to_json(const JsonOptions& options) const {
    std::string out;
    to_json_impl(*this, options, 0, out);
    return out;
}

bool operator==(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
        return a.as_int() == b.as_int();
    }
    if (a.v_.index() != b.v_.index()) return false;
    if (a.is_undefined() || a.is_none()) return true;
    if (a.is_string()) return a.as_string() == b.as_string();
    if (a.is_list()) return a.as_list() == b.as_list();
    if (a.is_dict()) {
        const Dict &x = a.as_dict(), &y = b.as_dict();
        if (x.items.size() != y.items.size()) return false;
        for (const auto& [k, v] : x.items) {
            const Value* other = y.find(k);
            if (!other || !(*other == v)) return false;
        }
        return true;
    }
    return &a.as_callable() == &b.as_callable();
}

bool less_than(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) return a.as_double() < b.as_double();
    if (a.is_string() && b.is_string())
        return a.as_string() < b.as_string();  // UTF-8 order = code point order
    if (a.is_list() && b.is_list()) {
        const List &x = a.as_list(), &y = b.as_list();
        for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
            if (less_than(x[i], y[i])) return true;
            if (less_than(y[i], x[i])) return false;
        }
        return x.size() < y.size();
    }
    fail("'<' not supported between instances of '{}' and '{}'", a.type_name(), b.type_name());
}

}  // namespace miniinfer::jinja
