// The defaults the CLI's --help states, against the code's: every engine option's is
// EngineConfig's, and those decided outside the option's own field (--max-tokens per command,
// --temperature's fallback, the step token budget) are the values the code applies. An option
// whose help mentions a default in its text must be one this test checks.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <set>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "config/engine_config.h"
#include "config/model_config.h"
#include "config/sampling_params.h"

using namespace miniinfer;

namespace {

// Every command of the CLI, subcommands (bench serve) included.
std::vector<CLI::App*> all_commands(CLI::App* app) {
    std::vector<CLI::App*> found;
    for (CLI::App* cmd : app->get_subcommands([](CLI::App*) { return true; })) {
        found.push_back(cmd);
        for (CLI::App* sub : all_commands(cmd)) found.push_back(sub);
    }
    return found;
}

struct Cli {
    CLI::App app;
    Cli() { apps::add_all_commands(app); }
    const CLI::Option* option(const std::string& command, const std::string& flag) {
        return app.get_subcommand(command)->get_option(flag);
    }
};

}  // namespace

TEST(CliOptions, EngineOptionDefaultsAreEngineConfigs) {
    Cli cli;
    const Json defaults = EngineConfig{}.to_json();
    int checked = 0;
    for (CLI::App* cmd : all_commands(&cli.app)) {
        if (cmd->get_option_no_throw("--device") == nullptr) continue;  // not an engine command
        for (const auto& [key, value] : defaults.items()) {
            std::string flag = "--" + key;
            std::replace(flag.begin(), flag.end(), '_', '-');
            const CLI::Option* opt = cmd->get_option_no_throw(flag);
            if (opt == nullptr || opt->get_default_str().empty()) continue;
            SCOPED_TRACE(cmd->get_name() + " " + flag);
            if (value.is_string())
                EXPECT_EQ(opt->get_default_str(), value.get<std::string>());
            else
                EXPECT_DOUBLE_EQ(std::stod(opt->get_default_str()), value.get<double>());
            ++checked;
        }
    }
    EXPECT_GE(checked, 4 * 15);  // generate, chat, bench, serve: most of EngineConfig each
}

TEST(CliOptions, MaxTokensDefaultIsWhatEachCommandApplies) {
    Cli cli;
    EXPECT_EQ(cli.option("generate", "--max-tokens")->get_default_str(),
              std::to_string(SamplingParams{}.max_tokens));
    EXPECT_EQ(cli.option("chat", "--max-tokens")->get_default_str(),
              std::to_string(apps::kChatMaxTokens));
    for (const char* command : {"generate", "chat"})
        EXPECT_NE(cli.option(command, "--temperature")
                      ->get_description()
                      .find(fmt::format("else {})", SamplingParams{}.temperature)),
                  std::string::npos)
            << command;
}

// --max-num-batched-tokens 0 is what EngineConfig::resolve makes of it, for each case the help
// names.
TEST(CliOptions, StepTokenBudgetIsWhatResolveChooses) {
    Cli cli;
    const std::string help = cli.option("generate", "--max-num-batched-tokens")->get_description();
    const auto resolved = [](const char* fixture, const char* device) {
        EngineConfig c;
        c.device = device;
        c.resolve(ModelConfig::load(std::string(MINIINFER_FIXTURES) + "/" + fixture));
        return c.max_num_batched_tokens;
    };
    EXPECT_NE(help.find(fmt::format("0: {} on CUDA", resolved("qwen3-demo", "cuda"))),
              std::string::npos)
        << help;
    EXPECT_NE(help.find(fmt::format("{} for an MoE model", resolved("qwen3-moe-tiny", "cuda"))),
              std::string::npos)
        << help;
    EXPECT_NE(help.find(fmt::format("{} on the CPU", resolved("qwen3-demo", "cpu"))),
              std::string::npos)
        << help;
}

// A default written into an option's text is one of those checked above: a new one must be
// formatted from the code (or given as CLI11's default) and added here.
TEST(CliOptions, NoOtherDefaultIsStatedInText) {
    Cli cli;
    // --served-model-name's default is MODEL as given (tests/server: test_models_and_health).
    const std::set<std::string> checked = {"--temperature", "--served-model-name"};
    for (CLI::App* cmd : all_commands(&cli.app))
        for (const CLI::Option* opt : cmd->get_options()) {
            std::string text = opt->get_description();
            std::transform(text.begin(), text.end(), text.begin(),
                           [](unsigned char c) { return char(std::tolower(c)); });
            if (text.find("(default") != std::string::npos && !checked.count(opt->get_name())) {
                ADD_FAILURE() << cmd->get_name() << " " << opt->get_name()
                              << " states a default in its text: " << text;
            }
        }
}
