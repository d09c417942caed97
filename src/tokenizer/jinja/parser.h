// Parses Jinja source into a tree of nodes. Statements: if/elif/else, for (with loop filter,
// else, break/continue), set (plain, namespace attribute, tuple unpacking, block), macro,
// generation. Expressions: Jinja's operator precedence, filters, tests, calls with keyword
// arguments, attribute and item access, slices, list/tuple/dict literals, conditionals.
#pragma once

#include <string_view>

#include "tokenizer/jinja/ast.h"

namespace miniinfer::jinja {

// Throws miniinfer::Error ("chat template: line N: ...") on syntax errors and on statements
// this interpreter does not implement.
Body parse(std::string_view source);

}  // namespace miniinfer::jinja
