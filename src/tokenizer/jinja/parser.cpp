#include "tokenizer/jinja/parser.h"

#include <charconv>
#include <cstdlib>

#include "core/check.h"
#include "tokenizer/jinja/lexer.h"

namespace miniinfer::jinja {
namespace {

class Parser {
  public:
    explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

    Body parse_template() {
        std::string stopped_at;
        Body body = parse_body({}, stopped_at);
        if (peek().kind != Token::kEnd) error("unexpected tag");
        return body;
    }

  private:
    const Token& peek(size_t ahead = 0) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
    const Token& next() { return t_[std::min(i_++, t_.size() - 1)]; }
    [[noreturn]] void error(const std::string& msg) const {
        fail("chat template: line {}: {}", peek().line, msg);
    }
    bool is_op(const char* op, size_t ahead = 0) const {
        return peek(ahead).kind == Token::kOp && peek(ahead).value == op;
    }
    bool is_name(const char* name, size_t ahead = 0) const {
        return peek(ahead).kind == Token::kName && peek(ahead).value == name;
    }
    bool accept_op(const char* op) { return is_op(op) ? (++i_, true) : false; }
    bool accept_name(const char* name) { return is_name(name) ? (++i_, true) : false; }
    void expect_op(const char* op) {
        if (!accept_op(op)) error(fmt::format("expected '{}'", op));
    }
    std::string expect_name() {
        if (peek().kind != Token::kName) error("expected a name");
        return next().value;
    }
    void expect_stmt_close() {
        if (next().kind != Token::kStmtClose) error("expected '%}'");
    }

    // Parses nodes until a {% tag %} whose keyword is in `stops` (consumed up to the keyword;
    // returned in stopped_at) or the end of input.
    Body parse_body(const std::vector<std::string>& stops, std::string& stopped_at) {
        Body body;
        for (;;) {
            const Token& tok = peek();
            if (tok.kind == Token::kEnd) {
                if (!stops.empty()) error(fmt::format("missing '{{% {} %}}'", stops.back()));
                return body;
            }
            if (tok.kind == Token::kText) {
                auto n = std::make_unique<Node>();
                n->text = next().value;
                body.push_back(std::move(n));
            } else if (tok.kind == Token::kExprOpen) {
                auto n = std::make_unique<Node>();
                n->kind = Node::kOutput;
                n->line = next().line;
                n->expr = parse_expression();
                if (next().kind != Token::kExprClose) error("expected '}}'");
                body.push_back(std::move(n));
            } else if (tok.kind == Token::kStmtOpen) {
                const std::string& keyword = peek(1).value;
                for (const std::string& s : stops) {
                    if (peek(1).kind == Token::kName && keyword == s) {
                        i_ += 2;
                        stopped_at = s;
                        return body;
                    }
                }
                ++i_;
                body.push_back(parse_statement());
            } else {
                error("unexpected token");
            }
        }
    }

    NodePtr parse_statement() {
        const int line = peek().line;
        const std::string keyword = expect_name();
        auto n = std::make_unique<Node>();
        n->line = line;
        std::string stop;
        if (keyword == "if") {
            n->kind = Node::kIf;
            ExprPtr cond = parse_expression();
            expect_stmt_close();
            for (;;) {
                Body body = parse_body({"elif", "else", "endif"}, stop);
                n->branches.emplace_back(std::move(cond), std::move(body));
                if (stop == "endif") break;
                if (stop == "else") {
                    expect_stmt_close();
                    n->branches.emplace_back(nullptr, parse_body({"endif"}, stop));
                    break;
                }
                cond = parse_expression();
                expect_stmt_close();
            }
        } else if (keyword == "for") {
            n->kind = Node::kFor;
            do n->targets.push_back(expect_name());
            while (accept_op(","));
            if (!accept_name("in")) error("expected 'in'");
            n->expr = parse_expression(/*allow_cond=*/false);
            if (accept_name("if")) n->filter = parse_expression(false);
            if (is_name("recursive")) error("recursive loops are not supported");
            expect_stmt_close();
            n->body = parse_body({"else", "endfor"}, stop);
            if (stop == "else") {
                expect_stmt_close();
                n->else_body = parse_body({"endfor"}, stop);
            }
        } else if (keyword == "set") {
            n->kind = Node::kSet;
            n->targets.push_back(expect_name());
            if (accept_op(".")) n->attr = expect_name();
            while (n->attr.empty() && accept_op(",")) n->targets.push_back(expect_name());
            if (accept_op("=")) {
                n->expr = parse_tuple_or_expression();
            } else {
                if (n->targets.size() != 1 || !n->attr.empty()) error("block set takes one name");
                expect_stmt_close();
                n->body = parse_body({"endset"}, stop);
            }
        } else if (keyword == "macro") {
            n->kind = Node::kMacro;
            n->text = expect_name();
            expect_op("(");
            while (!accept_op(")")) {
                std::string param = expect_name();
                ExprPtr def;
                if (accept_op("=")) def = parse_expression();
                n->params.emplace_back(std::move(param), std::move(def));
                if (!is_op(")")) expect_op(",");
            }
            expect_stmt_close();
            n->body = parse_body({"endmacro"}, stop);
        } else if (keyword == "break" || keyword == "continue") {
            n->kind = keyword == "break" ? Node::kBreak : Node::kContinue;
        } else if (keyword == "generation") {
            n->kind = Node::kScope;
            expect_stmt_close();
            n->body = parse_body({"endgeneration"}, stop);
        } else {
            error(fmt::format("unsupported statement '{}'", keyword));
        }
        expect_stmt_close();
        return n;
    }

    int64_t parse_int(const std::string& digits) const {
        int64_t v = 0;
        auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
        if (ec != std::errc() || end != digits.data() + digits.size())
            error(fmt::format("integer literal {} is out of range", digits));
        return v;
    }

    static ExprPtr make(Expr::Kind kind, int line, std::string name = {}) {
        auto e = std::make_unique<Expr>();
        e->kind = kind, e->line = line, e->name = std::move(name);
        return e;
    }

    // `a, b` at the top of a set statement is a tuple.
    ExprPtr parse_tuple_or_expression() {
        ExprPtr first = parse_expression();
        if (!is_op(",")) return first;
        auto list = make(Expr::kList, first->line);
        list->children.push_back(std::move(first));
        while (accept_op(",")) list->children.push_back(parse_expression());
        return list;
    }

    ExprPtr parse_expression(bool allow_cond = true) {
        ExprPtr e = parse_or();
        while (allow_cond && is_name("if")) {
            ++i_;
            auto cond = make(Expr::kCond, e->line);
            cond->children.push_back(std::move(e));
            cond->children.push_back(parse_or());
            cond->children.push_back(accept_name("else") ? parse_expression() : nullptr);
            e = std::move(cond);
        }
        return e;
    }

    ExprPtr binary(ExprPtr lhs, std::string op, ExprPtr rhs) {
        auto e = make(Expr::kBinary, lhs->line, std::move(op));
        e->children.push_back(std::move(lhs));
        e->children.push_back(std::move(rhs));
        return e;
    }

    ExprPtr parse_or() {
        ExprPtr e = parse_and();
        while (accept_name("or")) e = binary(std::move(e), "or", parse_and());
        return e;
    }
    ExprPtr parse_and() {
        ExprPtr e = parse_not();
        while (accept_name("and")) e = binary(std::move(e), "and", parse_not());
        return e;
    }
    ExprPtr parse_not() {
        if (!is_name("not")) return parse_compare();
        auto e = make(Expr::kUnary, next().line, "not");
        e->children.push_back(parse_not());
        return e;
    }
    ExprPtr parse_compare() {
        ExprPtr e = parse_math1();
        for (;;) {
            static const char* ops[] = {"==", "!=", "<", ">", "<=", ">="};
            bool matched = false;
            for (const char* op : ops) {
                if (accept_op(op)) {
                    e = binary(std::move(e), op, parse_math1());
                    matched = true;
                    break;
                }
            }
            if (matched) continue;
            if (accept_name("in"))
                e = binary(std::move(e), "in", parse_math1());
            else if (is_name("not") && is_name("in", 1))
                i_ += 2, e = binary(std::move(e), "not in", parse_math1());
            else
                return e;
        }
    }
    ExprPtr parse_math1() {
        ExprPtr e = parse_concat();
        while (is_op("+") || is_op("-")) {
            std::string op = next().value;
            e = binary(std::move(e), op, parse_concat());
        }
        return e;
    }
    ExprPtr parse_concat() {
        ExprPtr e = parse_math2();
        while (accept_op("~")) e = binary(std::move(e), "~", parse_math2());
        return e;
    }
    ExprPtr parse_math2() {
        ExprPtr e = parse_pow();
        while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
            std::string op = next().value;
            e = binary(std::move(e), op, parse_pow());
        }
        return e;
    }
    ExprPtr parse_pow() {
        ExprPtr e = parse_unary(true);
        while (accept_op("**")) e = binary(std::move(e), "**", parse_unary(true));
        return e;
    }
    ExprPtr parse_unary(bool with_filter) {
        ExprPtr e;
        if (is_op("-") || is_op("+")) {
            e = make(Expr::kUnary, peek().line, next().value);
            e->children.push_back(parse_unary(false));
        } else {
            e = parse_primary();
        }
        e = parse_postfix(std::move(e));
        return with_filter ? parse_filters(std::move(e)) : std::move(e);
    }

    ExprPtr parse_primary() {
        const Token& tok = next();
        if (tok.kind == Token::kName) {
            const std::string& n = tok.value;
            if (n == "true" || n == "True") return literal(true, tok.line);
            if (n == "false" || n == "False") return literal(false, tok.line);
            if (n == "none" || n == "None") return literal(nullptr, tok.line);
            return make(Expr::kName, tok.line, n);
        }
        if (tok.kind == Token::kString) {
            std::string s = tok.value;
            while (peek().kind == Token::kString) s += next().value;  // adjacent literals join
            return literal(std::move(s), tok.line);
        }
        if (tok.kind == Token::kInt) return literal(parse_int(tok.value), tok.line);
        if (tok.kind == Token::kFloat)
            return literal(std::strtod(tok.value.c_str(), nullptr), tok.line);
        if (tok.kind == Token::kOp && tok.value == "(") {
            if (accept_op(")")) return make(Expr::kList, tok.line, "tuple");
            ExprPtr e = parse_expression();
            if (accept_op(",")) {  // a tuple
                auto list = make(Expr::kList, tok.line, "tuple");
                list->children.push_back(std::move(e));
                while (!is_op(")")) {
                    list->children.push_back(parse_expression());
                    if (!accept_op(",")) break;
                }
                e = std::move(list);
            }
            expect_op(")");
            return e;
        }
        if (tok.kind == Token::kOp && tok.value == "[") {
            auto list = make(Expr::kList, tok.line);
            while (!accept_op("]")) {
                list->children.push_back(parse_expression());
                if (!is_op("]")) expect_op(",");
            }
            return list;
        }
        if (tok.kind == Token::kOp && tok.value == "{") {
            auto dict = make(Expr::kDict, tok.line);
            while (!accept_op("}")) {
                dict->children.push_back(parse_expression());
                expect_op(":");
                dict->children.push_back(parse_expression());
                if (!is_op("}")) expect_op(",");
            }
            return dict;
        }
        --i_;
        error(fmt::format("unexpected '{}'", tok.value.empty() ? "end of tag" : tok.value));
    }

    static ExprPtr literal(Value v, int line) {
        auto e = make(Expr::kLiteral, line);
        e->literal = std::move(v);
        return e;
    }

    ExprPtr parse_postfix(ExprPtr e) {
        for (;;) {
            if (accept_op(".")) {
                auto g = make(Expr::kGetAttr, e->line);
                if (peek().kind == Token::kInt) {  // foo.0 is foo[0]
                    g->kind = Expr::kGetItem;
                    g->children.push_back(std::move(e));
                    g->children.push_back(literal(parse_int(next().value), g->line));
                } else {
                    g->name = expect_name();
                    g->children.push_back(std::move(e));
                }
                e = std::move(g);
            } else if (accept_op("[")) {
                e = parse_subscript(std::move(e));
            } else if (is_op("(")) {
                e = parse_call(std::move(e));
            } else {
                return e;
            }
        }
    }

    ExprPtr parse_subscript(ExprPtr obj) {
        ExprPtr parts[3];
        bool is_slice = false;
        for (int k = 0; k < 3; ++k) {
            if (!is_op(":") && !is_op("]")) parts[k] = parse_expression();
            if (k < 2 && accept_op(":"))
                is_slice = true;
            else
                break;
        }
        expect_op("]");
        auto e = make(is_slice ? Expr::kSlice : Expr::kGetItem, obj->line);
        e->children.push_back(std::move(obj));
        if (!is_slice && !parts[0]) error("empty subscript");
        for (int k = 0; k < (is_slice ? 3 : 1); ++k) e->children.push_back(std::move(parts[k]));
        return e;
    }

    // Parses "(args)" into e's children after the first, with names for keyword arguments.
    void parse_args(Expr& e) {
        expect_op("(");
        while (!accept_op(")")) {
            std::string name;
            if (peek().kind == Token::kName && is_op("=", 1)) {
                name = next().value;
                ++i_;
            }
            e.arg_names.push_back(name);
            e.children.push_back(parse_expression());
            if (!is_op(")")) expect_op(",");
        }
    }

    ExprPtr parse_call(ExprPtr callee) {
        auto e = make(Expr::kCall, callee->line);
        e->children.push_back(std::move(callee));
        parse_args(*e);
        return e;
    }

    ExprPtr parse_filters(ExprPtr e) {
        for (;;) {
            if (accept_op("|")) {
                auto f = make(Expr::kFilter, e->line, expect_name());
                f->children.push_back(std::move(e));
                if (is_op("(")) parse_args(*f);
                e = std::move(f);
            } else if (accept_name("is")) {
                auto t = make(Expr::kTest, e->line);
                t->negated = accept_name("not");
                t->name = expect_name();
                t->children.push_back(std::move(e));
                if (is_op("(")) {
                    parse_args(*t);
                } else if ((peek().kind == Token::kString || peek().kind == Token::kInt ||
                            peek().kind == Token::kFloat || is_op("[") || is_op("{") ||
                            (peek().kind == Token::kName && !is_name("else") && !is_name("or") &&
                             !is_name("and") && !is_name("if")))) {
                    // `x is divisibleby 3`, `x is sameas false`: one argument, no parentheses
                    t->arg_names.emplace_back();
                    t->children.push_back(parse_postfix(parse_primary()));
                }
                e = std::move(t);
            } else if (is_op("(")) {
                e = parse_call(std::move(e));
            } else {
                return e;
            }
        }
    }

    std::vector<Token> t_;
    size_t i_ = 0;
};

}  // namespace

Body parse(std::string_view source) {
    return Parser(lex(source)).parse_template();
}

}  // namespace miniinfer::jinja
