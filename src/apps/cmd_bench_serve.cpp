// miniinfer bench-serve: load against a running OpenAI-compatible server, like `vllm bench
// serve`. Every request is a streamed POST /v1/completions of token ids with ignore_eos; the
// report uses vLLM's definitions:
//   TTFT  send → the first chunk with choices
//   ITL   the gaps between consecutive chunks with choices (all requests pooled)
//   TPOT  per request, (e2e − TTFT) / (output tokens − 1), for requests of more than one token
//   output tokens: usage.completion_tokens of the final chunk (the number of chunks without it)
// Requests arrive all at once (--request-rate inf) or as a Poisson process (seeded), each on
// its own thread, at most --max-concurrency in flight.
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <random>
#include <semaphore>
#include <thread>

#include "apps/commands.h"
#include "bench/workloads.h"
#include "core/json.h"

namespace miniinfer::apps {
namespace {

using bench::BenchWorkload;
using bench::make_bench_workload;
using bench::make_random_workload;

using Clock = std::chrono::steady_clock;

struct ServeBenchOptions {
    std::string host = "127.0.0.1";
    int port = 8000;
    std::string api_key, model, workload = "balanced", balanced_file = "bench/balanced.json";
    int64_t num_prompts = 100, input_len = 1024, output_len = 128;
    double request_rate = std::numeric_limits<double>::infinity();
    int64_t max_concurrency = 0;  // 0: unlimited
    uint32_t seed = 0;
    std::string json_out;
};

struct RequestResult {
    bool success = false;
    bool unanswered = false;  // no HTTP response at all (nothing listening, connection refused)
    std::string error;
    double ttft = 0, latency = 0;  // seconds
    int64_t output_tokens = 0;
    std::vector<double> itl;  // seconds between chunks
};

// Splits an SSE byte stream into `data:` payloads; holds a partial line between calls.
class SseReader {
  public:
    template <typename OnData>
    void feed(const char* bytes, size_t len, OnData&& on_data) {
        buffer_.append(bytes, len);
        size_t start = 0;
        for (size_t nl; (nl = buffer_.find('\n', start)) != std::string::npos; start = nl + 1) {
            std::string_view line(buffer_.data() + start, nl - start);
            if (line.ends_with('\r')) line.remove_suffix(1);
            if (!line.starts_with("data:")) continue;  // blank separators, comments, event names
            line.remove_prefix(5);
            if (line.starts_with(' ')) line.remove_prefix(1);
            on_data(line);
        }
        buffer_.erase(0, start);
    }

  private:
    std::string buffer_;
};

RequestResult send_request(const ServeBenchOptions& o, const Json& body) {
    RequestResult r;
    httplib::Client client(o.host, o.port);
    client.set_connection_timeout(10);
    client.set_read_timeout(3600);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    req.set_header("Accept", "text/event-stream");
    if (!o.api_key.empty()) req.set_header("Authorization", "Bearer " + o.api_key);

    int status = 0;
    bool done = false;
    int64_t num_chunks = 0, usage_tokens = -1;
    std::string error_body;
    SseReader sse;
    const auto start = Clock::now();
    auto last = start;
    req.response_handler = [&](const httplib::Response& res) {
        status = res.status;
        return true;
    };
    req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
        if (status != 200) {
            if (error_body.size() < 500) error_body.append(data, std::min<size_t>(len, 500));
            return true;
        }
        const auto now = Clock::now();
        try {
            sse.feed(data, len, [&](std::string_view payload) {
                if (payload == "[DONE]") {
                    done = true;
                    return;
                }
                Json chunk = Json::parse(payload, nullptr, /*allow_exceptions=*/false);
                if (chunk.is_discarded() || !chunk.is_object())
                    fail("bad SSE data: {}", payload.substr(0, 200));
                if (chunk.contains("error")) fail("error event: {}", chunk["error"].dump());
                // A chunk with choices is a token chunk (vLLM counts it even with empty text: a
                // token can end inside a UTF-8 character); usage comes on the last chunk.
                if (auto c = chunk.find("choices");
                    c != chunk.end() && c->is_array() && !c->empty()) {
                    if (num_chunks++ == 0)
                        r.ttft = std::chrono::duration<double>(now - start).count();
                    else
                        r.itl.push_back(std::chrono::duration<double>(now - last).count());
                    last = now;
                }
                if (auto u = chunk.find("usage"); u != chunk.end() && u->is_object())
                    usage_tokens = json_get<int64_t>(*u, "completion_tokens", "usage");
            });
        } catch (const Error& e) {
            r.error = e.what();
            return false;  // stop reading: the request has failed
        }
        return true;
    };
    httplib::Result res = client.send(req);
    r.latency = std::chrono::duration<double>(Clock::now() - start).count();
    if (r.error.empty() && !res) {
        r.unanswered = status == 0;
        r.error = fmt::format("connection to {}:{} failed ({})", o.host, o.port,
                              httplib::to_string(res.error()));
    }
    if (r.error.empty() && status != 200) r.error = fmt::format("HTTP {}: {}", status, error_body);
    if (r.error.empty() && num_chunks == 0) r.error = "no chunk with choices in the stream";
    if (r.error.empty() && !done) r.error = "the stream ended without data: [DONE]";
    r.output_tokens = usage_tokens >= 0 ? usage_tokens : num_chunks;
    r.success = r.error.empty();
    return r;
}

// numpy.percentile's default (linear interpolation between closest ranks), in milliseconds.
Json stats_ms(std::vector<double> seconds, const std::string& name) {
    Json out;
    std::sort(seconds.begin(), seconds.end());
    auto percentile = [&](double q) {
        if (seconds.empty()) return 0.0;
        const double pos = q / 100 * double(seconds.size() - 1);
        const size_t lo = size_t(pos), hi = std::min(lo + 1, seconds.size() - 1);
        return 1000 * (seconds[lo] + (pos - double(lo)) * (seconds[hi] - seconds[lo]));
    };
    double sum = 0;
    for (double s : seconds) sum += s;
    out["mean_" + name + "_ms"] = seconds.empty() ? 0.0 : 1000 * sum / double(seconds.size());
    out["median_" + name + "_ms"] = percentile(50);
    out["p99_" + name + "_ms"] = percentile(99);
    return out;
}

void print_report(const Json& j) {
    auto line = [](const char* label, const std::string& value) {
        std::printf("%-40s %s\n", label, value.c_str());
    };
    auto num = [&](const char* label, double v) { line(label, fmt::format("{:.2f}", v)); };
    auto section = [](const char* title) {
        std::printf("%s\n", fmt::format("{:-^50}", title).c_str());
    };
    std::printf("%s\n", fmt::format("{:=^50}", " Serving Benchmark Result ").c_str());
    line("Successful requests:", std::to_string(j["completed"].get<int64_t>()));
    line("Failed requests:", std::to_string(j["failed"].get<int64_t>()));
    num("Benchmark duration (s):", j["duration"]);
    line("Total input tokens:", std::to_string(j["total_input_tokens"].get<int64_t>()));
    line("Total generated tokens:", std::to_string(j["total_output_tokens"].get<int64_t>()));
    num("Request throughput (req/s):", j["request_throughput"]);
    num("Output token throughput (tok/s):", j["output_throughput"]);
    num("Total token throughput (tok/s):", j["total_token_throughput"]);
    for (auto [key, title, label] :
         {std::tuple{"ttft", "Time to First Token", "TTFT"},
          std::tuple{"tpot", "Time per Output Token (excl. 1st token)", "TPOT"},
          std::tuple{"itl", "Inter-token Latency", "ITL"}}) {
        section(title);
        for (auto [stat, stat_label] :
             {std::pair{"mean", "Mean"}, {"median", "Median"}, {"p99", "P99"}})
            num(fmt::format("{} {} (ms):", stat_label, label).c_str(),
                j[fmt::format("{}_{}_ms", stat, key)]);
    }
    std::printf("%s\n", std::string(50, '=').c_str());
    std::fflush(stdout);
}

void run(const ServeBenchOptions& o) {
    if (!(o.request_rate > 0)) fail("--request-rate must be > 0 (or inf), got {}", o.request_rate);
    if (o.max_concurrency < 0)
        fail("--max-concurrency must be >= 0 (0: no limit), got {}", o.max_concurrency);
    const BenchWorkload w =
        o.workload == "random"
            ? make_random_workload(o.num_prompts, o.input_len, o.output_len, o.seed)
            : make_bench_workload(o.workload, o.balanced_file);
    const size_t n = w.prompts.size();
    std::ofstream json_file = open_output_file(o.json_out);
    std::vector<Json> bodies(n);
    for (size_t i = 0; i < n; ++i) {
        bodies[i] = {{"prompt", w.prompts[i]},
                     {"max_tokens", w.max_tokens[i]},
                     {"temperature", w.temperature},
                     {"ignore_eos", true},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}}};
        if (!o.model.empty()) bodies[i]["model"] = o.model;
    }

    // Arrival offsets: exponential gaps at the request rate (seeded), or all at zero.
    std::vector<double> arrival(n, 0.0);
    std::mt19937_64 rng(o.seed);
    std::exponential_distribution<double> gap(std::isinf(o.request_rate) ? 1.0 : o.request_rate);
    for (size_t i = 1; i < n && !std::isinf(o.request_rate); ++i)
        arrival[i] = arrival[i - 1] + gap(rng);

    constexpr std::ptrdiff_t kUnlimited = 1 << 20;
    std::counting_semaphore<kUnlimited> slots(
        o.max_concurrency > 0 ? std::ptrdiff_t(o.max_concurrency) : kUnlimited);
    std::vector<RequestResult> results(n);
    std::vector<std::jthread> threads;
    threads.reserve(n);
    const auto start = Clock::now();
    for (size_t i = 0; i < n; ++i) {
        std::this_thread::sleep_until(start + std::chrono::duration<double>(arrival[i]));
        slots.acquire();
        threads.emplace_back([&, i] {
            results[i] = send_request(o, bodies[i]);
            slots.release();
        });
    }
    threads.clear();  // joins
    const double duration = std::chrono::duration<double>(Clock::now() - start).count();

    int64_t completed = 0, input_tokens = 0, output_tokens = 0;
    std::vector<double> ttfts, tpots, itls;
    std::vector<std::string> errors;
    for (size_t i = 0; i < n; ++i) {
        const RequestResult& r = results[i];
        if (!r.success) {
            errors.push_back(r.error);
            continue;
        }
        completed += 1;
        input_tokens += int64_t(w.prompts[i].size());
        output_tokens += r.output_tokens;
        ttfts.push_back(r.ttft);
        if (r.output_tokens > 1)
            tpots.push_back((r.latency - r.ttft) / double(r.output_tokens - 1));
        itls.insert(itls.end(), r.itl.begin(), r.itl.end());
    }
    Json j = {
        {"workload", w.name},
        {"model", o.model},
        {"request_rate", std::isinf(o.request_rate) ? Json("inf") : Json(o.request_rate)},
        {"max_concurrency", o.max_concurrency > 0 ? Json(o.max_concurrency) : Json(nullptr)},
        {"num_prompts", n},
        {"completed", completed},
        {"failed", int64_t(n) - completed},
        {"duration", duration},
        {"total_input_tokens", input_tokens},
        {"total_output_tokens", output_tokens},
        {"request_throughput", double(completed) / duration},
        {"output_throughput", double(output_tokens) / duration},
        {"total_token_throughput", double(input_tokens + output_tokens) / duration},
        {"errors", Json(std::vector<std::string>(
                       errors.begin(), errors.begin() + std::min<size_t>(errors.size(), 10)))}};
    j.update(stats_ms(ttfts, "ttft"));
    j.update(stats_ms(tpots, "tpot"));
    j.update(stats_ms(itls, "itl"));
    print_report(j);
    if (!errors.empty())
        std::fprintf(stderr, "%zu requests failed; the first: %s\n", errors.size(),
                     errors[0].c_str());
    if (json_file.is_open()) {
        json_file << j.dump(2) << "\n";
        if (!json_file.flush()) fail("{}: cannot write", o.json_out);
    }
    const bool none_answered = std::all_of(results.begin(), results.end(),
                                           [](const RequestResult& r) { return r.unanswered; });
    if (n > 0 && none_answered)
        fail("all {} requests failed: nothing answers at {}:{} (is the server running?)", n, o.host,
             o.port);
    if (completed == 0) fail("all {} requests failed", n);
}

}  // namespace

void add_bench_serve(CLI::App& app, const std::string& name) {
    auto o = std::make_shared<ServeBenchOptions>();
    CLI::App* cmd = app.add_subcommand(
        name, "Load a running OpenAI-compatible server and report throughput and latency");
    cmd->footer("Example: miniinfer bench serve --port 8000 --workload balanced");
    cmd->add_option("--host", o->host, "Server host")->capture_default_str();
    cmd->add_option("--port", o->port, "Server port")->capture_default_str();
    cmd->add_option("--api-key", o->api_key, "Sent as 'Authorization: Bearer KEY'");
    cmd->add_option("--model", o->model, "The served model name (the request's 'model')");
    cmd->add_option("--workload", o->workload,
                    "balanced, decode128, decode256, short256, prefill256, bs1, random")
        ->capture_default_str();
    cmd->add_option("--balanced-file", o->balanced_file, "The balanced workload's prompts")
        ->capture_default_str();
    cmd->add_option("--num-prompts", o->num_prompts, "random: number of requests")
        ->capture_default_str();
    cmd->add_option("--input-len", o->input_len, "random: prompt tokens per request")
        ->capture_default_str();
    cmd->add_option("--output-len", o->output_len, "random: output tokens per request")
        ->capture_default_str();
    cmd->add_option("--request-rate", o->request_rate,
                    "Poisson arrivals per second; inf sends all at once")
        ->capture_default_str();
    cmd->add_option("--max-concurrency", o->max_concurrency,
                    "At most this many requests in flight (0: no limit)")
        ->capture_default_str();
    cmd->add_option("--seed", o->seed, "Seed of the random prompts and arrival times")
        ->capture_default_str();
    cmd->add_option("--json", o->json_out, "Also write the results as JSON here");
    cmd->callback([o] { run(*o); });
}

}  // namespace miniinfer::apps
