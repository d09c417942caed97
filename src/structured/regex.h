// Regular expressions → grammar. The syntax is the common subset of JavaScript, Python and
// JSON Schema `pattern`: literals, `.`, classes `[a-z]` `[^...]`, escapes `\d \w \s \D \W \S
// \n \t \r \f \v \xHH \uHHHH \u{H...}`, groups `( )` `(?: )` `(?<name> )` `(?P<name> )`,
// alternation, quantifiers `* + ? {m} {m,} {m,n}` (a lazy `?` after them changes nothing
// when the whole text must match). The pattern matches the whole text: `^` at the start and
// `$` at the end are accepted and redundant. Backreferences, lookaround, word boundaries,
// anchors elsewhere and inline flags are errors naming the construct.
#pragma once

#include <string_view>

#include "structured/grammar.h"

namespace miniinfer::structured {

// json_string: characters as written inside a JSON string literal (`"` as \", `\` as \\,
// control characters as \n, \t, ... or \u00XX), for a JSON Schema `pattern`.
ExprPtr regex_to_expr(std::string_view pattern, bool json_string = false);
Grammar regex_grammar(std::string_view pattern);

}  // namespace miniinfer::structured
