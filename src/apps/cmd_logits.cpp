// miniinfer logits --model DIR --ids 1,2,3 [--top 5]: one CPU forward pass over the ids,
// printing the top-k logits at every position as JSON.
#include <algorithm>
#include <cstdio>
#include <numeric>

#include "apps/commands.h"
#include "apps/engine_options.h"
#include "core/json.h"
#include "core/logging.h"
#include "loader/hub.h"
#include "models/sequence_runner.h"

namespace miniinfer::apps {
namespace {

struct LogitsOptions {
    std::string model_dir;
    std::string revision = "main";
    std::vector<int64_t> ids;
    int top = 5;
    int page_size = 16;
    std::string load_format = "auto";
};

void run(LogitsOptions o) {
    if (o.ids.empty()) fail("--ids is empty: give at least one token id");
    if (o.top < 1) fail("--top must be at least 1, got {}", o.top);
    if (o.page_size < 1) fail("--page-size must be at least 1, got {}", o.page_size);
    o.model_dir = hub::resolve_model(o.model_dir, o.revision).string();
    // Bad ids are answered from config.json, before the weights load (and log).
    const int64_t vocab = ModelConfig::load(o.model_dir).vocab_size;
    std::vector<int32_t> ids;
    for (int64_t id : o.ids) {
        if (id < 0 || id >= vocab) fail("token id {} is outside the vocabulary [0, {})", id, vocab);
        ids.push_back(int32_t(id));
    }
    QwenModel model = QwenModel::load(o.model_dir, parse_load_format(o.load_format));
    SequenceRunner runner(model, int64_t(ids.size()), o.page_size);
    Tensor logits = runner.append(ids);  // [n, vocab]
    const int64_t k = std::min<int64_t>(o.top, vocab);
    Json positions = Json::array();
    std::vector<int32_t> order(static_cast<size_t>(vocab));
    for (size_t p = 0; p < ids.size(); ++p) {
        const float* row = logits.data<float>() + int64_t(p) * vocab;
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
            return row[a] > row[b] || (row[a] == row[b] && a < b);
        });
        Json top = Json::array();
        for (int64_t i = 0; i < k; ++i)
            top.push_back({{"id", order[size_t(i)]}, {"logit", row[order[size_t(i)]]}});
        positions.push_back({{"position", p}, {"token", ids[p]}, {"top", top}});
    }
    std::printf("%s\n", Json{{"model", o.model_dir}, {"positions", positions}}.dump().c_str());
}

}  // namespace

void add_logits(CLI::App& app) {
    auto opts = std::make_shared<LogitsOptions>();
    CLI::App* cmd = app.add_subcommand(
        "logits", "Run the CPU forward pass and print top-k logits per position");
    cmd->footer("Example: miniinfer logits --model ~/models/Qwen3-0.6B --ids 9707,11,1879 --top 5");
    add_model_option(*cmd, opts->model_dir, opts->revision);
    cmd->add_option("--ids", opts->ids, "Token ids, comma separated")->required()->delimiter(',');
    cmd->add_option("--top", opts->top, "How many logits to print per position")
        ->capture_default_str();
    cmd->add_option("--page-size", opts->page_size, "KV cache page size in tokens")
        ->capture_default_str();
    cmd->add_option("--load-format", opts->load_format,
                    "auto | safetensors | dummy (seeded random weights)")
        ->capture_default_str();
    cmd->callback([opts] { run(*opts); });
}

}  // namespace miniinfer::apps
