// JSON Schema → grammar, for the subset OpenAI's structured outputs document: objects with
// required and optional properties and additionalProperties, arrays (items, prefixItems,
// minItems, maxItems), enum, const, anyOf / oneOf (both as "any of"), allOf of one schema,
// $ref into $defs / definitions / "#" (recursion allowed), strings (minLength, maxLength,
// pattern, format: date, time, date-time, uuid, email, ipv4, hostname, uri), integers with
// minimum / maximum / exclusive bounds, numbers with integer inclusive bounds, boolean, null,
// type lists and `nullable`.
//
// Output policy (documented for users in the README):
//   - Compact JSON: no whitespace anywhere ({"a":1,"b":[1,2]}), so a generation cannot stall
//     in whitespace and the same document has one spelling.
//   - Properties in the schema's order; optional ones may be left out.
//   - additionalProperties absent means false (as OpenAI's strict mode and xgrammar's default
//     strict mode); true or a schema allows extra keys after the listed ones.
//   - `pattern` matches the whole string (anchors are implied); `"` and `\` and control
//     characters in a pattern's matches are written escaped.
// Anything else a schema says is an Error naming the keyword and where it is ("unsupported
// JSON Schema keyword 'uniqueItems' at #/properties/tags"); annotations (title, description,
// default, examples, $schema, $id, $comment, deprecated, readOnly, writeOnly) are allowed.
#pragma once

#include <string_view>

#include "structured/grammar.h"

namespace miniinfer::structured {

// With prefix and suffix: the document between those texts (a tool call's tags).
Grammar json_schema_grammar(std::string_view schema_json, std::string_view prefix = "",
                            std::string_view suffix = "");
// Any JSON value, compact (response_format json_object).
Grammar any_json_grammar();

}  // namespace miniinfer::structured
