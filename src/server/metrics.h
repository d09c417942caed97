// Prometheus metrics for the server's /metrics endpoint, under vLLM's names, label and bucket
// boundaries, so dashboards and scrapers written for vLLM read MiniInfer unchanged (series vLLM
// has no counterpart for are named miniinfer:*). Rendered in
// the text exposition format 0.0.4 (Content-Type: text/plain; version=0.0.4; charset=utf-8).
//
// Thread-safe: the engine thread sets gauges and observes latencies while HTTP threads count
// finished requests and render; one mutex guards everything (updates are a few per step).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace miniinfer {

class Metrics {
  public:
    // Every series carries the label model_name="<model_name>" (escaped on render).
    explicit Metrics(std::string model_name);

    // Gauges, set after every engine step. kv_cache_usage is the fraction of KV pages in use;
    // outside [0, 1] is a bug (MI_CHECK).
    void set_requests(int64_t running, int64_t waiting);
    void set_kv_cache_usage(double fraction);

    // Counters; they only grow (a negative increment is a bug, MI_CHECK).
    void add_tokens(int64_t prompt, int64_t generation);
    void add_prefix_cache(int64_t queried_tokens, int64_t hit_tokens);
    void add_preemptions(int64_t n);
    // One finished request. stop, length, abort and error are always exported (as 0 until
    // seen, like vLLM); any other reason gets its own series on first use.
    void add_request_finished(const std::string& finish_reason);

    // Histograms, in seconds.
    void observe_time_to_first_token(double s);
    void observe_time_per_output_token(double s);
    void observe_inter_token_latency(double s);
    void observe_e2e_request_latency(double s);
    // Structured output's host time (MiniInfer's own series): one step's token masks, one
    // grammar built and compiled (LLMEngine::StructuredTimers).
    void observe_structured_mask(double s);
    void observe_grammar_compile(double s);

    // The whole /metrics body: # HELP and # TYPE lines, then the samples, for every metric.
    std::string render() const;

  private:
    // Fixed upper bounds; counts[i] is the number of observations in (bounds[i-1], bounds[i]],
    // counts.back() those above the last bound. Cumulated only when rendered.
    struct Histogram {
        explicit Histogram(std::vector<double> upper_bounds);
        void observe(double v);
        std::vector<double> bounds;
        std::vector<int64_t> counts;  // [bounds.size() + 1]
        double sum = 0;
        int64_t count = 0;
    };

    const std::string label_;  // model_name="..." already escaped
    mutable std::mutex mutex_;
    int64_t num_running_ = 0, num_waiting_ = 0;
    double kv_cache_usage_ = 0;
    int64_t prompt_tokens_ = 0, generation_tokens_ = 0;
    int64_t prefix_queries_ = 0, prefix_hits_ = 0;
    int64_t preemptions_ = 0;
    std::map<std::string, int64_t> finished_;  // finish_reason -> requests
    Histogram ttft_, tpot_, itl_, e2e_, structured_mask_, grammar_compile_;
};

// `value` escaped for a label value of the text format: backslash, double quote and newline.
std::string escape_label_value(const std::string& value);

}  // namespace miniinfer
