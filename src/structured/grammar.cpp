#include "structured/grammar.h"

#include <fmt/format.h>

#include <cctype>
#include <unordered_map>

#include "core/check.h"

namespace miniinfer::structured {

namespace {

ExprPtr make(Expr e) {
    return std::make_shared<const Expr>(std::move(e));
}

using Seq = std::vector<Grammar::Elem>;

// The branches of an alternation, nested alternations flattened (a | (b | c) is a | b | c).
void branches_of(const Expr& e, std::vector<const Expr*>& out) {
    if (e.kind == Expr::Kind::kAlt) {
        for (const ExprPtr& c : e.children) branches_of(*c, out);
    } else if (e.kind == Expr::Kind::kSeq && e.children.size() == 1) {
        branches_of(*e.children[0], out);
    } else {
        out.push_back(&e);
    }
}

std::vector<const Expr*> branches_of(const Expr& e) {
    std::vector<const Expr*> out;
    branches_of(e, out);
    return out;
}

// Lowers Expr rules into the flat Grammar. Alternations nested inside a sequence and
// repetitions of anything but a byte class become helper rules; a starred alternation's
// branches are inlined into its loop rule, so a JSON string's characters loop inside one rule.
class Lowerer {
  public:
    explicit Lowerer(const std::map<std::string, ExprPtr>& rules) : rules_(rules) {}

    Grammar run(const std::string& root) {
        g_.root = rule_for_name(root);
        while (!pending_.empty()) {
            auto [idx, body] = pending_.back();
            pending_.pop_back();
            lower_alternatives(idx, *body);
        }
        for (size_t r = 0; r < bodies_.size(); ++r) {
            for (const Seq& s : bodies_[r]) {
                g_.rule_alts[r].push_back(int32_t(g_.elems.size()));
                g_.elems.insert(g_.elems.end(), s.begin(), s.end());
                g_.elems.push_back({Grammar::ElemKind::kEnd, 0});
            }
        }
        return std::move(g_);
    }

  private:
    int32_t add_rule(std::string name) {
        g_.rule_names.push_back(std::move(name));
        g_.rule_alts.emplace_back();
        bodies_.emplace_back();
        return int32_t(g_.rule_names.size() - 1);
    }

    int32_t helper_rule(int32_t owner) {
        return add_rule(fmt::format("{}_{}", g_.rule_names[owner], ++num_helpers_));
    }

    int32_t rule_for_name(const std::string& name) {
        if (auto it = rule_index_.find(name); it != rule_index_.end()) return it->second;
        auto it = rules_.find(name);
        if (it == rules_.end()) fail("grammar: undefined rule '{}'", name);
        const int32_t idx = add_rule(name);
        rule_index_[name] = idx;
        pending_.emplace_back(idx, it->second.get());
        return idx;
    }

    int32_t class_index(const ByteSet& bytes) {
        auto [it, inserted] = class_index_.try_emplace(bytes, int32_t(g_.classes.size()));
        if (inserted) g_.classes.push_back(bytes);
        return it->second;
    }

    void push(Seq& out, Grammar::Elem e) {
        if (++num_elems_ > kMaxGrammarElements)
            fail("grammar: too large (over {} elements after expanding repetitions)",
                 kMaxGrammarElements);
        out.push_back(e);
    }

    void lower_alternatives(int32_t idx, const Expr& body) {
        for (const Expr* branch : branches_of(body)) lower_branch(idx, *branch, -1);
    }

    // One alternative of rule idx: expr, then a reference to `tail` when tail >= 0.
    void lower_branch(int32_t idx, const Expr& expr, int32_t tail) {
        Seq s;
        emit(expr, s, idx);
        if (tail >= 0) push(s, {Grammar::ElemKind::kRef, tail});
        bodies_[idx].push_back(std::move(s));
    }

    void emit(const Expr& e, Seq& out, int32_t owner) {
        switch (e.kind) {
            case Expr::Kind::kBytes:
                push(out, {Grammar::ElemKind::kBytes, class_index(e.bytes)});
                return;
            case Expr::Kind::kSeq:
                for (const ExprPtr& c : e.children) emit(*c, out, owner);
                return;
            case Expr::Kind::kRef:
                push(out, {Grammar::ElemKind::kRef, rule_for_name(e.rule)});
                return;
            case Expr::Kind::kAlt:
                if (e.children.size() == 1) return emit(*e.children[0], out, owner);
                push(out, {Grammar::ElemKind::kRef, alt_rule(e, owner)});
                return;
            case Expr::Kind::kRepeat:
                emit_repeat(e, out, owner);
                return;
        }
    }

    int32_t alt_rule(const Expr& e, int32_t owner) {
        if (auto it = helpers_.find(&e); it != helpers_.end()) return it->second;
        const int32_t idx = helper_rule(owner);
        helpers_[&e] = idx;
        lower_alternatives(idx, e);
        return idx;
    }

    void emit_repeat(const Expr& e, Seq& out, int32_t owner) {
        const Expr& child = *e.children[0];
        if (e.min < 0 || (e.max >= 0 && e.max < e.min))
            fail("grammar: bad repetition bounds {{{},{}}}", e.min, e.max);
        for (int i = 0; i < e.min; ++i) emit(child, out, owner);
        if (e.max < 0) {
            if (child.kind == Expr::Kind::kBytes) {
                push(out, {Grammar::ElemKind::kBytesStar, class_index(child.bytes)});
            } else {
                push(out, {Grammar::ElemKind::kRef, star_rule(child, owner)});
            }
        } else if (e.max > e.min) {
            push(out, {Grammar::ElemKind::kRef, bounded_rule(child, e.max - e.min, owner)});
        }
    }

    // S ::= branch_1 S | ... | branch_k S | "" (the child's branches inlined).
    int32_t star_rule(const Expr& child, int32_t owner) {
        const std::pair<const Expr*, int> key{&child, -1};
        if (auto it = repeats_.find(key); it != repeats_.end()) return it->second;
        const int32_t idx = helper_rule(owner);
        repeats_[key] = idx;
        for (const Expr* branch : branches_of(child)) lower_branch(idx, *branch, idx);
        bodies_[idx].emplace_back();
        return idx;
    }

    // Up to n more copies: O_n ::= child O_{n-1} | "", O_1 ::= child | "" (the child's
    // branches inlined, as in star_rule).
    int32_t bounded_rule(const Expr& child, int n, int32_t owner) {
        int32_t tail = -1;
        for (int k = 1; k <= n; ++k) {  // bottom up: no recursion as deep as n
            const std::pair<const Expr*, int> key{&child, k};
            if (auto it = repeats_.find(key); it != repeats_.end()) {
                tail = it->second;
                continue;
            }
            const int32_t idx = helper_rule(owner);
            repeats_[key] = idx;
            for (const Expr* branch : branches_of(child)) lower_branch(idx, *branch, tail);
            bodies_[idx].emplace_back();
            tail = idx;
        }
        return tail;
    }

    const std::map<std::string, ExprPtr>& rules_;
    Grammar g_;
    std::vector<std::vector<Seq>> bodies_;
    std::vector<std::pair<int32_t, const Expr*>> pending_;
    std::map<std::string, int32_t> rule_index_;
    std::unordered_map<ByteSet, int32_t> class_index_;
    std::map<const Expr*, int32_t> helpers_;
    std::map<std::pair<const Expr*, int>, int32_t> repeats_;
    int num_helpers_ = 0;
    int num_elems_ = 0;
};

// A pushdown matcher predicts rules before consuming; a rule that reaches itself without
// consuming a byte would push forever.
void check_left_recursion(const Grammar& g) {
    using K = Grammar::ElemKind;
    const size_t num_rules = g.rule_alts.size();
    std::vector<char> nullable(num_rules, 0);
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < num_rules; ++r) {
            if (nullable[r]) continue;
            for (int32_t p : g.rule_alts[r]) {
                bool all = true;
                for (; g.elems[p].kind != K::kEnd && all; ++p) {
                    const auto& e = g.elems[p];
                    all = e.kind == K::kBytesStar || (e.kind == K::kRef && nullable[e.arg]);
                }
                if (all) {
                    nullable[r] = 1;
                    changed = true;
                    break;
                }
            }
        }
    }
    std::vector<std::vector<int32_t>> first_refs(num_rules);
    for (size_t r = 0; r < num_rules; ++r) {
        for (int32_t p : g.rule_alts[r]) {
            for (; g.elems[p].kind != K::kEnd; ++p) {
                const auto& e = g.elems[p];
                if (e.kind == K::kRef) first_refs[r].push_back(e.arg);
                if (e.kind == K::kBytes || (e.kind == K::kRef && !nullable[e.arg])) break;
            }
        }
    }
    std::vector<char> color(num_rules, 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<int32_t, size_t>> path;
    for (size_t start = 0; start < num_rules; ++start) {
        if (color[start]) continue;
        path.push_back({int32_t(start), 0});
        color[start] = 1;
        while (!path.empty()) {
            auto& [r, next] = path.back();
            if (next == first_refs[r].size()) {
                color[r] = 2;
                path.pop_back();
                continue;
            }
            const int32_t s = first_refs[r][next++];
            if (color[s] == 1)
                fail(
                    "grammar: rule '{}' is left-recursive (it can reach itself without "
                    "consuming input, e.g. a repetition of something that may be empty)",
                    g.rule_names[s]);
            if (color[s] == 0) {
                color[s] = 1;
                path.push_back({s, 0});
            }
        }
    }
}

// A grammar whose root can never complete would leave a request with no token to sample.
void check_root_productive(const Grammar& g) {
    using K = Grammar::ElemKind;
    std::vector<char> productive(g.rule_alts.size(), 0);
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < g.rule_alts.size(); ++r) {
            if (productive[r]) continue;
            for (int32_t p : g.rule_alts[r]) {
                bool ok = true;
                for (; g.elems[p].kind != K::kEnd && ok; ++p) {
                    const auto& e = g.elems[p];
                    ok = e.kind == K::kBytesStar ||
                         (e.kind == K::kBytes && g.classes[e.arg].any()) ||
                         (e.kind == K::kRef && productive[e.arg]);
                }
                if (ok) {
                    productive[r] = 1;
                    changed = true;
                    break;
                }
            }
        }
    }
    if (!productive[g.root])
        fail("grammar: matches nothing (rule '{}' can never complete)", g.rule_names[g.root]);
}

std::string class_to_string(const ByteSet& b) {
    if (b.count() == 1) {
        for (int c = 0; c < 256; ++c)
            if (b[c])
                return c >= 0x20 && c < 0x7f && c != '"' && c != '\\'
                           ? fmt::format("\"{}\"", char(c))
                           : fmt::format("[\\x{:02x}]", c);
    }
    std::string s = "[";
    for (int c = 0; c < 256;) {
        if (!b[c]) {
            ++c;
            continue;
        }
        int end = c;
        while (end + 1 < 256 && b[end + 1]) ++end;
        s += fmt::format("\\x{:02x}", c);
        if (end > c) s += fmt::format("-\\x{:02x}", end);
        c = end + 1;
    }
    return s + "]";
}

}  // namespace

ExprPtr bytes_expr(const ByteSet& bytes) {
    Expr e;
    e.kind = Expr::Kind::kBytes;
    e.bytes = bytes;
    return make(std::move(e));
}

ExprPtr byte_range(uint8_t lo, uint8_t hi) {
    ByteSet b;
    for (int c = lo; c <= hi; ++c) b.set(c);
    return bytes_expr(b);
}

ExprPtr literal(std::string_view text) {
    std::vector<ExprPtr> parts;
    for (char c : text) parts.push_back(byte_range(uint8_t(c), uint8_t(c)));
    return parts.size() == 1 ? parts[0] : seq(std::move(parts));
}

ExprPtr seq(std::vector<ExprPtr> children) {
    Expr e;
    e.kind = Expr::Kind::kSeq;
    e.children = std::move(children);
    return make(std::move(e));
}

ExprPtr alt(std::vector<ExprPtr> children) {
    Expr e;
    e.kind = Expr::Kind::kAlt;
    e.children = std::move(children);
    return make(std::move(e));
}

ExprPtr repeat(ExprPtr child, int min, int max) {
    Expr e;
    e.kind = Expr::Kind::kRepeat;
    e.children = {std::move(child)};
    e.min = min;
    e.max = max;
    return make(std::move(e));
}

RepeatCount parse_repeat_count(std::string_view text, size_t& i) {
    const auto digit = [&] { return i < text.size() && std::isdigit(uint8_t(text[i])); };
    if (!digit()) return {0, "expected a number in {m,n}"};
    long v = 0;
    while (digit()) {
        v = v * 10 + (text[i++] - '0');
        if (v > 100000) return {0, "repetition count too large"};
    }
    return {int(v), nullptr};
}

ExprPtr star(ExprPtr child) {
    return repeat(std::move(child), 0, -1);
}
ExprPtr plus(ExprPtr child) {
    return repeat(std::move(child), 1, -1);
}
ExprPtr optional(ExprPtr child) {
    return repeat(std::move(child), 0, 1);
}

ExprPtr ref(std::string rule) {
    Expr e;
    e.kind = Expr::Kind::kRef;
    e.rule = std::move(rule);
    return make(std::move(e));
}

ExprPtr empty_expr() {
    return seq({});
}

void GrammarBuilder::add_rule(const std::string& name, ExprPtr body) {
    if (!rules_.emplace(name, std::move(body)).second)
        fail("grammar: rule '{}' is defined twice", name);
    order_.push_back(name);
}

Grammar GrammarBuilder::build(const std::string& root) const {
    Grammar g = Lowerer(rules_).run(root);
    check_left_recursion(g);
    check_root_productive(g);
    return g;
}

Grammar with_optional_lead(Grammar g, const ByteSet& lead, int max_count) {
    MI_CHECK(max_count >= 0 && max_count <= 8, "lead of {} bytes", max_count);
    using K = Grammar::ElemKind;
    const auto lead_class = int32_t(g.classes.size());
    g.classes.push_back(lead);
    const auto rule = int32_t(g.rule_alts.size());
    g.rule_names.push_back(g.rule_names[size_t(g.root)] + "_lead");
    g.rule_alts.emplace_back();
    for (int count = 0; count <= max_count; ++count) {
        g.rule_alts.back().push_back(int32_t(g.elems.size()));
        for (int i = 0; i < count; ++i) g.elems.push_back({K::kBytes, lead_class});
        g.elems.push_back({K::kRef, g.root});
        g.elems.push_back({K::kEnd, 0});
    }
    g.root = rule;
    return g;
}

std::string Grammar::to_string() const {
    std::string out;
    for (size_t r = 0; r < rule_alts.size(); ++r) {
        out += rule_names[r] + " ::=";
        for (size_t a = 0; a < rule_alts[r].size(); ++a) {
            if (a > 0) out += " |";
            int32_t p = rule_alts[r][a];
            if (elems[p].kind == ElemKind::kEnd) out += " \"\"";
            for (; elems[p].kind != ElemKind::kEnd; ++p) {
                const Elem& e = elems[p];
                out += " ";
                if (e.kind == ElemKind::kRef) {
                    out += rule_names[e.arg];
                } else {
                    out += class_to_string(classes[e.arg]);
                    if (e.kind == ElemKind::kBytesStar) out += "*";
                }
            }
        }
        out += "\n";
    }
    return out;
}

}  // namespace miniinfer::structured
