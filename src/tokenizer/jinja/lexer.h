// Splits Jinja template source into text and tag tokens, applying whitespace control the way
// Hugging Face configures Jinja: trim_blocks (drop the newline after a block or comment tag)
// and lstrip_blocks (drop spaces and tabs before a block or comment tag that starts a line),
// plus explicit {%- -%} / {{- -}} / {#- -#} trimming and {%+ / +%} opt-outs.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace miniinfer::jinja {

struct Token {
    enum Kind {
        kText,       // literal output (value)
        kExprOpen,   // {{
        kExprClose,  // }}
        kStmtOpen,   // {%
        kStmtClose,  // %}
        kName,       // identifier or keyword (value)
        kString,     // string literal, escapes resolved (value)
        kInt,        // integer literal (value holds the digits)
        kFloat,      // float literal (value holds the text)
        kOp,  // operator or punctuation (value): + - * / // % ** ~ == != < > <= >= = ( ) [ ] { } ,
              // . : |
        kEnd,
    } kind;
    std::string value;
    int line;
};

// Throws miniinfer::Error ("chat template: line N: ...") on unterminated tags or strings.
std::vector<Token> lex(std::string_view source);

}  // namespace miniinfer::jinja
