// Jinja's filters and tests, and the methods templates call on str, dict and list values
// (Python's semantics), for the interpreter.
#pragma once

#include <optional>
#include <string>

#include "tokenizer/jinja/value.h"

namespace miniinfer::jinja {

// Applies filter `name` (builtins.cpp); args.positional excludes the filtered value. Throws
// Error for unknown filters or bad arguments.
Value apply_filter(const std::string& name, const Value& value, const Args& args);

// Runs test `name` (defined, none, string, equalto, ...). Throws Error for unknown tests.
bool apply_test(const std::string& name, const Value& value, const Args& args);

// The items a for loop or filter visits: a list's items, a dict's keys, a string's
// characters; nothing for undefined. Throws Error for other kinds.
List to_list(const Value& v);

// The i-th positional or the named argument; Error naming `fn` when absent.
Value required_arg(const Args& args, size_t i, const char* name, const char* fn);

// A bound method (methods.cpp) such as "abc".startswith or dict.items; nullopt when `obj` has no
// method `name` (the caller then falls back to item lookup).
std::optional<Value> get_method(const Value& obj, const std::string& name);

}  // namespace miniinfer::jinja
