#include "tokenizer/jinja/template.h"

#include <cmath>
#include <ctime>

#include "core/check.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/py_str.h"
#include "tokenizer/utf8.h"

namespace miniinfer::jinja {
namespace {

// Variables visible at one point: a chain of frames (template, for-loop bodies, macro calls).
struct Frame {
    Dict vars;
    Frame* parent = nullptr;
    const Value* find(const std::string& name) const {
        for (const Frame* f = this; f; f = f->parent)
            if (const Value* v = f->vars.find(name)) return v;
        return nullptr;
    }
};

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
  public:
    explicit Renderer(Frame& root) : root_(root) {}

    Flow exec(const Body& body, Frame& frame, std::string& out) {
        for (const NodePtr& n : body) {
            line_ = n->line ? n->line : line_;
            const Flow f = exec_node(*n, frame, out);
            if (f != Flow::kNormal) return f;
        }
        return Flow::kNormal;
    }

    int line() const { return line_; }

  private:
    Flow exec_node(const Node& n, Frame& frame, std::string& out) {
        switch (n.kind) {
            case Node::kText:
                out += n.text;
                break;
            case Node::kOutput:
                out += eval(*n.expr, frame).str();
                break;
            case Node::kIf:
                for (const auto& [cond, body] : n.branches)
                    if (!cond || eval(*cond, frame).truthy()) return exec(body, frame, out);
                break;
            case Node::kFor:
                return exec_for(n, frame, out);
            case Node::kSet:
                exec_set(n, frame);
                break;
            case Node::kMacro:
                define_macro(n, frame);
                break;
            case Node::kBreak:
                return Flow::kBreak;
            case Node::kContinue:
                return Flow::kContinue;
            case Node::kScope:
                return exec(n.body, frame, out);
        }
        return Flow::kNormal;
    }

    static void assign(Frame& frame, const std::vector<std::string>& targets, const Value& v) {
        if (targets.size() == 1) return frame.vars.set(targets[0], v);
        if (!v.is_list() || v.as_list().size() != targets.size())
            fail("cannot unpack {} into {} names", v.type_name(), targets.size());
        for (size_t i = 0; i < targets.size(); ++i) frame.vars.set(targets[i], v.as_list()[i]);
    }

    Flow exec_for(const Node& n, Frame& frame, std::string& out) {
        const Value seq = eval(*n.expr, frame);
        if (!seq.is_list() && !seq.is_dict() && !seq.is_string() && !seq.is_undefined())
            fail("'{}' object is not iterable", seq.type_name());
        List items = to_list(seq);
        if (n.filter) {  // `for x in xs if cond`: loop variables count only the kept items
            List kept;
            for (const Value& item : items) {
                Frame probe{{}, &frame};
                assign(probe, n.targets, item);
                if (eval(*n.filter, probe).truthy()) kept.push_back(item);
            }
            items = std::move(kept);
        }
        if (items.empty()) return exec(n.else_body, frame, out), Flow::kNormal;
        const auto length = int64_t(items.size());
        for (int64_t i = 0; i < length; ++i) {
            Frame body{{}, &frame};
            assign(body, n.targets, items[i]);
            Dict loop;
            loop.items = {
                {"index", i + 1},
                {"index0", i},
                {"revindex", length - i},
                {"revindex0", length - i - 1},
                {"first", i == 0},
                {"last", i == length - 1},
                {"length", length},
                {"previtem", i > 0 ? items[i - 1] : Value(Undefined{"previtem"})},
                {"nextitem", i + 1 < length ? items[i + 1] : Value(Undefined{"nextitem"})}};
            loop.items.emplace_back(
                "cycle", Callable{"cycle", [i](const Args& a) {
                                      if (a.positional.empty())
                                          fail("cycle() needs at least one argument");
                                      return a.positional[size_t(i) % a.positional.size()];
                                  }});
            body.vars.set("loop", std::move(loop));
            if (exec(n.body, body, out) == Flow::kBreak) break;
        }
        return Flow::kNormal;
    }

    void exec_set(const Node& n, Frame& frame) {
        Value v;
        if (n.expr) {
            v = eval(*n.expr, frame);
        } else {
            std::string captured;
            exec(n.body, frame, captured);
            v = captured;
        }
        if (n.attr.empty()) return assign(frame, n.targets, v);
        const Value* ns = frame.find(n.targets[0]);
        if (!ns || !ns->is_dict() || !ns->as_dict().is_namespace)
            fail("cannot assign attribute '{}' on '{}': not a namespace", n.attr, n.targets[0]);
        ns->as_dict().set(n.attr, v);
    }

    void define_macro(const Node& n, Frame& frame) {
        const Node* node = &n;
        frame.vars.set(n.text, Callable{n.text, [this, node](const Args& args) {
                                            Frame call{{}, &root_};
                                            for (size_t i = 0; i < node->params.size(); ++i) {
                                                const auto& [name, def] = node->params[i];
                                                auto v = args.get(i, name);
                                                call.vars.set(name, v     ? *v
                                                                    : def ? eval(*def, call)
                                                                          : Value(Undefined{name}));
                                            }
                                            std::string out;
                                            exec(node->body, call, out);
                                            return Value(out);
                                        }});
    }

    Args eval_args(const Expr& e, Frame& frame) {
        Args args;
        for (size_t i = 1; i < e.children.size(); ++i) {
            Value v = eval(*e.children[i], frame);
            const std::string& name = e.arg_names[i - 1];
            if (name.empty())
                args.positional.push_back(std::move(v));
            else
                args.named.emplace_back(name, std::move(v));
        }
        return args;
    }

    static Value get_attr(const Value& obj, const std::string& name) {
        if (obj.is_undefined())
            fail("'{}' is undefined (looking up '.{}')", obj.undefined_name(), name);
        if (obj.is_dict() && obj.as_dict().is_namespace) {
            const Value* v = obj.as_dict().find(name);
            return v ? *v : Value(Undefined{name});
        }
        if (auto m = get_method(obj, name)) return *m;  // Jinja tries attributes before items
        if (obj.is_dict()) {
            const Value* v = obj.as_dict().find(name);
            return v ? *v : Value(Undefined{name});
        }
        return Undefined{name};
    }

    static Value get_item(const Value& obj, const Value& key) {
        if (obj.is_undefined())
            fail("'{}' is undefined (subscripted with {})", obj.undefined_name(), key.repr());
        if (obj.is_dict()) {
            if (!key.is_string()) return Undefined{key.str()};
            const Value* v = obj.as_dict().find(key.as_string());
            return v ? *v : get_attr(obj, key.as_string());
        }
        if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
            const List items = obj.is_list() ? obj.as_list() : to_list(obj);
            int64_t i = key.as_int();
            if (i < 0) i += int64_t(items.size());
            if (i < 0 || i >= int64_t(items.size())) return Undefined{"[" + key.str() + "]"};
            if (obj.is_markup()) return Value::markup(items[size_t(i)].as_string());
            return items[size_t(i)];
        }
        if (key.is_string()) return get_attr(obj, key.as_string());
        return Undefined{key.str()};
    }

    Value slice(const Value& obj, const Expr& e, Frame& frame) {
        if (!obj.is_list() && !obj.is_string())
            fail("'{}' object is not subscriptable", obj.type_name());
        const List items = to_list(obj);
        const auto n = int64_t(items.size());
        auto part = [&](int k) -> std::optional<int64_t> {
            if (!e.children[size_t(k)]) return std::nullopt;
            Value v = eval(*e.children[size_t(k)], frame);
            if (v.is_none()) return std::nullopt;
            return v.as_int();
        };
        const int64_t step = part(3).value_or(1);
        if (step == 0) fail("slice step cannot be zero");
        auto clamp = [&](std::optional<int64_t> x, int64_t def) {
            if (!x) return def;
            int64_t i = *x < 0 ? *x + n : *x;
            return step > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
        };
        const int64_t start = clamp(part(1), step > 0 ? 0 : n - 1),
                      stop = clamp(part(2), step > 0 ? n : -1);
        List out;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
            out.push_back(items[size_t(i)]);
        if (!obj.is_string()) return out;
        std::string s;
        for (const Value& c : out) s += c.as_string();
        return obj.is_markup() ? Value::markup(std::move(s)) : Value(std::move(s));
    }

    static Value arithmetic(const std::string& op, const Value& a, const Value& b) {
        if (a.is_undefined() || b.is_undefined())
            fail("'{}' is undefined", (a.is_undefined() ? a : b).undefined_name());
        if (op == "+" && a.is_string() && b.is_string()) {
            if (!a.is_markup() && !b.is_markup()) return a.as_string() + b.as_string();
            // markupsafe: Markup + str and str + Markup escape the plain operand.
            auto markup_text = [](const Value& v) {
                return v.is_markup() ? v.as_string() : py::html_escape(v.as_string());
            };
            return Value::markup(markup_text(a) + markup_text(b));
        }
        if (op == "+" && a.is_list() && b.is_list()) {
            List l = a.as_list();
            l.insert(l.end(), b.as_list().begin(), b.as_list().end());
            return l;
        }
        // Sequence repetition: str or list (tuple) times an int or bool, either way round.
        const bool a_seq = a.is_string() || a.is_list(), b_seq = b.is_string() || b.is_list();
        if (op == "*" && (a_seq != b_seq) && (a_seq ? b : a).is_number() &&
            !(a_seq ? b : a).is_float()) {
            const Value& seq = a_seq ? a : b;
            const int64_t n = std::max<int64_t>((a_seq ? b : a).as_int(), 0);
            const double size =
                double(seq.is_string() ? seq.as_string().size() : seq.as_list().size());
            if (size * double(n) > 1e8) fail("repetition result is too large");
            if (seq.is_string()) {
                std::string out;
                for (int64_t i = 0; i < n; ++i) out += seq.as_string();
                return seq.is_markup() ? Value::markup(std::move(out)) : Value(std::move(out));
            }
            List out;
            for (int64_t i = 0; i < n; ++i)
                out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
            return seq.is_tuple() ? Value::tuple(std::move(out)) : Value(std::move(out));
        }
        if (!a.is_number() || !b.is_number())
            fail("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(),
                 b.type_name());
        const bool ints = !a.is_float() && !b.is_float();
        const double x = a.as_double(), y = b.as_double();
        if (op == "/") {
            if (y == 0) fail("division by zero");
            return x / y;
        }
        if (op == "//" || op == "%") {
            if (y == 0) fail("integer division or modulo by zero");
            if (ints) {
                const int64_t p = a.as_int(), q = b.as_int();
                int64_t d = p / q, r = p % q;
                if (r != 0 && ((r < 0) != (q < 0))) --d, r += q;  // Python floors
                return op == "//" ? d : r;
            }
            const double d = std::floor(x / y);
            return op == "//" ? d : x - d * y;
        }
        if (op == "**")
            return ints && b.as_int() >= 0 ? Value(int64_t(std::llround(std::pow(x, y))))
                                           : Value(std::pow(x, y));
        if (ints) {
            const int64_t p = a.as_int(), q = b.as_int();
            return op == "+" ? p + q : op == "-" ? p - q : p * q;
        }
        return op == "+" ? x + y : op == "-" ? x - y : x * y;
    }

    static bool contains(const Value& container, const Value& item) {
        if (container.is_undefined()) return false;  // iterating an undefined yields nothing
        if (container.is_string()) {
            if (!item.is_string())
                fail("'in <string>' requires string as left operand, not {}", item.type_name());
            return container.as_string().find(item.as_string()) != std::string::npos;
        }
        if (container.is_dict())
            return item.is_string() && container.as_dict().find(item.as_string());
        if (container.is_list())
            return std::find(container.as_list().begin(), container.as_list().end(), item) !=
                   container.as_list().end();
        if (container.is_undefined()) fail("'{}' is undefined", container.undefined_name());
        fail("argument of type '{}' is not iterable", container.type_name());
    }

    Value eval(const Expr& e, Frame& frame) {
        if (e.line) line_ = e.line;
        switch (e.kind) {
            case Expr::kLiteral:
                return e.literal;
            case Expr::kName: {
                const Value* v = frame.find(e.name);
                return v ? *v : Value(Undefined{e.name});
            }
            case Expr::kList: {
                List l;
                for (const ExprPtr& c : e.children) l.push_back(eval(*c, frame));
                return e.name == "tuple" ? Value::tuple(std::move(l)) : Value(std::move(l));
            }
            case Expr::kDict: {
                Dict d;
                for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
                    const Value k = eval(*e.children[i], frame);
                    if (!k.is_string()) fail("dict keys must be strings, got {}", k.type_name());
                    d.set(k.as_string(), eval(*e.children[i + 1], frame));
                }
                return d;
            }
            case Expr::kGetAttr:
                return get_attr(eval(*e.children[0], frame), e.name);
            case Expr::kGetItem:
                return get_item(eval(*e.children[0], frame), eval(*e.children[1], frame));
            case Expr::kSlice:
                return slice(eval(*e.children[0], frame), e, frame);
            case Expr::kCall: {
                const Value callee = eval(*e.children[0], frame);
                if (!callee.is_callable()) {
                    if (callee.is_undefined()) fail("'{}' is undefined", callee.undefined_name());
                    fail("'{}' object is not callable", callee.type_name());
                }
                return callee.as_callable().fn(eval_args(e, frame));
            }
            case Expr::kFilter:
                return apply_filter(e.name, eval(*e.children[0], frame), eval_args(e, frame));
            case Expr::kTest:
                return apply_test(e.name, eval(*e.children[0], frame), eval_args(e, frame)) !=
                       e.negated;
            case Expr::kUnary: {
                const Value v = eval(*e.children[0], frame);
                if (e.name == "not") return !v.truthy();
                if (!v.is_number())
                    fail("bad operand type for unary {}: '{}'", e.name, v.type_name());
                if (e.name == "+") return v;
                return v.is_float() ? Value(-v.as_double()) : Value(-v.as_int());
            }
            case Expr::kBinary:
                return eval_binary(e, frame);
            case Expr::kCond:
                if (eval(*e.children[1], frame).truthy()) return eval(*e.children[0], frame);
                return e.children[2] ? eval(*e.children[2], frame) : Value(Undefined{"else"});
        }
        MI_CHECK(false, "unknown expression kind {}", int(e.kind));
    }

    Value eval_binary(const Expr& e, Frame& frame) {
        const std::string& op = e.name;
        Value a = eval(*e.children[0], frame);
        if (op == "and") return a.truthy() ? eval(*e.children[1], frame) : a;
        if (op == "or") return a.truthy() ? a : eval(*e.children[1], frame);
        const Value b = eval(*e.children[1], frame);
        if (op == "==") return a == b;
        if (op == "!=") return !(a == b);
        if (op == "<") return less_than(a, b);
        if (op == ">") return less_than(b, a);
        if (op == "<=") return !less_than(b, a);
        if (op == ">=") return !less_than(a, b);
        if (op == "in") return contains(b, a);
        if (op == "not in") return !contains(b, a);
        if (op == "~") return a.str() + b.str();
        return arithmetic(op, a, b);
    }

    Frame& root_;
    int line_ = 1;
};

Dict globals() {
    Dict g;
    g.set("raise_exception", Callable{"raise_exception", [](const Args& a) -> Value {
                                          fail("raise_exception: {}",
                                               a.get(0, "message").value_or(Value("")).str());
                                      }});
    g.set("namespace", Callable{"namespace", [](const Args& a) {
                                    Dict ns;
                                    ns.is_namespace = true;
                                    for (const Value& p : a.positional)
                                        if (p.is_dict())
                                            for (const auto& [k, v] : p.as_dict().items)
                                                ns.set(k, v);
                                    for (const auto& [k, v] : a.named) ns.set(k, v);
                                    return Value(std::move(ns));
                                }});
    g.set("dict", Callable{"dict", [](const Args& a) {
                               Dict d;
                               for (const Value& p : a.positional)
                                   if (p.is_dict())
                                       for (const auto& [k, v] : p.as_dict().items) d.set(k, v);
                               for (const auto& [k, v] : a.named) d.set(k, v);
                               return Value(std::move(d));
                           }});
    g.set("range", Callable{"range", [](const Args& a) {
                                int64_t start = 0, stop = 0, step = 1;
                                if (a.positional.size() == 1)
                                    stop = a.positional[0].as_int();
                                else if (a.positional.size() >= 2)
                                    start = a.positional[0].as_int(),
                                    stop = a.positional[1].as_int();
                                if (a.positional.size() == 3) step = a.positional[2].as_int();
                                if (step == 0) fail("range() arg 3 must not be zero");
                                List out;
                                for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
                                    out.push_back(i);
                                return Value(std::move(out));
                            }});
    g.set("strftime_now",
          Callable{"strftime_now", [](const Args& a) {
                       const std::time_t now = std::time(nullptr);
                       std::tm tm{};
                       localtime_r(&now, &tm);
                       char buf[256];
                       const size_t n =
                           std::strftime(buf, sizeof(buf),
                                         a.get(0, "format").value_or(Value("")).str().c_str(), &tm);
                       return Value(std::string(buf, n));
                   }});
    return g;
}

}  // namespace

Template Template::parse(std::string_view source) {
    Template t;
    t.body_ = std::make_shared<const Body>(jinja::parse(source));
    return t;
}

std::string Template::render(const Dict& context) const {
    Frame builtins{globals(), nullptr};
    Frame root{context, &builtins};
    Renderer r(root);
    std::string out;
    try {
        r.exec(*body_, root, out);
    } catch (const Error& e) {
        fail("chat template: line {}: {}", r.line(), e.what());
    } catch (const std::exception& e) {  // e.g. std::bad_alloc from 'x' * 10**12
        fail("chat template: line {}: {}", r.line(), e.what());
    }
    return out;
}

}  // namespace miniinfer::jinja
