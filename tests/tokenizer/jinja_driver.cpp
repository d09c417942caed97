// Renders Jinja templates for tools/fuzz_jinja.py: one JSON object {"template", "context"}
// per stdin line in, one {"text"} or {"error"} per line out.
#include <iostream>
#include <string>

#include "tokenizer/jinja/template.h"

int main() {
    std::string line;
    while (std::getline(std::cin, line)) {
        nlohmann::ordered_json out;
        try {
            const auto in = nlohmann::ordered_json::parse(line);
            const auto context = miniinfer::jinja::Value::from_json(in.at("context"));
            out["text"] = miniinfer::jinja::Template::parse(in.at("template").get<std::string>())
                              .render(context.as_dict());
        } catch (const std::exception& e) {
            out["error"] = e.what();
        }
        std::cout << out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)
                  << "\n";
    }
    return 0;
}
