#include "tokenizer/jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/check.h"
#include "tokenizer/jinja/py_str.h"
#include "tokenizer/utf8.h"

namespace miniinfer::jinja {

Value required_arg(const Args& args, size_t i, const char* name, const char* fn) {
    auto v = args.get(i, name);
    if (!v) fail("{}() missing argument '{}'", fn, name);
    return *v;
}

List to_list(const Value& v) {
    if (v.is_list()) return v.as_list();
    if (v.is_dict()) {
        List keys;
        for (const auto& [k, _] : v.as_dict().items) keys.push_back(k);
        return keys;
    }
    if (v.is_string()) {
        List chars;
        for (char32_t c : py::code_points(v.as_string())) {
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
        } else if (cur.is_list() && !part.empty() && part.size() < 10 &&
                   std::all_of(part.begin(), part.end(), ::isdigit)) {
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
    for (size_t i = from; i < args.positional.size(); ++i)
        out.positional.push_back(args.positional[i]);
    out.named = args.named;
    return out;
}

}  // namespace

namespace {

// Jinja's title filter: capitalizes each chunk between runs of whitespace, '-', '(', '{',
// '[' and '<' (unlike Python's str.title, digits do not start a word).
std::string jinja_title(const std::string& s) {
    std::string out;
    bool at_start = true;
    for (size_t pos = 0; pos < s.size();) {
        const char32_t c = utf8::next(s, pos);
        const bool separator =
            py::is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
        std::string ch;
        utf8::append(ch, c);
        out += separator ? ch : py::map_case(ch, at_start ? py::Case::kUpper : py::Case::kLower);
        at_start = separator;
    }
    return out;
}

Value filter(const std::string& name, const Value& v, const Args& args);

}  // namespace

Value apply_filter(const std::string& name, const Value& v, const Args& args) {
    Value out = filter(name, v, args);
    static const char* iterators[] = {"select", "reject", "selectattr", "rejectattr",
                                      "map",    "unique", "items"};
    for (const char* it : iterators)
        if (name == it) return Value::iterator(std::move(out.as_list()));
    if (name == "reverse" && out.is_list()) return Value::iterator(std::move(out.as_list()));
    return out;
}

namespace {

Value filter(const std::string& name, const Value& v, const Args& args) {
    if (name == "length" || name == "count") {
        if (v.is_string()) return int64_t(py::code_points(v.as_string()).size());
        if (v.is_list()) return int64_t(v.as_list().size());
        if (v.is_dict()) return int64_t(v.as_dict().items.size());
        if (v.is_undefined()) return int64_t(0);
        fail("object of type '{}' has no len()", v.type_name());
    }
    if (name == "tojson") {  // transformers' tojson(x, ensure_ascii, indent, separators, sort_keys)
        Value::JsonOptions o;
        o.ensure_ascii = args.get(0, "ensure_ascii").value_or(Value(false)).truthy();
        if (auto indent = args.get(1, "indent"); indent && !indent->is_none()) {
            // Python: an int indents by that many spaces, a string by itself (unsupported).
            o.indent = int(indent->as_int());
        }
        if (auto seps = args.get(2, "separators"); seps && !seps->is_none()) {
            if (!seps->is_list() || seps->as_list().size() != 2)
                fail("tojson: separators must be a pair");
            o.item_sep = seps->as_list()[0].as_string(), o.key_sep = seps->as_list()[1].as_string();
        }
        o.sort_keys = args.get(3, "sort_keys").value_or(Value(false)).truthy();
        return v.to_json(o);
    }
    // Jinja2's soft_str keeps a Markup a Markup through these.
    auto keep_markup = [&](std::string s) { return v.is_markup() ? Value::markup(s) : Value(s); };
    if (name == "trim") return keep_markup(py::strip(v.str(), args.get(0, "chars"), true, true));
    if (name == "upper") return keep_markup(py::map_case(v.str(), py::Case::kUpper));
    if (name == "lower") return keep_markup(py::map_case(v.str(), py::Case::kLower));
    if (name == "title") return jinja_title(v.str());
    if (name == "capitalize") return keep_markup(py::map_case(v.str(), py::Case::kCapitalize));
    if (name == "string") return keep_markup(v.str());
    if (name == "safe") return Value::markup(v.str());  // Markup(value): str() of anything
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
        Value items = filter("items", v, {});
        std::stable_sort(items.as_list().begin(), items.as_list().end(),
                         [](const Value& a, const Value& b) {
                             return less_than(a.as_list()[0], b.as_list()[0]);
                         });
        return items;
    }
    if (name == "reverse") {
        if (v.is_string()) {
            auto cps = py::code_points(v.as_string());
            std::reverse(cps.begin(), cps.end());
            return py::from_code_points(cps, 0, cps.size());
        }
        List items = to_list(v);
        std::reverse(items.begin(), items.end());
        return items;
    }
    if (name == "replace") {
        const auto count = args.get(2, "count");
        return py::replace(v.str(), required_arg(args, 0, "old", "replace").str(),
                           required_arg(args, 1, "new", "replace").str(),
                           count && !count->is_none() ? count->as_int() : -1);
    }
    if ((name == "int" || name == "float") && v.is_undefined())
        fail("'{}' is undefined", v.undefined_name());
    if (name == "int") {
        if (v.is_int() || v.is_bool()) return v.as_int();
        if (v.is_float()) {
            if (!(std::fabs(v.as_double()) < 9.2e18)) fail("int: {} is out of range", v.str());
            return int64_t(v.as_double());
        }
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
        if (method != "common" && method != "floor" && method != "ceil")
            fail("round: method must be 'common', 'ceil' or 'floor'");
        if (method == "common" && (v.is_int() || v.is_bool())) return v.as_int();  // round(int)
        if (method == "common") {  // Python's round(): correctly rounded, ties to even
            char buf[512];
            std::snprintf(buf, sizeof(buf), "%.*f", int(std::clamp<int64_t>(precision, 0, 300)),
                          v.as_double());
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
            return k.is_string() ? Value(py::map_case(k.as_string(), py::Case::kLower))
                                 : k;  // case-insensitive by default
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
                out.push_back(apply_filter(required_arg(args, 0, "filter", "map").str(), item,
                                           rest_args(args, 1)));
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
            const Value x =
                by_attr ? attribute_of(item, required_arg(args, 0, "attribute", name.c_str()).str())
                        : item;
            const auto test = args.get(test_idx, "test");
            const bool passed =
                test ? apply_test(test->str(), x, rest_args(args, test_idx + 1)) : x.truthy();
            if (passed == keep_if) out.push_back(item);
        }
        return out;
    }
    if (name == "indent") {
        const Value width = args.get(0, "width").value_or(Value(int64_t(4)));
        const std::string pad =
            width.is_string() ? width.as_string() : std::string(size_t(width.as_int()), ' ');
        const bool first = args.get(1, "first").value_or(Value(false)).truthy();
        const bool blank = args.get(2, "blank").value_or(Value(false)).truthy();
        const List lines = py::split(v.str(), Value("\n"), -1);
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

}  // namespace

bool apply_test(const std::string& name, const Value& v, const Args& args) {
    auto arg = [&]() { return required_arg(args, 0, "other", name.c_str()); };
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
    if (name == "iterable" || name == "sequence")  // an undefined iterates as empty in Jinja
        if (v.is_undefined()) return true;
    if (name == "iterable" || name == "sequence")
        return v.is_string() || v.is_list() || v.is_dict();
    if (name == "callable") return v.is_callable();
    if (name == "odd" || name == "even") {  // value % 2 == 1 / == 0, with Python's modulo
        const double m = v.is_float() ? v.as_double() - 2 * std::floor(v.as_double() / 2)
                                      : double(((v.as_int() % 2) + 2) % 2);
        return name == "odd" ? m == 1 : m == 0;
    }
    if (name == "divisibleby") {
        const double d = arg().as_double(), x = v.as_double();
        return d != 0 && x - d * std::floor(x / d) == 0;
    }
    if (name == "sameas")
        return v.is_bool() == arg().is_bool() && v.is_none() == arg().is_none() && v == arg();
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
    if (name == "lower" || name == "upper") {  // str(value).islower() / isupper()
        const std::string text = v.str();
        const bool lower = py::map_case(text, py::Case::kLower) == text;
        const bool upper = py::map_case(text, py::Case::kUpper) == text;
        return lower != upper && (name == "lower" ? lower : upper);  // needs a cased character
    }
    fail("unknown test '{}'", name);
}

}  // namespace miniinfer::jinja
