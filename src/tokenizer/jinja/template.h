// A Jinja template as Hugging Face renders chat templates: trim_blocks and lstrip_blocks on,
// undefined variables print as "" but fail on attribute access, loop controls enabled, and
// the globals raise_exception, namespace, range, dict and strftime_now.
//
//   auto t = jinja::Template::parse(source);           // Error on syntax errors
//   std::string s = t.render(context);                 // Error on template errors
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "tokenizer/jinja/ast.h"

namespace miniinfer::jinja {

class Template {
  public:
    static Template parse(std::string_view source);

    // `context` is a dict of top-level variables. Throws miniinfer::Error with the template
    // line for runtime errors, including raise_exception("...") from the template itself.
    std::string render(const Dict& context) const;

  private:
    std::shared_ptr<const Body> body_;
};

}  // namespace miniinfer::jinja
