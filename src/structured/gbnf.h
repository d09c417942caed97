// User grammars in GBNF, the notation of llama.cpp (grammars/README.md there):
//
//   root   ::= object                      # the start rule is `root`
//   object ::= "{" pair ("," pair)* "}"
//   pair   ::= [a-z]+ ":" ("true" | "false" | [0-9]{1,3})
//
// Rules are `name ::= alternatives`; names are letters, digits, '-' and '_'. Terminals are
// strings "..." and classes [a-z] [^"\\] of Unicode characters (escapes \n \t \r \\ \" \]
// \xHH \uHHHH \UHHHHHHHH), `.` is any character; `( )` groups; `* + ? {m} {m,} {m,n}` repeat.
// `#` starts a comment. A rule may span lines; the next `name ::=` starts the next rule.
// Errors (miniinfer::Error) give the line and what is wrong; a missing `root`, an undefined
// rule or left recursion too (grammar.h).
#pragma once

#include <string_view>

#include "structured/grammar.h"

namespace miniinfer::structured {

Grammar parse_gbnf(std::string_view text);

}  // namespace miniinfer::structured
