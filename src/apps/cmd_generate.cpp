// miniinfer generate --model DIR (--prompt TEXT ... | --input FILE.jsonl | --input -)
//                    [sampling flags]
// Runs every prompt through the engine at once and writes one JSON line per prompt, in input
// order, to --output or stdout. A bad prompt gets an "error" line; the others still run.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <future>
#include <iostream>

#include "apps/commands.h"
#include "apps/engine_options.h"
#include "core/logging.h"
#include "engine/llm_engine.h"
#include "server/pipeline_client.h"
#include "tokenizer/chat_template.h"

namespace miniinfer::apps {
namespace {

struct GenerateOptions {
    EngineOptions engine;
    std::vector<std::string> prompts;
    std::string input, output;
    bool chat = false, no_thinking = false;
};

// One request to make: its prompt and sampling overrides, or why the input line is bad.
struct Job {
    Json source;  // the input line (or {"prompt": ...})
    Prompt prompt;
    SamplingParams params;
    std::string error;
};

// The --prompt values, then the --input lines ("-": standard input). Read before the model
// loads, so that a missing file or an empty input fails at once.
std::vector<Json> read_inputs(const GenerateOptions& o) {
    std::vector<Json> lines;
    for (const auto& p : o.prompts) lines.push_back({{"prompt", p}});
    if (!o.input.empty()) {
        std::ifstream file;
        if (o.input != "-") {
            file.open(o.input);
            if (!file) fail("{}: cannot open", o.input);
        }
        std::istream& in = o.input == "-" ? std::cin : file;
        const std::string name = o.input == "-" ? "standard input" : o.input;
        std::string line;
        for (int n = 1; std::getline(in, line); ++n) {
            if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
            try {
                lines.push_back(parse_untrusted_json(line, fmt::format("{} line {}", name, n)));
            } catch (const Error& e) {
                lines.push_back(Json{{"__error", e.what()}});
            }
        }
    }
    if (lines.empty())
        fail(
            "nothing to generate: give --prompt TEXT or --input FILE.jsonl (- for standard input)");
    return lines;
}

Job make_job(const Json& line, const SamplingParams& base, const GenerateOptions& o,
             const ChatTemplate* chat) {
    Job job{line, {}, base, ""};
    try {
        if (line.contains("__error")) fail("{}", line["__error"].get<std::string>());
        if (!line.is_object()) fail("each input line must be a JSON object");
        job.params = SamplingParams::from_json(line, base);
        Json kwargs = o.no_thinking ? Json{{"enable_thinking", false}} : Json::object();
        if (line.contains("prompt_token_ids")) {
            job.prompt =
                Prompt::from_ids(json_get<std::vector<int32_t>>(line, "prompt_token_ids", "input"));
        } else if (line.contains("messages")) {
            if (!chat) fail("this model has no chat template");
            job.prompt = Prompt::from_text(
                chat->render(nlohmann::ordered_json(line["messages"]), nullptr, true, kwargs));
        } else {
            std::string text = json_get<std::string>(line, "prompt", "input");
            if (o.chat) {
                if (!chat) fail("--chat: this model has no chat template");
                text = chat->render(
                    nlohmann::ordered_json::array({{{"role", "user"}, {"content", text}}}), nullptr,
                    true, kwargs);
            }
            job.prompt = Prompt::from_text(text);
        }
    } catch (const Error& e) {
        job.error = e.what();
    }
    return job;
}

Json to_json(const RequestOutput& out, const Job& job) {
    Json j = Json::object();
    if (job.source.contains("prompt")) j["prompt"] = job.source["prompt"];
    if (!out.error.empty()) {
        j["error"] = out.error;
        j["finish_reason"] = "error";
        return j;
    }
    j["text"] = out.text;
    j["token_ids"] = out.token_ids;
    j["finish_reason"] = out.finish_reason;
    if (!out.stop_reason.empty()) j["stop_reason"] = out.stop_reason;
    j["num_prompt_tokens"] = out.num_prompt_tokens;
    j["num_cached_tokens"] = out.num_cached_tokens;
    if (job.params.logprobs) {
        Json lp = Json::array();
        for (const auto& t : out.logprobs) {
            Json top = Json::array();
            for (auto [id, v] : t.top) top.push_back({{"id", id}, {"logprob", v}});
            lp.push_back({{"id", t.token}, {"logprob", t.logprob}, {"top", top}});
        }
        j["logprobs"] = lp;
    }
    return j;
}

// A progress line on stderr (a terminal only): requests done, tokens, throughput.
class Progress {
  public:
    Progress(size_t num_requests, bool enabled) : num_requests_(num_requests), enabled_(enabled) {}
    ~Progress() {
        if (enabled_) std::fprintf(stderr, "\n");
    }
    void finished(const RequestOutput& out) {
        ++num_done_;
        num_tokens_ += out.token_ids.size();
    }
    void show() const {
        if (!enabled_) return;
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
        std::fprintf(stderr, "\r%zu/%zu requests done, %zu tokens, %.1f tok/s", num_done_,
                     num_requests_, num_tokens_, s > 0 ? double(num_tokens_) / s : 0.0);
    }

  private:
    size_t num_requests_, num_done_ = 0, num_tokens_ = 0;
    bool enabled_;
    std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// One process: the engine's own step loop. results[i] gets job i's final output (or error).
void run_in_process(LLMEngine& engine, const std::vector<Job>& jobs,
                    std::vector<RequestOutput>& results) {
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < jobs.size(); ++i) {
        try {
            if (!jobs[i].error.empty()) fail("{}", jobs[i].error);
            index[engine.add_request(jobs[i].prompt, jobs[i].params)] = i;
        } catch (const Error& e) {
            results[i].error = e.what();
        }
    }
    Progress progress(index.size(), jobs.size() > 1 && isatty(STDERR_FILENO));
    while (engine.has_unfinished()) {
        for (RequestOutput& out : engine.step()) {
            if (!out.finished) continue;
            progress.finished(out);
            results[index.at(out.request_id)] = std::move(out);
        }
        progress.show();
    }
}

volatile std::sig_atomic_t g_interrupted = 0;

// --use-multiprocess: the same requests through the tokenizer / engine / detokenizer processes.
// SIGINT/SIGTERM end the wait with an Error, so the client's destructor still stops the
// children and removes their socket directory.
void run_in_pipeline(PipelineClient& client, const std::vector<Job>& jobs,
                     std::vector<RequestOutput>& results) {
    struct sigaction on_signal = {};
    on_signal.sa_handler = [](int) { g_interrupted = 1; };
    sigaction(SIGINT, &on_signal, nullptr);
    sigaction(SIGTERM, &on_signal, nullptr);
    auto channel = std::make_shared<OutputChannel>();
    std::vector<std::future<void>> verdicts(jobs.size());  // all sent first, in input order
    for (size_t i = 0; i < jobs.size(); ++i) {
        try {
            if (!jobs[i].error.empty()) fail("{}", jobs[i].error);
            verdicts[i] =
                client.submit_async(std::to_string(i), jobs[i].prompt, jobs[i].params, channel);
        } catch (const Error& e) {
            results[i].error = e.what();
        }
    }
    std::vector<char> accepted(jobs.size(), 0);
    for (size_t i = 0; i < jobs.size(); ++i) {
        if (!verdicts[i].valid()) continue;
        try {
            verdicts[i].get();
            accepted[i] = 1;
        } catch (const Error& e) {
            results[i].error = e.what();
        }
    }
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < jobs.size(); ++i)
        if (accepted[i]) index[std::to_string(i)] = i;
    Progress progress(index.size(), jobs.size() > 1 && isatty(STDERR_FILENO));
    for (size_t num_done = 0; num_done < index.size();) {
        if (g_interrupted) fail("interrupted: {} of {} requests done", num_done, index.size());
        std::optional<RequestOutput> out = channel->next(std::chrono::milliseconds(200));
        if (!out || !out->finished) continue;
        ++num_done;
        progress.finished(*out);
        progress.show();
        results[index.at(out->request_id)] = std::move(*out);
    }
}

void run(const GenerateOptions& o, const Json& sampling_flags) {
    const EngineConfig config = o.engine.resolve();
    if (run_as_worker_node(config)) return;
    // The inputs and the output file first: a run must not load a model (a minute for a large
    // one) or generate everything only to find it has nothing to read or nowhere to write.
    const std::vector<Json> inputs = read_inputs(o);
    std::ofstream file = open_output_file(o.output);
    std::unique_ptr<LLMEngine> engine;
    std::unique_ptr<PipelineClient> pipeline;
    if (config.use_multiprocess)
        pipeline = std::make_unique<PipelineClient>(config, nullptr, 0);
    else
        engine = std::make_unique<LLMEngine>(config);
    const SamplingParams base = SamplingParams::from_json(
        sampling_flags, pipeline ? pipeline->default_params() : engine->default_params());
    std::optional<ChatTemplate> chat;
    try {
        chat = ChatTemplate::load(config.model_dir);
    } catch (const Error& e) {
        if (o.chat) throw;
    }
    std::vector<Job> jobs;
    for (const Json& line : inputs)
        jobs.push_back(make_job(line, base, o, chat ? &*chat : nullptr));

    std::vector<RequestOutput> results(jobs.size());
    if (pipeline)
        run_in_pipeline(*pipeline, jobs, results);
    else
        run_in_process(*engine, jobs, results);

    size_t num_errors = 0;
    for (size_t i = 0; i < jobs.size(); ++i) {
        num_errors += results[i].error.empty() ? 0 : 1;
        const std::string line =
            to_json(results[i], jobs[i]).dump(-1, ' ', false, Json::error_handler_t::replace);
        if (file.is_open())
            file << line << '\n';
        else
            std::printf("%s\n", line.c_str());
    }
    std::fflush(stdout);
    if (num_errors > 0)
        fail("{} of {} requests failed (see their \"error\" lines)", num_errors, jobs.size());
}

}  // namespace

void add_generate(CLI::App& app) {
    auto opts = std::make_shared<GenerateOptions>();
    CLI::App* cmd =
        app.add_subcommand("generate", "Generate text for many prompts at once (JSON lines out)");
    cmd->footer(
        "Example: miniinfer generate --model ~/models/Qwen3-0.6B --device cuda --prompt "
        "'The capital of France is' --max-tokens 32");
    add_engine_options(*cmd, opts->engine);
    add_multiprocess_option(*cmd, opts->engine);
    cmd->add_option("--prompt", opts->prompts, "A prompt (repeatable)");
    cmd->add_option("--input", opts->input,
                    "JSON lines (- for standard input): {\"prompt\": ...}, {\"messages\": "
                    "[...]} or {\"prompt_token_ids\": [...]}, each with optional sampling "
                    "fields");
    cmd->add_option("--output", opts->output, "Write JSON lines here instead of stdout");
    cmd->add_flag("--chat", opts->chat,
                  "Wrap each --prompt / \"prompt\" in the model's chat template as a user message");
    cmd->add_flag("--no-thinking", opts->no_thinking,
                  "Chat template kwarg enable_thinking=false (Qwen3)");
    auto sampling = add_sampling_options(*cmd, SamplingParams{}.max_tokens);
    cmd->callback([opts, sampling] { run(*opts, *sampling); });
}

}  // namespace miniinfer::apps
