#include "tokenizer/jinja/builtins.h"

#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/check.h"
#include "tokenizer/utf8.h"

namespace miniinfer::jinja {
namespace {

// Python's str.isspace() characters.
bool py_space(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

std::vector<char32_t> code_points(const std::string& s) {
    std::vector<char32_t> out;
    for (size_t pos = 0; pos < s.size();) out.push_back(utf8::next(s, pos));
    return out;
}
std::string from_code_points(const std::vector<char32_t>& cps, size_t begin, size_t end) {
    std::string out;
    for (size_t i = begin; i < end; ++i) utf8::append(out, cps[i]);
    return out;
}

std::string strip(const std::string& s, const std::optional<Value>& chars, bool left, bool right) {
    const auto cps = code_points(s);
    std::vector<char32_t> set;
    const bool custom = chars && !chars->is_none();
    if (custom) set = code_points(chars->str());
    auto strippable = [&](char32_t c) { return custom ? std::find(set.begin(), set.end(), c) != set.end() : py_space(c); };
    size_t b = 0, e = cps.size();
    while (left && b < e && strippable(cps[b])) ++b;
    while (right && e > b && strippable(cps[e - 1])) --e;
    return from_code_points(cps, b, e);
}

std::string map_case(const std::string& s, int mode) {  // 0 lower, 1 upper, 2 title, 3 capitalize
    std::string out;
    bool prev_cased = false;
    size_t i = 0;
    for (size_t pos = 0; pos < s.size(); ++i) {
        const auto c = utf8proc_int32_t(utf8::next(s, pos));
        bool upper = mode == 1 || (mode == 2 && !prev_cased) || (mode == 3 && i == 0);
        utf8::append(out, char32_t(upper ? utf8proc_toupper(c) : utf8proc_tolower(c)));
        const auto cat = utf8proc_category(c);
        prev_cased = cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
    }
    return out;
}

List split(const std::string& s, const std::optional<Value>& sep_arg, int64_t maxsplit) {
    List out;
    if (!sep_arg || sep_arg->is_none()) {  // runs of whitespace, no empty strings
        const auto cps = code_points(s);
        size_t i = 0;
        while (i < cps.size()) {
            while (i < cps.size() && py_space(cps[i])) ++i;
            if (i == cps.size()) break;
            size_t j = i;
            if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) j = cps.size();
            else while (j < cps.size() && !py_space(cps[j])) ++j;
            std::string piece = from_code_points(cps, i, j);
            if (j == cps.size() && maxsplit >= 0 && int64_t(out.size()) == maxsplit) piece = strip(piece, std::nullopt, false, true);
            out.push_back(piece);
            i = j;
        }
        return out;
    }
    const std::string sep = sep_arg->str();
    if (sep.empty()) fail("empty separator");
    size_t start = 0;
    for (size_t pos; (maxsplit < 0 || int64_t(out.size()) < maxsplit) && (pos = s.find(sep, start)) != std::string::npos;
         start = pos + sep.size())
        out.push_back(s.substr(start, pos - start));
    out.push_back(s.substr(start));
    return out;
}

std::string replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count) {
    if (old.empty()) fail("replace() with an empty pattern is not supported");
    std::string out;
    size_t start = 0, pos;
    for (int64_t n = 0; (count < 0 || n < count) && (pos = s.find(old, start)) != std::string::npos; ++n) {
        out.append(s, start, pos - start).append(repl);
        start = pos + old.size();
    }
    return out.append(s, start);
}

bool starts_or_ends(const std::string& s, const Value& arg, bool starts) {
    auto test = [&](const std::string& p) {
        return p.size() <= s.size() && (starts ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0);
    };
    if (arg.is_list()) return std::any_of(arg.as_list().begin(), arg.as_list().end(), [&](const Value& v) { return test(v.str()); });
    return test(arg.str());
}

Value need(const Args& args, size_t i, const char* name, const char* fn) {
    auto v = args.get(i, name);
    if (!v) fail("{}() missing argument '{}'", fn, name);
    return *v;
}

}  // namespace

List to_list(const Value& v) {
    if (v.is_list()) return v.as_list();
    if (v.is_dict()) {
        List keys;
        for (const auto& [k, _] : v.as_dict().items) keys.push_back(k);
        return keys;
    }
    if (v.is_string()) {
        List chars;
        for (char32_t c : code_points(v.as_string())) {
            std::string s;
            utf8::append(s, c);
            chars.push_back(s);
        }
        return chars;
    }
    if (v.is_undefined()) return {};
    fail("'{}' object is not iterable", v.type_name());
}

namespace {

// Jinja's attribute lookup for filters like map(attribute='a.b') and sort(attribute='x').
Value attribute_of(const Value& v, const std::string& path) {
    Value cur = v;
    size_t start = 0;
    while (start <= path.size()) {
        const size_t dot = std::min(path.find('.', start), path.size());
        const std::string part = path.substr(start, dot - start);
        if (cur.is_dict()) {
            const Value* f = cur.as_dict().find(part);
            cur = f ? *f : Value(Undefined{part});
        } else if (cur.is_list() && !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit)) {
            const size_t idx = std::stoul(part);
            cur = idx < cur.as_list().size() ? cur.as_list()[idx] : Value(Undefined{part});
        } else {
            cur = Undefined{part};
        }
        start = dot + 1;
    }
    return cur;
}

Args rest_args(const Args& args, size_t from) {
    Args out;
    for (size_t i = from; i < args.positional.size(); ++i) out.positional.push_back(args.positional[i]);
    out.named = args.named;
    return out;
}

Value bound(std::string name, std::function<Value(const Args&)> fn) { return Callable{std::move(name), std::move(fn)}; }

}  // namespace

Value apply_filter(const std::string& name, const Value& v, const Args& args) {
    if (name == "length" || name == "count") {
        if (v.is_string()) return int64_t(code_points(v.as_string()).size());
        if (v.is_list()) return int64_t(v.as_list().size());
        if (v.is_dict()) return int64_t(v.as_dict().items.size());
        if (v.is_undefined()) return int64_t(0);
        fail("object of type '{}' has no len()", v.type_name());
    }
    if (name == "tojson") {
        auto indent = args.get(0, "indent");
        auto sort_keys = args.get(99, "sort_keys");
        return v.to_json(indent && !indent->is_none() ? int(indent->as_int()) : -1, sort_keys && sort_keys->truthy());
    }
    if (name == "trim") return strip(v.str(), args.get(0, "chars"), true, true);
    if (name == "upper") return map_case(v.str(), 1);
    if (name == "lower") return map_case(v.str(), 0);
    if (name == "title") return map_case(v.str(), 2);
    if (name == "capitalize") return map_case(v.str(), 3);
    if (name == "string") return v.str();
    if (name == "safe") return v;
    if (name == "default" || name == "d") {
        const auto boolean = args.get(1, "boolean");
        const bool use_default = v.is_undefined() || (boolean && boolean->truthy() && !v.truthy());
        return use_default ? args.get(0, "default_value").value_or(Value(std::string())) : v;
    }
    if (name == "first" || name == "last") {
        List items = to_list(v);
        if (items.empty()) return Undefined{name};
        return name == "first" ? items.front() : items.back();
    }
    if (name == "join") {
        const std::string sep = args.get(0, "d").value_or(Value(std::string())).str();
        const auto attr = args.get(1, "attribute");
        std::string out;
        bool first = true;
        for (const Value& item : to_list(v)) {
            out += (first ? "" : sep) + (attr ? attribute_of(item, attr->str()) : item).str();
            first = false;
        }
        return out;
    }
    if (name == "list") return to_list(v);
    if (name == "items") {
        if (v.is_undefined()) return List{};
        if (!v.is_dict()) fail("items filter expects a mapping, got {}", v.type_name());
        List out;
        for (const auto& [k, val] : v.as_dict().items) out.push_back(Value::tuple(List{k, val}));
        return out;
    }
    if (name == "dictsort") {
        Value items = apply_filter("items", v, {});
        std::stable_sort(items.as_list().begin(), items.as_list().end(),
                         [](const Value& a, const Value& b) { return less_than(a.as_list()[0], b.as_list()[0]); });
        return items;
    }
    if (name == "reverse") {
        if (v.is_string()) {
            auto cps = code_points(v.as_string());
            std::reverse(cps.begin(), cps.end());
            return from_code_points(cps, 0, cps.size());
        }
        List items = to_list(v);
        std::reverse(items.begin(), items.end());
        return items;
    }
    if (name == "replace") {
        const auto count = args.get(2, "count");
        return replace(v.str(), need(args, 0, "old", "replace").str(), need(args, 1, "new", "replace").str(),
                       count && !count->is_none() ? count->as_int() : -1);
    }
    if (name == "int") {
        if (v.is_number()) return int64_t(v.as_double());
        try {
            return int64_t(std::stoll(v.str()));
        } catch (const std::exception&) {
            return args.get(0, "default").value_or(Value(int64_t(0)));
        }
    }
    if (name == "float") {
        if (v.is_number()) return v.as_double();
        try {
            return std::stod(v.str());
        } catch (const std::exception&) {
            return args.get(0, "default").value_or(Value(0.0));
        }
    }
    if (name == "abs") {
        if (v.is_int() || v.is_bool()) return int64_t(std::llabs(v.as_int()));
        if (v.is_float()) return std::fabs(v.as_double());
        fail("bad operand type for abs(): '{}'", v.type_name());
    }
    if (name == "round") {
        const int64_t precision = args.get(0, "precision").value_or(Value(int64_t(0))).as_int();
        const std::string method = args.get(1, "method").value_or(Value("common")).str();
        if (method == "common") {  // Python's round(): correctly rounded, ties to even
            char buf[512];
            std::snprintf(buf, sizeof(buf), "%.*f", int(std::clamp<int64_t>(precision, 0, 300)), v.as_double());
            return std::strtod(buf, nullptr);
        }
        const double scale = std::pow(10.0, double(precision));
        const double x = v.as_double() * scale;
        return (method == "floor" ? std::floor(x) : std::ceil(x)) / scale;
    }
    if (name == "sum") {
        const auto attr = args.get(0, "attribute");
        Value total = args.get(1, "start").value_or(Value(int64_t(0)));
        for (const Value& item : to_list(v)) {
            const Value x = attr ? attribute_of(item, attr->str()) : item;
            total = (total.is_float() || x.is_float()) ? Value(total.as_double() + x.as_double())
                                                       : Value(total.as_int() + x.as_int());
        }
        return total;
    }
    if (name == "unique") {
        List out;
        for (const Value& item : to_list(v))
            if (std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
        return out;
    }
    if (name == "sort" || name == "max" || name == "min") {
        const auto attr = args.get(name == "sort" ? 2 : 1, "attribute");
        auto key = [&](const Value& x) {
            Value k = attr ? attribute_of(x, attr->str()) : x;
            return k.is_string() ? Value(map_case(k.as_string(), 0)) : k;  // case-insensitive by default
        };
        List items = to_list(v);
        if (name != "sort") {
            if (items.empty()) return Undefined{name};
            auto cmp = [&](const Value& a, const Value& b) { return less_than(key(a), key(b)); };
            return name == "max" ? *std::max_element(items.begin(), items.end(), cmp)
                                 : *std::min_element(items.begin(), items.end(), cmp);
        }
        const bool reverse = args.get(0, "reverse").value_or(Value(false)).truthy();
        std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
            return reverse ? less_than(key(b), key(a)) : less_than(key(a), key(b));
        });
        return items;
    }
    if (name == "map") {
        List out;
        const auto attr = args.get(99, "attribute");
        for (const Value& item : to_list(v)) {
            if (attr) {
                Value x = attribute_of(item, attr->str());
                if (x.is_undefined()) x = args.get(99, "default").value_or(x);
                out.push_back(x);
            } else {
                out.push_back(apply_filter(need(args, 0, "filter", "map").str(), item, rest_args(args, 1)));
            }
        }
        return out;
    }
    if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
        const bool by_attr = name.ends_with("attr");
        const bool keep_if = name.starts_with("select");
        const size_t test_idx = by_attr ? 1 : 0;
        List out;
        for (const Value& item : to_list(v)) {
            const Value x = by_attr ? attribute_of(item, need(args, 0, "attribute", name.c_str()).str()) : item;
            const auto test = args.get(test_idx, "test");
            const bool passed = test ? apply_test(test->str(), x, rest_args(args, test_idx + 1)) : x.truthy();
            if (passed == keep_if) out.push_back(item);
        }
        return out;
    }
    if (name == "indent") {
        const Value width = args.get(0, "width").value_or(Value(int64_t(4)));
        const std::string pad = width.is_string() ? width.as_string() : std::string(size_t(width.as_int()), ' ');
        const bool first = args.get(1, "first").value_or(Value(false)).truthy();
        const bool blank = args.get(2, "blank").value_or(Value(false)).truthy();
        const List lines = split(v.str(), Value("\n"), -1);
        std::string out;
        for (size_t i = 0; i < lines.size(); ++i) {
            const std::string& line = lines[i].as_string();
            if (i) out += "\n";
            if ((i > 0 || first) && (blank || !line.empty())) out += pad;
            out += line;
        }
        return out;
    }
    fail("unknown filter '{}'", name);
}

bool apply_test(const std::string& name, const Value& v, const Args& args) {
    auto arg = [&]() { return need(args, 0, "other", name.c_str()); };
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.is_none();
    if (name == "true") return v.is_bool() && v.as_bool();
    if (name == "false") return v.is_bool() && !v.as_bool();
    if (name == "boolean") return v.is_bool();
    if (name == "integer") return v.is_int();
    if (name == "float") return v.is_float();
    if (name == "number") return v.is_number();
    if (name == "string") return v.is_string();
    if (name == "mapping") return v.is_dict() && !v.as_dict().is_namespace;
    if (name == "iterable" || name == "sequence") return v.is_string() || v.is_list() || v.is_dict();
    if (name == "callable") return v.is_callable();
    if (name == "odd" || name == "even") return (v.as_int() % 2 != 0) == (name == "odd");
    if (name == "divisibleby") return arg().as_int() != 0 && v.as_int() % arg().as_int() == 0;
    if (name == "sameas") return v.is_bool() == arg().is_bool() && v.is_none() == arg().is_none() && v == arg();
    if (name == "eq" || name == "equalto" || name == "==") return v == arg();
    if (name == "ne" || name == "!=") return !(v == arg());
    if (name == "lt" || name == "lessthan" || name == "<") return less_than(v, arg());
    if (name == "gt" || name == "greaterthan" || name == ">") return less_than(arg(), v);
    if (name == "le" || name == "<=") return !less_than(arg(), v);
    if (name == "ge" || name == ">=") return !less_than(v, arg());
    if (name == "in") {
        const Value c = arg();
        if (c.is_string()) return c.as_string().find(v.str()) != std::string::npos;
        const List items = to_list(c);
        return std::find(items.begin(), items.end(), v) != items.end();
    }
    if (name == "lower") return v.is_string() && map_case(v.as_string(), 0) == v.as_string();
    if (name == "upper") return v.is_string() && map_case(v.as_string(), 1) == v.as_string();
    fail("unknown test '{}'", name);
}

std::optional<Value> get_method(const Value& obj, const std::string& name) {
    if (obj.is_string()) {
        const std::string s = obj.as_string();
        if (name == "startswith" || name == "endswith")
            return bound(name, [s, name](const Args& a) { return Value(starts_or_ends(s, need(a, 0, "prefix", name.c_str()), name == "startswith")); });
        if (name == "strip" || name == "lstrip" || name == "rstrip")
            return bound(name, [s, name](const Args& a) { return Value(strip(s, a.get(0, "chars"), name != "rstrip", name != "lstrip")); });
        if (name == "split")
            return bound(name, [s](const Args& a) { return Value(split(s, a.get(0, "sep"), a.get(1, "maxsplit").value_or(Value(int64_t(-1))).as_int())); });
        if (name == "upper" || name == "lower" || name == "title" || name == "capitalize")
            return bound(name, [s, name](const Args&) { return apply_filter(name, s, {}); });
        if (name == "replace")
            return bound(name, [s](const Args& a) {
                return Value(replace(s, need(a, 0, "old", "replace").str(), need(a, 1, "new", "replace").str(),
                                     a.get(2, "count").value_or(Value(int64_t(-1))).as_int()));
            });
        if (name == "find" || name == "count")
            return bound(name, [s, name](const Args& a) {
                const std::string sub = need(a, 0, "sub", name.c_str()).str();
                if (name == "count") {
                    int64_t n = 0;
                    for (size_t p = s.find(sub); p != std::string::npos && !sub.empty(); p = s.find(sub, p + sub.size())) ++n;
                    return Value(n);
                }
                const size_t p = s.find(sub);
                return Value(p == std::string::npos ? int64_t(-1) : int64_t(code_points(s.substr(0, p)).size()));
            });
        if (name == "join")
            return bound(name, [s](const Args& a) { return apply_filter("join", need(a, 0, "iterable", "join"), Args{{s}, {}}); });
        if (name == "splitlines")
            return bound(name, [s](const Args&) {
                List lines = split(replace(replace(s, "\r\n", "\n", -1), "\r", "\n", -1), Value("\n"), -1);
                if (!lines.empty() && lines.back().as_string().empty()) lines.pop_back();
                return Value(lines);
            });
        if (name == "isdigit" || name == "isspace" || name == "isalpha" || name == "isalnum")
            return bound(name, [s, name](const Args&) {
                const auto cps = code_points(s);
                return Value(!cps.empty() && std::all_of(cps.begin(), cps.end(), [&](char32_t c) {
                    const auto cat = utf8proc_category(utf8proc_int32_t(c));
                    const bool alpha = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
                    const bool digit = cat == UTF8PROC_CATEGORY_ND;
                    if (name == "isdigit") return digit;
                    if (name == "isspace") return py_space(c);
                    if (name == "isalpha") return alpha;
                    return alpha || digit;
                }));
            });
        return std::nullopt;
    }
    if (obj.is_dict() && !obj.as_dict().is_namespace) {
        if (name == "items") return bound(name, [obj](const Args&) { return apply_filter("items", obj, {}); });
        if (name == "keys") return bound(name, [obj](const Args&) { return Value(to_list(obj)); });
        if (name == "values")
            return bound(name, [obj](const Args&) {
                List out;
                for (const auto& [_, v] : obj.as_dict().items) out.push_back(v);
                return Value(out);
            });
        if (name == "get")
            return bound(name, [obj](const Args& a) {
                const Value* v = obj.as_dict().find(need(a, 0, "key", "get").str());
                return v ? *v : a.get(1, "default").value_or(Value(nullptr));
            });
        return std::nullopt;
    }
    if (obj.is_list()) {
        if (name == "index" || name == "count")
            return bound(name, [obj, name](const Args& a) {
                const Value x = need(a, 0, "value", name.c_str());
                const List& l = obj.as_list();
                if (name == "count") return Value(int64_t(std::count(l.begin(), l.end(), x)));
                auto it = std::find(l.begin(), l.end(), x);
                if (it == l.end()) fail("{} is not in list", x.repr());
                return Value(int64_t(it - l.begin()));
            });
        if (name == "append" || name == "extend" || name == "pop" || name == "insert" || name == "remove" ||
            name == "clear" || name == "sort" || name == "reverse")
            fail("access to attribute '{}' of 'list' object is unsafe (templates cannot modify lists)", name);
    }
    return std::nullopt;
}

}  // namespace miniinfer::jinja
