// The parsed form of a Jinja template: expressions and statement nodes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace miniinfer::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
    enum Kind {
        kLiteral,  // literal
        kName,     // name
        kList,     // children: items (tuples are lists too)
        kDict,     // children: key, value, key, value, ...
        kGetAttr,  // children[0].name
        kGetItem,  // children[0][children[1]]
        kSlice,    // children[0][children[1]:children[2]:children[3]] (null parts allowed)
        kCall,  // children[0](children[1..]); arg_names[i] names children[i + 1] ("" = positional)
        kFilter,  // children[0] | name(children[1..])
        kTest,    // children[0] is [not] name(children[1..])
        kUnary,   // name ("not", "-", "+") children[0]
        kBinary,  // children[0] name children[1]; name is the operator ("and", "in", "not in", ...)
        kCond,    // children[0] if children[1] else children[2] (children[2] may be null)
    } kind = kLiteral;
    int line = 0;
    Value literal;
    std::string name;
    std::vector<ExprPtr> children;
    std::vector<std::string> arg_names;
    bool negated = false;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
    enum Kind {
        kText,    // text
        kOutput,  // {{ expr }}
        kIf,      // branches: (cond, body); a null cond is the else branch
        kFor,     // for targets in expr [if filter] body [else else_body]
        kSet,     // set targets = expr, or set targets[0].attr = expr, or a block set (body)
        kMacro,   // macro name(params) body
        kBreak,
        kContinue,
        kScope,  // a body rendered in place (the {% generation %} block)
    } kind = kText;
    int line = 0;
    std::string text;
    ExprPtr expr;
    ExprPtr filter;
    std::vector<std::pair<ExprPtr, Body>> branches;
    std::vector<std::string> targets;
    std::string attr;                                     // kSet into a namespace attribute
    std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro: name and default (may be null)
    Body body, else_body;
};

}  // namespace miniinfer::jinja
