// Methods templates call on values: str (startswith, split, strip, ...), dict (items, get,
// keys, values) and list (index, count). Lists are read-only, as in transformers' sandbox.
#include <utf8proc.h>

#include <algorithm>

#include "core/check.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/py_str.h"

namespace miniinfer::jinja {
namespace {

Value bound(std::string name, std::function<Value(const Args&)> fn) {
    return Callable{std::move(name), std::move(fn)};
}

}  // namespace

std::optional<Value> get_method(const Value& obj, const std::string& name) {
    if (obj.is_string()) {
        const std::string s = obj.as_string();
        if (name == "startswith" || name == "endswith")
            return bound(name, [s, name](const Args& a) {
                return Value(py::starts_or_ends(s, required_arg(a, 0, "prefix", name.c_str()),
                                                name == "startswith"));
            });
        if (name == "strip" || name == "lstrip" || name == "rstrip")
            return bound(name, [s, name](const Args& a) {
                return Value(py::strip(s, a.get(0, "chars"), name != "rstrip", name != "lstrip"));
            });
        if (name == "split")
            return bound(name, [s](const Args& a) {
                return Value(py::split(s, a.get(0, "sep"),
                                       a.get(1, "maxsplit").value_or(Value(int64_t(-1))).as_int()));
            });
        if (name == "upper" || name == "lower" || name == "title" || name == "capitalize")
            return bound(name, [s, name](const Args&) {
                const py::Case mode = name == "upper"   ? py::Case::kUpper
                                      : name == "lower" ? py::Case::kLower
                                      : name == "title" ? py::Case::kTitle
                                                        : py::Case::kCapitalize;
                return Value(py::map_case(s, mode));  // Python's str methods
            });
        if (name == "replace")
            return bound(name, [s](const Args& a) {
                return Value(py::replace(s, required_arg(a, 0, "old", "replace").str(),
                                         required_arg(a, 1, "new", "replace").str(),
                                         a.get(2, "count").value_or(Value(int64_t(-1))).as_int()));
            });
        if (name == "find" || name == "count")
            return bound(name, [s, name](const Args& a) {
                const std::string sub = required_arg(a, 0, "sub", name.c_str()).str();
                if (name == "count") {
                    int64_t n = 0;
                    for (size_t p = s.find(sub); p != std::string::npos && !sub.empty();
                         p = s.find(sub, p + sub.size()))
                        ++n;
                    return Value(n);
                }
                const size_t p = s.find(sub);
                return Value(p == std::string::npos
                                 ? int64_t(-1)
                                 : int64_t(py::code_points(s.substr(0, p)).size()));
            });
        if (name == "join")
            return bound(name, [s](const Args& a) {
                return apply_filter("join", required_arg(a, 0, "iterable", "join"), Args{{s}, {}});
            });
        if (name == "splitlines")
            return bound(name, [s](const Args&) {
                List lines = py::split(
                    py::replace(py::replace(s, "\r\n", "\n", -1), "\r", "\n", -1), Value("\n"), -1);
                if (!lines.empty() && lines.back().as_string().empty()) lines.pop_back();
                return Value(lines);
            });
        if (name == "isdigit" || name == "isspace" || name == "isalpha" || name == "isalnum")
            return bound(name, [s, name](const Args&) {
                const auto cps = py::code_points(s);
                return Value(!cps.empty() && std::all_of(cps.begin(), cps.end(), [&](char32_t c) {
                    const auto cat = utf8proc_category(utf8proc_int32_t(c));
                    const bool alpha = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
                    const bool digit = cat == UTF8PROC_CATEGORY_ND;
                    if (name == "isdigit") return digit;
                    if (name == "isspace") return py::is_space(c);
                    if (name == "isalpha") return alpha;
                    return alpha || digit;
                }));
            });
        return std::nullopt;
    }
    if (obj.is_dict() && !obj.as_dict().is_namespace) {
        if (name == "items")
            return bound(name, [obj](const Args&) { return apply_filter("items", obj, {}); });
        if (name == "keys") return bound(name, [obj](const Args&) { return Value(to_list(obj)); });
        if (name == "values")
            return bound(name, [obj](const Args&) {
                List out;
                for (const auto& [_, v] : obj.as_dict().items) out.push_back(v);
                return Value(out);
            });
        if (name == "get")
            return bound(name, [obj](const Args& a) {
                const Value* v = obj.as_dict().find(required_arg(a, 0, "key", "get").str());
                return v ? *v : a.get(1, "default").value_or(Value(nullptr));
            });
        return std::nullopt;
    }
    if (obj.is_list()) {
        if (name == "index" || name == "count")
            return bound(name, [obj, name](const Args& a) {
                const Value x = required_arg(a, 0, "value", name.c_str());
                const List& l = obj.as_list();
                if (name == "count") return Value(int64_t(std::count(l.begin(), l.end(), x)));
                auto it = std::find(l.begin(), l.end(), x);
                if (it == l.end()) fail("{} is not in list", x.repr());
                return Value(int64_t(it - l.begin()));
            });
        if (name == "append" || name == "extend" || name == "pop" || name == "insert" ||
            name == "remove" || name == "clear" || name == "sort" || name == "reverse")
            fail(
                "access to attribute '{}' of 'list' object is unsafe (templates cannot modify "
                "lists)",
                name);
    }
    return std::nullopt;
}

}  // namespace miniinfer::jinja
