// miniinfer chat --model DIR: an interactive conversation that streams the reply as it is
// generated. Lines typed are user messages; "/reset" forgets the conversation, "/exit" (or
// end of input) quits.
#include <cstdio>
#include <iostream>

#include "apps/commands.h"
#include "apps/engine_options.h"
#include "engine/llm_engine.h"
#include "tokenizer/chat_template.h"

namespace miniinfer::apps {
namespace {

struct ChatOptions {
    EngineOptions engine;
    std::string system;
    bool no_thinking = false;
};

void run(const ChatOptions& o, const Json& sampling_flags) {
    const EngineConfig config = o.engine.resolve();
    if (run_as_worker_node(config)) return;
    LLMEngine engine(config);
    ChatTemplate chat = ChatTemplate::load(config.model_dir);
    SamplingParams params = SamplingParams::from_json(sampling_flags, engine.default_params());
    const Json kwargs = o.no_thinking ? Json{{"enable_thinking", false}} : Json::object();
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    auto reset = [&] {
        messages = nlohmann::ordered_json::array();
        if (!o.system.empty()) messages.push_back({{"role", "system"}, {"content", o.system}});
    };
    reset();
    std::string line;
    while (std::fprintf(stdout, "> "), std::fflush(stdout), std::getline(std::cin, line)) {
        if (line == "/exit") break;
        if (line == "/reset") {
            reset();
            continue;
        }
        if (line.empty()) continue;
        messages.push_back({{"role", "user"}, {"content", line}});
        std::string reply;
        try {
            engine.add_request(Prompt::from_text(chat.render(messages, nullptr, true, kwargs)),
                               params);
            while (engine.has_unfinished())
                for (const RequestOutput& out : engine.step()) {
                    std::fputs(out.delta_text.c_str(), stdout);
                    std::fflush(stdout);
                    if (out.finished) reply = out.text;
                }
            std::fputs("\n", stdout);
            messages.push_back({{"role", "assistant"}, {"content", reply}});
        } catch (const Error& e) {  // e.g. the conversation outgrew max_model_len
            std::fprintf(stderr, "error: %s\n", e.what());
            messages.erase(messages.end() - 1);
        }
    }
}

}  // namespace

void add_chat(CLI::App& app) {
    auto opts = std::make_shared<ChatOptions>();
    CLI::App* cmd =
        app.add_subcommand("chat", "Chat interactively with a model, streaming its replies");
    cmd->footer("Example: miniinfer chat --model ~/models/Qwen3-0.6B --device cuda --no-thinking");
    add_engine_options(*cmd, opts->engine);
    cmd->add_option("--system", opts->system, "A system message to start the conversation with");
    cmd->add_flag("--no-thinking", opts->no_thinking,
                  "Chat template kwarg enable_thinking=false (Qwen3)");
    auto sampling = add_sampling_options(*cmd, kChatMaxTokens);
    cmd->callback([opts, sampling] { run(*opts, *sampling); });
}

}  // namespace miniinfer::apps
