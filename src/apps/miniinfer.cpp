// The `miniinfer` command line. Each subcommand lives in its own file (cmd_*.cpp) and
// registers itself here; errors from user input, usage errors included, print one line and
// exit 1.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <cstdio>

#include "apps/commands.h"
#include "core/check.h"
#include "core/logging.h"

namespace {

// The commands `miniinfer NAME` runs, for an error message (the hidden ones left out).
std::string command_names(CLI::App& app) {
    std::string names;
    for (const CLI::App* cmd :
         app.get_subcommands([](CLI::App* c) { return !c->get_group().empty(); }))
        names += (names.empty() ? "" : ", ") + cmd->get_name();
    return names;
}

// A usage error as one line and exit status 1 (README): CLI11's message names the option or
// argument, and the command whose --help lists them is named after it. --help and --version
// (CLI11's exit code 0) print as CLI11 prints them.
int usage_error(CLI::App& app, const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::string command = "miniinfer";
    for (CLI::App* cmd = &app; !cmd->get_subcommands().empty();) {
        cmd = cmd->get_subcommands().front();
        command += " " + cmd->get_name();
    }
    std::string message = e.what();
    if (command == "miniinfer" && dynamic_cast<const CLI::RequiredError*>(&e) != nullptr)
        message = fmt::format("no command given (commands: {})", command_names(app));
    std::replace(message.begin(), message.end(), '\n', ' ');
    std::fprintf(stderr, "error: %s (see '%s --help')\n", message.c_str(), command.c_str());
    return 1;
}

// The first argument names the command (--help and --version aside): an unknown name, or an
// option before any command, would otherwise be reported by CLI11 as a missing command.
std::optional<std::string> command_error(CLI::App& app, const std::vector<std::string>& args) {
    for (const std::string& a : args) {
        if (a == "--help" || a == "-h" || a == "--version") continue;
        if (a.starts_with("-"))
            return fmt::format("unknown option '{}' (a command comes first: {})", a,
                               command_names(app));
        for (const CLI::App* cmd : app.get_subcommands([](CLI::App*) { return true; }))
            if (cmd->check_name(a)) return std::nullopt;
        return fmt::format("unknown command '{}' (commands: {})", a, command_names(app));
    }
    return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
    miniinfer::init_logging();
    CLI::App app{"MiniInfer: a small, fast LLM inference engine for Qwen2, Qwen3 and Qwen3-MoE"};
    miniinfer::apps::add_all_commands(app);
    // vLLM's two-letter short option, which CLI11 cannot declare: -tp N is --tensor-parallel-size
    // N.
    std::vector<std::string> args(argv + 1, argv + argc);
    for (std::string& a : args)
        if (a == "-tp")
            a = "--tensor-parallel-size";
        else if (a.rfind("-tp=", 0) == 0)
            a = "--tensor-parallel-size=" + a.substr(4);
    if (const std::optional<std::string> message = command_error(app, args)) {
        std::fprintf(stderr, "error: %s (see 'miniinfer --help')\n", message->c_str());
        return 1;
    }
    std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last first
    try {
        app.parse(args);
    } catch (const CLI::ParseError& e) {
        return usage_error(app, e);
    } catch (const miniinfer::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
