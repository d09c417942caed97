#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>

#include "core/check.h"

namespace miniinfer {
namespace {

// vLLM's bucket boundaries (vllm/v1/metrics/loggers.py), in seconds.
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                          0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                          20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kTokenLatencyBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                                  0.3,  0.4,   0.5,  0.75,  1.0, 2.5,  5.0,
                                                  7.5,  10.0,  20.0, 40.0,  80.0};
const std::vector<double> kRequestLatencyBuckets = {
    0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
// Structured output: a step's masks take microseconds along a document, milliseconds for a
// batch of hard positions; a grammar compiles in milliseconds, bounded strings in seconds.
const std::vector<double> kStructuredMaskBuckets = {0.00001, 0.000025, 0.00005, 0.0001, 0.00025,
                                                    0.0005,  0.001,    0.0025,  0.005,  0.01,
                                                    0.025,   0.05,     0.1};
const std::vector<double> kGrammarCompileBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                    0.25,  0.5,    1.0,   2.5,  5.0,   10.0, 30.0};
const char* const kFinishReasons[] = {"stop", "length", "abort", "error"};

// Like Python's prometheus_client: whole numbers keep a ".0" (le="1.0"), so PromQL matchers
// written against vLLM's output (le="1.0") match ours byte for byte.
std::string format_value(double v) {
    if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
    if (std::isnan(v)) return "NaN";
    if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{:.1f}", v);
    return fmt::format("{}", v);
}

void header(std::string& out, const char* name, const char* type, const char* help) {
    fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

}  // namespace

std::string escape_label_value(const std::string& value) {
    std::string out;
    out.reserve(value.size());
    for (char c : value) {
        if (c == '\\')
            out += "\\\\";
        else if (c == '"')
            out += "\\\"";
        else if (c == '\n')
            out += "\\n";
        else
            out += c;
    }
    return out;
}

Metrics::Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds(std::move(upper_bounds)), counts(bounds.size() + 1, 0) {}

void Metrics::Histogram::observe(double v) {
    // lower_bound: the first bound >= v, so v lands in the bucket whose le equals it.
    counts[size_t(std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin())] += 1;
    sum += v;
    count += 1;
}

Metrics::Metrics(std::string model_name)
    : label_(fmt::format("model_name=\"{}\"", escape_label_value(model_name))),
      ttft_(kTtftBuckets),
      tpot_(kTokenLatencyBuckets),
      itl_(kTokenLatencyBuckets),
      e2e_(kRequestLatencyBuckets),
      structured_mask_(kStructuredMaskBuckets),
      grammar_compile_(kGrammarCompileBuckets) {
    for (const char* reason : kFinishReasons) finished_[reason] = 0;
}

void Metrics::set_requests(int64_t running, int64_t waiting) {
    MI_CHECK(running >= 0 && waiting >= 0, "negative request counts {} {}", running, waiting);
    std::lock_guard lock(mutex_);
    num_running_ = running;
    num_waiting_ = waiting;
}

void Metrics::set_kv_cache_usage(double fraction) {
    MI_CHECK(fraction >= 0 && fraction <= 1, "kv cache usage {} outside [0, 1]", fraction);
    std::lock_guard lock(mutex_);
    kv_cache_usage_ = fraction;
}

void Metrics::add_tokens(int64_t prompt, int64_t generation) {
    MI_CHECK(prompt >= 0 && generation >= 0, "negative token counts {} {}", prompt, generation);
    std::lock_guard lock(mutex_);
    prompt_tokens_ += prompt;
    generation_tokens_ += generation;
}

void Metrics::add_prefix_cache(int64_t queried_tokens, int64_t hit_tokens) {
    MI_CHECK(hit_tokens >= 0 && hit_tokens <= queried_tokens, "prefix cache hits {} of {} queried",
             hit_tokens, queried_tokens);
    std::lock_guard lock(mutex_);
    prefix_queries_ += queried_tokens;
    prefix_hits_ += hit_tokens;
}

void Metrics::add_preemptions(int64_t n) {
    MI_CHECK(n >= 0, "negative preemptions {}", n);
    std::lock_guard lock(mutex_);
    preemptions_ += n;
}

void Metrics::add_request_finished(const std::string& finish_reason) {
    std::lock_guard lock(mutex_);
    finished_[finish_reason] += 1;
}

void Metrics::observe_time_to_first_token(double s) {
    std::lock_guard lock(mutex_);
    ttft_.observe(s);
}

void Metrics::observe_time_per_output_token(double s) {
    std::lock_guard lock(mutex_);
    tpot_.observe(s);
}

void Metrics::observe_inter_token_latency(double s) {
    std::lock_guard lock(mutex_);
    itl_.observe(s);
}

void Metrics::observe_e2e_request_latency(double s) {
    std::lock_guard lock(mutex_);
    e2e_.observe(s);
}

void Metrics::observe_structured_mask(double s) {
    std::lock_guard lock(mutex_);
    structured_mask_.observe(s);
}

void Metrics::observe_grammar_compile(double s) {
    std::lock_guard lock(mutex_);
    grammar_compile_.observe(s);
}

std::string Metrics::render() const {
    std::lock_guard lock(mutex_);
    std::string out;
    auto sample = [&](const char* name, const char* type, const char* help, double value) {
        header(out, name, type, help);
        fmt::format_to(std::back_inserter(out), "{}{{{}}} {}\n", name, label_, format_value(value));
    };
    auto histogram = [&](const char* name, const char* help, const Histogram& h) {
        header(out, name, "histogram", help);
        int64_t cumulative = 0;
        for (size_t i = 0; i <= h.bounds.size(); ++i) {
            cumulative += h.counts[i];
            const double le = i < h.bounds.size() ? h.bounds[i] : INFINITY;
            fmt::format_to(std::back_inserter(out), "{}_bucket{{{},le=\"{}\"}} {}\n", name, label_,
                           format_value(le), format_value(double(cumulative)));
        }
        fmt::format_to(std::back_inserter(out), "{}_sum{{{}}} {}\n{}_count{{{}}} {}\n", name,
                       label_, format_value(h.sum), name, label_, format_value(double(h.count)));
    };

    sample("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
           double(num_running_));
    sample("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
           double(num_waiting_));
    sample("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
           kv_cache_usage_);
    sample("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
           double(prompt_tokens_));
    sample("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
           double(generation_tokens_));
    sample("vllm:prefix_cache_queries_total", "counter",
           "Prefix cache queries, in terms of number of queried tokens.", double(prefix_queries_));
    sample("vllm:prefix_cache_hits_total", "counter",
           "Prefix cache hits, in terms of number of cached tokens.", double(prefix_hits_));
    sample("vllm:num_preemptions_total", "counter",
           "Cumulative number of preemption from the engine.", double(preemptions_));
    header(out, "vllm:request_success_total", "counter",
           "Count of successfully processed requests.");
    for (const auto& [reason, n] : finished_)
        fmt::format_to(std::back_inserter(out),
                       "vllm:request_success_total{{{},finished_reason=\"{}\"}} {}\n", label_,
                       escape_label_value(reason), format_value(double(n)));
    histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
              ttft_);
    histogram("vllm:time_per_output_token_seconds",
              "Histogram of time per output token in seconds.", tpot_);
    histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
              itl_);
    histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
              e2e_);
    histogram("miniinfer:structured_mask_seconds",
              "Histogram of the time a step spent filling structured output token masks, in "
              "seconds.",
              structured_mask_);
    histogram("miniinfer:grammar_compile_seconds",
              "Histogram of structured output grammar compile time (cache misses), in seconds.",
              grammar_compile_);
    return out;
}

}  // namespace miniinfer
