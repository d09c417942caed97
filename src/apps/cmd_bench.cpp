// miniinfer bench: the standard offline workloads of BENCHMARKS.md, timed from the moment all
// requests are submitted (model loaded, one warm-up request done) until the last token, with
// the speed of light (SOL) for the same workload on this card (bench/gpu_peak.h). The multiturn
// workload submits each conversation's next turn as its last one finishes and reports how much of
// the prompts the prefix cache held (bench/multiturn.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "apps/commands.h"
#include "apps/engine_options.h"
#include "bench/gpu_peak.h"
#include "bench/multiturn.h"
#include "bench/workloads.h"
#include "config/tuning.h"
#include "core/logging.h"
#include "engine/kernel_profiler.h"
#include "engine/llm_engine.h"
#include "models/weights.h"

namespace miniinfer::apps {
namespace {

using bench::BenchWorkload;
using bench::GpuPeak;
using bench::make_bench_workload;
using bench::max_concurrent_requests;
using bench::MultiturnWorkload;
using bench::sol_seconds;

struct BenchOptions {
    EngineOptions engine;
    std::vector<std::string> workloads = {"balanced"};
    std::string balanced_file = "bench/balanced.json";
    std::string json_out;
    int64_t runs = 1;         // timed runs of each workload, back to back
    int64_t profile_top = 0;  // > 0: CUPTI kernel times of each run, this many rows
    double hbm_bytes_per_s = 0, matmul_flops = 0;  // > 0: given, in place of the card's
    std::vector<std::string> tuning;               // key=value fields of config/tuning.h
    bench::MultiturnShape multiturn;               // before scaling to the model
    std::string json_schema_file;  // set: every request (warm-up too) under this JSON schema
};

// --json-schema: the schema as every request's structured output. EOS is then the grammar's to
// allow (ignore_eos off): a request ends at its max_tokens or where its document ends.
void constrain(SamplingParams& p, const BenchOptions& o) {
    if (o.json_schema_file.empty()) return;
    p.ignore_eos = false;
    p.structured_outputs.emplace();
    p.structured_outputs->kind = StructuredOutput::Kind::kJsonSchema;
    p.structured_outputs->text = read_text_file(o.json_schema_file);
}

// The SOL's figures: the card's (--device cuda), with --hbm-bytes-per-s / --matmul-flops in place
// of theirs. On the CPU only figures given count (a figure not given bounds nothing), and with
// none given there is no SOL: a GPU's figures against a CPU run would mean nothing.
std::optional<GpuPeak> sol_peak(const EngineConfig& c, const BenchOptions& o) {
    std::optional<GpuPeak> peak;
#ifdef MINIINFER_HAS_CUDA
    if (c.device == "cuda") peak = bench::gpu_peak(bench::current_gpu_properties());
#endif
    if (!peak && o.hbm_bytes_per_s == 0 && o.matmul_flops == 0) return std::nullopt;
    if (!peak) {
        constexpr double kUnbounded = std::numeric_limits<double>::infinity();
        peak = GpuPeak{c.device, {.hbm_bytes_per_s = kUnbounded, .matmul_flops = kUnbounded}, ""};
    }
    std::string given;
    if (o.hbm_bytes_per_s > 0) {
        peak->hardware.hbm_bytes_per_s = o.hbm_bytes_per_s;
        given = "--hbm-bytes-per-s";
    }
    if (o.matmul_flops > 0) {
        peak->hardware.matmul_flops = o.matmul_flops;
        given += given.empty() ? "--matmul-flops" : " and --matmul-flops";
    }
    if (!given.empty()) peak->source += (peak->source.empty() ? "" : "; ") + given + " given";
    return peak;
}

// A workload as bench runs it: `requests` all submitted at the start, or (multiturn, built once
// the engine knows the model's vocabulary and max_model_len) conversations whose turns follow one
// another.
struct Workload {
    std::string name;
    BenchWorkload requests;
    std::optional<MultiturnWorkload> multiturn;
};

// The prefix cache's share of a run's prompt tokens, against the share that was resent.
Json hit_rates_json(const bench::MultiturnRun& run) {
    const auto rates = [](const bench::MultiturnRun::Tally& t) {
        return Json{{"turns", t.num_turns},
                    {"prompt_tokens", t.prompt_tokens},
                    {"cached_prompt_tokens", t.cached_tokens},
                    {"resent_prompt_tokens", t.resent_tokens},
                    {"hit_rate", t.hit_rate()},
                    {"ideal_hit_rate", t.ideal_hit_rate()},
                    {"tokens_short_per_turn", t.tokens_short_per_turn()}};
    };
    return {{"all_turns", rates(run.tally())}, {"later_turns", rates(run.later_turn_tally())}};
}

Json run_workload(LLMEngine& engine, const Workload& w, const BenchOptions& o,
                  const std::optional<GpuPeak>& peak) {
    using Clock = std::chrono::steady_clock;
    SamplingParams p;
    p.temperature = w.multiturn ? w.multiturn->temperature : w.requests.temperature;
    p.ignore_eos = true;
    constrain(p, o);
    int64_t prompt_tokens = 0, num_requests = 0, finished_by_length = 0;
    // Time to first token of each request, from its submission: how long the scheduler's
    // prefill order kept it waiting.
    std::unordered_map<std::string, Clock::time_point> waiting_since;
    std::vector<double> ttft_ms;
    std::unordered_map<std::string, int64_t> conversation_of;  // multiturn: request id -> index
    std::unordered_map<std::string, size_t> request_of;        // the others: id -> index
    std::vector<int64_t> output_lengths(w.requests.prompts.size());
    const auto submit = [&](const std::vector<int32_t>& prompt, int64_t max_tokens,
                            Clock::time_point now) {
        p.max_tokens = max_tokens;
        p.seed = uint64_t(num_requests++);
        const std::string id = engine.add_request(Prompt::from_ids(prompt), p);
        prompt_tokens += int64_t(prompt.size());
        waiting_since.emplace(id, now);
        return id;
    };
    std::optional<bench::MultiturnRun> conversations;
    std::optional<KernelProfiler> profiler;
    if (o.profile_top > 0) profiler.emplace();
    const auto start = Clock::now();
    for (size_t i = 0; i < w.requests.prompts.size(); ++i)
        request_of[submit(w.requests.prompts[i], w.requests.max_tokens[i], start)] = i;
    if (w.multiturn) {
        conversations.emplace(*w.multiturn);
        for (const bench::MultiturnRun::Turn& turn : conversations->first_turns())
            conversation_of[submit(turn.prompt, turn.max_tokens, start)] = turn.conversation_idx;
    }
    int64_t output_tokens = 0, cached_tokens = 0;
    engine.reset_step_timing();
    while (engine.has_unfinished())
        for (const RequestOutput& out : engine.step()) {
            const auto now = Clock::now();
            if (auto it = waiting_since.find(out.request_id);
                !out.new_token_ids.empty() && it != waiting_since.end()) {
                ttft_ms.push_back(1000.0 * std::chrono::duration<double>(now - it->second).count());
                waiting_since.erase(it);
            }
            if (!out.finished) continue;
            if (!out.error.empty()) fail("request {}: {}", out.request_id, out.error);
            finished_by_length += out.finish_reason == "length";
            output_tokens += int64_t(out.token_ids.size());
            if (auto it = request_of.find(out.request_id); it != request_of.end())
                output_lengths[it->second] = int64_t(out.token_ids.size());
            cached_tokens += out.num_cached_tokens;
            if (!conversations) continue;
            // The next turn goes in at once, so that it is scheduled with the running ones.
            const int64_t c = conversation_of.at(out.request_id);
            if (auto next = conversations->finish(c, out.token_ids, out.num_cached_tokens))
                conversation_of[submit(next->prompt, next->max_tokens, now)] = c;
        }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::sort(ttft_ms.begin(), ttft_ms.end());
    const auto ttft_quantile = [&](double q) {
        return ttft_ms.empty() ? Json(nullptr)
                               : Json(ttft_ms[size_t(q * double(ttft_ms.size() - 1) + 0.5)]);
    };
    const double ttft_mean =
        ttft_ms.empty()
            ? 0.0
            : std::accumulate(ttft_ms.begin(), ttft_ms.end(), 0.0) / double(ttft_ms.size());
    Json kernels = nullptr;
    if (profiler) {
        kernels = Json::array();
        for (const KernelTime& k : profiler->stop())
            kernels.push_back({{"name", k.name},
                               {"calls", k.calls},
                               {"total_us", k.total_us},
                               {"exposed_us", k.exposed_us}});
    }
    // No SOL for multiturn: sol_seconds runs all requests at once, and a turn waits for the last.
    const bool has_sol = peak && !w.multiturn;
    const EngineConfig& c = engine.config();
    const int64_t concurrent =
        max_concurrent_requests(w.requests, c.max_num_seqs, c.num_pages * c.page_size,
                                engine.model_config().is_hybrid() ? c.num_state_slots : 0);
    const double sol = has_sol ? sol_seconds(w.requests, engine.model_config(), concurrent,
                                             peak->hardware, c.fp8_kv_cache() ? 1.0 : 2.0)
                               : 0.0;
    const std::optional<ModelRunner::StepTiming> t = engine.step_timing();
    return {{"workload", w.name},
            {"steps", t ? Json(t->steps) : Json(nullptr)},
            {"gpu_busy_ms", t ? Json(t->busy_ms) : Json(nullptr)},
            {"gpu_idle_ms", t ? Json(t->idle_ms) : Json(nullptr)},
            {"device", c.device},
            {"attention_backend",
             c.device == "cuda" ? (c.attention_backend == "auto" ? "fa2" : c.attention_backend)
                                : "cpu"},
            {"page_size", c.page_size},
            {"cuda_graphs", c.device == "cuda" && !c.enforce_eager},
            {"overlap", engine.overlapping()},
            {"requests", num_requests},
            {"json_schema", o.json_schema_file.empty() ? Json(nullptr) : Json(o.json_schema_file)},
            {"finished_by_length", finished_by_length},
            {"output_lengths", output_lengths},
            {"prompt_tokens", prompt_tokens},
            {"cached_prompt_tokens", cached_tokens},  // found in the prefix cache
            {"output_tokens", output_tokens},
            {"seconds", seconds},
            {"output_tok_per_s", double(output_tokens) / seconds},
            {"prompt_tok_per_s", double(prompt_tokens) / seconds},
            {"ms_per_output_token", 1000.0 * seconds / double(output_tokens)},
            {"ttft_mean_ms", ttft_ms.empty() ? Json(nullptr) : Json(ttft_mean)},
            {"ttft_p50_ms", ttft_quantile(0.5)},
            {"ttft_p99_ms", ttft_quantile(0.99)},
            {"sol_hardware", has_sol ? Json(bench::describe(*peak)) : Json(nullptr)},
            {"sol_tok_per_s", has_sol ? Json(double(output_tokens) / sol) : Json(nullptr)},
            {"sol_concurrent_requests", has_sol ? Json(concurrent) : Json(nullptr)},
            {"percent_of_sol", has_sol ? Json(100.0 * sol / seconds) : Json(nullptr)},
            {"multiturn", w.multiturn ? Json(bench::describe(w.multiturn->shape)) : Json(nullptr)},
            {"prefix_cache", conversations ? hit_rates_json(*conversations) : Json(nullptr)},
            {"kernels", std::move(kernels)}};
}

// One result row of the table (its run number after the workload's name when runs > 1).
void print_row(const Json& r, int64_t run_index, int64_t runs) {
    const std::string name = r["workload"].get<std::string>() +
                             (runs > 1 ? fmt::format(" (run {})", run_index) : std::string());
    const std::string sol = r["sol_tok_per_s"].is_null()
                                ? "— | —"
                                : fmt::format("{:.0f} | {:.1f}%", r["sol_tok_per_s"].get<double>(),
                                              r["percent_of_sol"].get<double>());
    std::printf("| %s | %s | %s | %lld | %s | %s | %lld | %lld | %.2f | %.0f | %s |", name.c_str(),
                r["device"].get<std::string>().c_str(),
                r["attention_backend"].get<std::string>().c_str(), r["page_size"].get<long long>(),
                r["cuda_graphs"].get<bool>() ? "on" : "off",
                r["overlap"].get<bool>() ? "on" : "off", r["requests"].get<long long>(),
                r["output_tokens"].get<long long>(), r["seconds"].get<double>(),
                r["output_tok_per_s"].get<double>(), sol.c_str());
    if (r["workload"] == "prefill256")
        std::printf(" prompt %.0f tok/s", r["prompt_tok_per_s"].get<double>());
    if (!r["ttft_mean_ms"].is_null() && r["requests"].get<int64_t>() > 1)
        std::printf(" (TTFT mean %.0f ms, p99 %.0f ms)", r["ttft_mean_ms"].get<double>(),
                    r["ttft_p99_ms"].get<double>());
    if (r["workload"] == "bs1")
        std::printf(" %.3f ms/token", r["ms_per_output_token"].get<double>());
    if (!r["json_schema"].is_null())
        std::printf(" under %s (%lld of the requests ended at max_tokens)",
                    r["json_schema"].get<std::string>().c_str(),
                    r["finished_by_length"].get<long long>());
    if (const Json& cache = r["prefix_cache"]; !cache.is_null()) {
        const auto percent = [&](const char* turns, const char* rate) {
            return 100.0 * cache[turns][rate].get<double>();
        };
        std::printf(
            " prefix cache hits %.1f%% of prompt tokens (ideal %.1f%%), turns >= 2 %.1f%% (ideal "
            "%.1f%%, %.1f tokens short a turn)",
            percent("all_turns", "hit_rate"), percent("all_turns", "ideal_hit_rate"),
            percent("later_turns", "hit_rate"), percent("later_turns", "ideal_hit_rate"),
            cache["later_turns"]["tokens_short_per_turn"].get<double>());
    }
    if (!r["steps"].is_null() && r["steps"].get<int64_t>() > 0) {
        const double idle = r["gpu_idle_ms"].get<double>(), busy = r["gpu_busy_ms"].get<double>();
        std::printf(" GPU idle between steps %.1f us/step (%.1f%% of %lld steps' GPU time)",
                    1000.0 * idle / double(r["steps"].get<int64_t>()),
                    100.0 * idle / std::max(busy + idle, 1e-9),
                    (long long)r["steps"].get<int64_t>());
    }
    std::printf("\n");
    std::fflush(stdout);
}

void run(const BenchOptions& o) {
    std::vector<Workload> workloads;
    for (const std::string& name : o.workloads)
        workloads.push_back(name == "multiturn"
                                ? Workload{name, {}, {}}
                                : Workload{name, make_bench_workload(name, o.balanced_file), {}});
    const EngineConfig config = o.engine.resolve();
    if (o.profile_top > 0 && config.device != "cuda")
        fail("--profile-kernels records GPU kernels: it needs --device cuda");
    if (run_as_worker_node(config)) return;
    std::ofstream json_file = open_output_file(o.json_out);
    LLMEngine engine(config);
    // Warm-up: one short request through every code path the runs use.
    SamplingParams warm;
    warm.max_tokens = 8;
    warm.ignore_eos = true;
    warm.temperature = 0.6;
    constrain(warm, o);
    engine.generate({Prompt::from_ids(std::vector<int32_t>(64, 1))}, warm);

    for (Workload& w : workloads)
        if (w.name == "multiturn")
            w.multiturn = bench::make_multiturn_workload(
                o.multiturn, engine.model_config().vocab_size, engine.config().max_model_len);
    for (const Workload& w : workloads)
        if (w.multiturn)
            std::printf("multiturn: %s\n", bench::describe(w.multiturn->shape).c_str());

    const std::optional<GpuPeak> peak = sol_peak(engine.config(), o);
    if (peak) std::printf("%s\n", bench::describe(*peak).c_str());
    if (!o.tuning.empty()) std::printf("tuning: %s\n", to_string(config.tuning).c_str());
    std::printf("\n");
    std::printf(
        "| workload | device | attention | page | graphs | overlap | requests | output tokens | "
        "seconds | tok/s | SOL tok/s | %% of SOL |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    Json results = Json::array();
    for (const Workload& w : workloads) {
        double first = 0, later = 0;  // tok/s of the first run, sum of the others
        int64_t first_cached = 0, later_cached = 0, prompt_tokens = 0;
        for (int64_t run_index = 1; run_index <= o.runs; ++run_index) {
            Json r = run_workload(engine, w, o, peak);
            r["run"] = run_index;
            print_row(r, run_index, o.runs);
            if (!o.json_schema_file.empty() && !w.multiturn) {
                // The same requests unconstrained, each generating exactly as many tokens as
                // it did under the schema: what the grammar costs, at equal work.
                Workload same = w;
                same.requests.max_tokens = r["output_lengths"].get<std::vector<int64_t>>();
                for (int64_t& n : same.requests.max_tokens) n = std::max<int64_t>(n, 1);
                BenchOptions plain = o;
                plain.json_schema_file.clear();
                Json u = run_workload(engine, same, plain, peak);
                u["workload"] = w.name + " unconstrained, same lengths";
                u["run"] = run_index;
                print_row(u, run_index, o.runs);
                std::printf(
                    "| %s (run %lld): under the schema at %.1f%% of the unconstrained "
                    "tok/s |\n",
                    w.name.c_str(), (long long)run_index,
                    100.0 * r["output_tok_per_s"].get<double>() /
                        u["output_tok_per_s"].get<double>());
                r["unconstrained_same_lengths"] = u;
            }
            if (o.profile_top > 0) {
                std::vector<KernelTime> times;
                for (const Json& k : r["kernels"])
                    times.push_back({k["name"].get<std::string>(), k["calls"].get<int64_t>(),
                                     k["total_us"].get<double>(), k["exposed_us"].get<double>()});
                std::printf(
                    "\nKernels of %s (run %lld; with CUPTI recording, the run's wall time "
                    "above is not the benchmark's): %s\n",
                    w.name.c_str(), (long long)run_index,
                    format_kernel_times(times, size_t(o.profile_top)).c_str());
            }
            (run_index == 1 ? first : later) += r["output_tok_per_s"].get<double>();
            (run_index == 1 ? first_cached : later_cached) +=
                r["cached_prompt_tokens"].get<int64_t>();
            prompt_tokens = r["prompt_tokens"].get<int64_t>();
            results.push_back(r);
        }
        // What a user's first batch sees, and what the engine does once warm. The repeats reuse
        // the prefix cache (prompts already seen are not prefilled again): how much of their
        // prompts it held says how much of the difference is that (--no-prefix-caching: none).
        if (o.runs > 1) {
            const auto percent = [&](int64_t cached, int64_t runs) {
                return 100.0 * double(cached) / double(std::max<int64_t>(prompt_tokens * runs, 1));
            };
            const std::string later_runs = o.runs == 2 ? "run 2" : fmt::format("runs 2-{}", o.runs);
            std::printf(
                "| %s: first run %.0f tok/s, steady state %.0f tok/s (%s); prompt tokens from "
                "the prefix cache: %.1f%% in run 1, %.1f%% in %s |\n",
                w.name.c_str(), first, later / double(o.runs - 1), later_runs.c_str(),
                percent(first_cached, 1), percent(later_cached, o.runs - 1), later_runs.c_str());
        } else if (first_cached > 0 && !w.multiturn) {
            // A single run that found prompts in the cache (an earlier workload's, or a user's
            // --workload repeated) measured less prefill than the workload holds: say so.
            std::printf("| %s: %lld of its %lld prompt tokens came from the prefix cache |\n",
                        w.name.c_str(), (long long)first_cached, (long long)prompt_tokens);
        }
    }
    if (json_file.is_open()) {
        json_file << results.dump(2) << "\n";
        if (!json_file.flush()) fail("{}: cannot write", o.json_out);
    }
}

}  // namespace

void add_bench(CLI::App& app) {
    auto opts = std::make_shared<BenchOptions>();
    CLI::App* cmd = app.add_subcommand(
        "bench", "Run the standard offline workloads and report tok/s against the speed of light");
    cmd->footer(
        "Example: miniinfer bench --model bench/qwen3-0.6b --load-format dummy --device cuda "
        "--workload balanced --workload bs1");
    add_engine_options(*cmd, opts->engine);
    cmd->add_option("--workload", opts->workloads,
                    "balanced, decode128, decode256, short256, prefill256, bs1, multiturn "
                    "(repeatable)")
        ->capture_default_str();
    cmd->add_option("--balanced-file", opts->balanced_file, "The balanced workload's prompts")
        ->capture_default_str();
    cmd->add_option("--conversations", opts->multiturn.num_conversations,
                    "multiturn: conversations, all started at once")
        ->check(CLI::Range(int64_t(1), int64_t(100000)))
        ->capture_default_str();
    cmd->add_option("--turns", opts->multiturn.num_turns,
                    "multiturn: turns per conversation (lengths shrink to fit --max-model-len)")
        ->check(CLI::Range(int64_t(1), int64_t(1000)))
        ->capture_default_str();
    cmd->add_option("--json", opts->json_out, "Also write the results as JSON here");
    cmd->add_option("--runs", opts->runs,
                    "Timed runs of each workload, back to back: the first run and the steady "
                    "state (the mean of the others) are reported apart")
        ->check(CLI::Range(int64_t(1), int64_t(100)))
        ->capture_default_str();
    cmd->add_option("--profile-kernels", opts->profile_top,
                    "CUDA: record every kernel of each timed run (CUPTI, loaded at run time) and "
                    "print the N with the most GPU time (also in --json); slows the run itself")
        ->check(CLI::Range(int64_t(1), int64_t(1000)));
    cmd->add_flag("--measure-gpu-idle", opts->engine.config.measure_gpu_idle,
                  "CUDA: time each step with events and report the GPU's idle time between steps");
    cmd->add_option("--hbm-bytes-per-s", opts->hbm_bytes_per_s,
                    "Memory bandwidth for the SOL, in place of the card's (a table of known cards, "
                    "else its device properties); on the CPU the SOL shows only when given");
    cmd->add_option("--matmul-flops", opts->matmul_flops,
                    "Dense bf16 matrix rate (FLOP/s) for the SOL, in place of the card's");
    cmd->add_option("--json-schema", opts->json_schema_file,
                    "Every request under this JSON schema (structured output): EOS only where "
                    "its document ends; the model folder needs a tokenizer")
        ->check(CLI::ExistingFile);
    cmd->add_option("--tuning", opts->tuning,
                    "key=value: a kernel threshold in place of its default, for comparisons "
                    "(repeatable; keys and defaults: src/config/tuning.h)");
    // `miniinfer bench serve ...` benchmarks a running server (as `vllm bench serve`); the
    // offline options, --model included, then do not apply.
    add_bench_serve(*cmd, "serve");
    cmd->require_subcommand(0, 1);
    cmd->get_option("--model")->required(false);
    cmd->callback([opts, cmd] {
        if (!cmd->get_subcommands().empty()) return;
        if (opts->engine.config.model_dir.empty()) fail("bench: --model is required");
        for (const std::string& key_value : opts->tuning)
            set_tuning(opts->engine.config.tuning, key_value);
        for (const auto& [flag, value] : {std::pair{"--hbm-bytes-per-s", opts->hbm_bytes_per_s},
                                          std::pair{"--matmul-flops", opts->matmul_flops}})
            if (cmd->count(flag) > 0 && !(value > 0))
                fail("{} must be a positive rate, got {}", flag, value);
        run(*opts);
    });
}

}  // namespace miniinfer::apps
