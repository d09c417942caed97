// Values of the Jinja interpreter, with Python's semantics where templates can see them:
// truthiness, equality, ordering, str() (what {{ x }} prints) and json.dumps (tojson).
// Lists, dicts and namespaces are shared by reference, as in Python.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace miniinfer::jinja {

class Value;
using List = std::vector<Value>;

// Insertion-ordered string-keyed map (Python dicts keep insertion order).
struct Dict {
    std::vector<std::pair<std::string, Value>> items;
    bool is_namespace = false;  // namespace(): the only object templates may assign into
    const Value* find(std::string_view key) const;
    void set(const std::string& key, Value v);
};

// Arguments of a call: f(a, b, key=c).
struct Args {
    std::vector<Value> positional;
    std::vector<std::pair<std::string, Value>> named;
    // The i-th positional argument or the one named `name`; nullopt when absent.
    std::optional<Value> get(size_t i, std::string_view name) const;
};

struct Callable {
    std::string name;
    std::function<Value(const Args&)> fn;
};

struct Undefined {
    std::string name;  // what was looked up, for error messages
};

class Value {
  public:
    using Storage =
        std::variant<Undefined, std::nullptr_t, bool, int64_t, double, std::string,
                     std::shared_ptr<List>, std::shared_ptr<Dict>, std::shared_ptr<Callable>>;
    Value() : v_(Undefined{}) {}
    Value(Undefined u) : v_(std::move(u)) {}
    Value(std::nullptr_t) : v_(nullptr) {}
    Value(bool b) : v_(b) {}
    Value(int i) : v_(int64_t(i)) {}
    Value(int64_t i) : v_(i) {}
    Value(double d) : v_(d) {}
    Value(std::string s) : v_(std::move(s)) {}
    Value(const char* s) : v_(std::string(s)) {}
    Value(List l) : v_(std::make_shared<List>(std::move(l))) {}
    Value(Dict d) : v_(std::make_shared<Dict>(std::move(d))) {}
    Value(Callable c) : v_(std::make_shared<Callable>(std::move(c))) {}

    // Error beyond kMaxJsonDepth levels of nesting (core/json.h).
    static Value from_json(const nlohmann::ordered_json& j, int depth = 0);
    // A tuple: a list that prints as (a, b) (tuple literals, dict items).
    static Value tuple(List l) {
        Value v(std::move(l));
        v.tuple_ = true;
        return v;
    }
    bool is_tuple() const { return tuple_; }
    // A list standing for a Python iterator (what select, map, items, ... return in Jinja):
    // always true in a condition, like any iterator, even when it yields nothing.
    static Value iterator(List l) {
        Value v(std::move(l));
        v.iterator_ = true;
        return v;
    }
    // A markupsafe.Markup string (what |safe returns). It prints as it is, but `+` with a plain
    // string HTML-escapes the plain one, as Jinja2 does even with autoescape off (transformers'
    // setting). Markup survives |trim, |upper, |lower, |capitalize, |string, indexing, slicing
    // and repetition, as in Jinja2; other filters and str methods give plain strings here (Jinja2
    // keeps Markup through a few more, such as .strip() and .split()).
    static Value markup(std::string s) {
        Value v(std::move(s));
        v.markup_ = true;
        return v;
    }
    bool is_markup() const { return markup_; }

    bool is_undefined() const { return std::holds_alternative<Undefined>(v_); }
    bool is_none() const { return std::holds_alternative<std::nullptr_t>(v_); }
    bool is_bool() const { return std::holds_alternative<bool>(v_); }
    bool is_int() const { return std::holds_alternative<int64_t>(v_); }
    bool is_float() const { return std::holds_alternative<double>(v_); }
    bool is_number() const { return is_int() || is_float() || is_bool(); }
    bool is_string() const { return std::holds_alternative<std::string>(v_); }
    bool is_list() const { return std::holds_alternative<std::shared_ptr<List>>(v_); }
    bool is_dict() const { return std::holds_alternative<std::shared_ptr<Dict>>(v_); }
    bool is_callable() const { return std::holds_alternative<std::shared_ptr<Callable>>(v_); }

    // Accessors. A value of another kind is a template error (Error "expected int, got str").
    bool as_bool() const { return get<bool>("bool"); }
    int64_t as_int() const;    // int or bool
    double as_double() const;  // any number
    const std::string& as_string() const { return get<std::string>("str"); }
    List& as_list() const { return *get<std::shared_ptr<List>>("list"); }
    Dict& as_dict() const { return *get<std::shared_ptr<Dict>>("dict"); }
    const Callable& as_callable() const { return *get<std::shared_ptr<Callable>>("function"); }
    const std::string& undefined_name() const { return get<Undefined>("Undefined").name; }

    std::string type_name() const;  // Python's: 'str', 'int', 'list', 'dict', ...
    bool truthy() const;
    std::string str() const;   // Python str(): what {{ value }} prints
    std::string repr() const;  // Python repr(): used inside containers
    // json.dumps(value, **options): Python's output byte for byte. Throws Error for
    // undefined, callables and namespaces.
    struct JsonOptions {
        int indent = -1;  // < 0: None (one line)
        bool sort_keys = false;
        bool ensure_ascii = false;
        std::string item_sep, key_sep;  // empty: Python's defaults (", " or "," with indent; ": ")
    };
    std::string to_json(const JsonOptions& options) const;
    std::string to_json() const { return to_json(JsonOptions{}); }

    friend bool operator==(const Value& a, const Value& b);
    // Python's a < b; throws Error for unorderable kinds.
    friend bool less_than(const Value& a, const Value& b);

  private:
    template <typename T>
    const T& get(const char* expected) const {
        if (const T* p = std::get_if<T>(&v_)) return *p;
        wrong_kind(expected);
    }
    [[noreturn]] void wrong_kind(const char* expected) const;

    Storage v_;
    bool tuple_ = false;
    bool iterator_ = false;
    bool markup_ = false;
};

// Python float repr (shortest round-trip, '1.0', '1e+16', 'inf', 'nan').
std::string format_float(double d);

}  // namespace miniinfer::jinja
