// miniinfer tokenize | detokenize | chat-template --model DIR: JSON lines on stdin, one JSON
// object per input line on stdout. A bad line gets {"error": "..."} and the exit status is 1
// once all lines are done; other lines are unaffected.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "apps/commands.h"
#include "apps/engine_options.h"
#include "core/json.h"
#include "loader/hub.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace miniinfer::apps {
namespace {

using OrderedJson = nlohmann::ordered_json;

struct TokenizeOptions {
    std::string model_dir;
    std::string revision = "main";
    bool add_special_tokens = false;
    bool no_parse_special = false;
    bool skip_special_tokens = false;
};

// Runs `handle` on each non-empty stdin line parsed as a JSON object; prints its result.
void for_each_line(const std::function<OrderedJson(const OrderedJson&)>& handle) {
    std::string line;
    int line_idx = 0, failures = 0;
    while (std::getline(std::cin, line)) {
        ++line_idx;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        OrderedJson out;
        try {
            OrderedJson in = parse_untrusted_json<OrderedJson>(line, "the line");
            if (!in.is_object()) fail("expected a JSON object");
            out = handle(in);
        } catch (const std::exception& e) {  // Error or a JSON parse/type error
            out = {{"error", fmt::format("line {}: {}", line_idx, e.what())}};
            ++failures;
        }
        std::printf("%s\n",
                    out.dump(-1, ' ', false, OrderedJson::error_handler_t::replace).c_str());
        std::fflush(stdout);
    }
    if (failures) fail("{} of {} input lines failed", failures, line_idx);
}

void add_tokenize(CLI::App& app) {
    auto opts = std::make_shared<TokenizeOptions>();
    CLI::App* cmd = app.add_subcommand(
        "tokenize", R"(Encode text: stdin {"text": ...} lines -> {"ids": [...]})");
    cmd->footer(
        R"(Example: echo '{"text": "Hello"}' | miniinfer tokenize --model ~/models/Qwen3-0.6B)");
    add_model_option(*cmd, opts->model_dir, opts->revision);
    cmd->add_flag("--add-special-tokens", opts->add_special_tokens,
                  "Add the post-processor's special tokens");
    cmd->add_flag("--no-parse-special", opts->no_parse_special,
                  "Encode special-token text as plain text");
    cmd->callback([opts] {
        const Tokenizer tok =
            Tokenizer::load(hub::resolve_model(opts->model_dir, opts->revision).string());
        const EncodeOptions enc{.add_special_tokens = opts->add_special_tokens,
                                .parse_special = !opts->no_parse_special};
        for_each_line([&](const OrderedJson& in) {
            return OrderedJson{
                {"ids", tok.encode(json_get<std::string>(in, "text", "input"), enc)}};
        });
    });
}

void add_detokenize(CLI::App& app) {
    auto opts = std::make_shared<TokenizeOptions>();
    CLI::App* cmd = app.add_subcommand(
        "detokenize", R"(Decode ids: stdin {"ids": [...]} lines -> {"text": ...})");
    cmd->footer(
        R"(Example: echo '{"ids": [9707]}' | miniinfer detokenize --model ~/models/Qwen3-0.6B)");
    add_model_option(*cmd, opts->model_dir, opts->revision);
    cmd->add_flag("--skip-special-tokens", opts->skip_special_tokens,
                  "Leave special tokens out of the text");
    cmd->callback([opts] {
        const Tokenizer tok =
            Tokenizer::load(hub::resolve_model(opts->model_dir, opts->revision).string());
        for_each_line([&](const OrderedJson& in) {
            return OrderedJson{
                {"text", tok.decode(json_get<std::vector<int32_t>>(in, "ids", "input"),
                                    opts->skip_special_tokens)}};
        });
    });
}

void add_chat_template(CLI::App& app) {
    auto opts = std::make_shared<TokenizeOptions>();
    CLI::App* cmd = app.add_subcommand(
        "chat-template",
        R"(Render the chat template: stdin {"messages", "tools", "add_generation_prompt", "kwargs"} -> {"text"})");
    cmd->footer(
        R"(Example: echo '{"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": true}' | miniinfer chat-template --model ~/models/Qwen3-0.6B)");
    add_model_option(*cmd, opts->model_dir, opts->revision);
    cmd->callback([opts] {
        const ChatTemplate chat =
            ChatTemplate::load(hub::resolve_model(opts->model_dir, opts->revision).string());
        for_each_line([&](const OrderedJson& in) {
            const bool add_generation_prompt = in.value("add_generation_prompt", false);
            const std::string text = chat.render(
                json_get<OrderedJson>(in, "messages", "input"), in.value("tools", OrderedJson()),
                add_generation_prompt, in.value("kwargs", OrderedJson::object()));
            return OrderedJson{{"text", text}};
        });
    });
}

}  // namespace

void add_tokenizer_commands(CLI::App& app) {
    add_tokenize(app);
    add_detokenize(app);
    add_chat_template(app);
}

}  // namespace miniinfer::apps
