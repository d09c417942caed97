#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "server/metrics.h"

using namespace miniinfer;

namespace {

// "name{labels}" -> value, for every sample line of a rendered body.
std::map<std::string, double> samples(const std::string& body) {
    std::map<std::string, double> out;
    std::istringstream in(body);
    for (std::string line; std::getline(in, line);) {
        if (line.empty() || line[0] == '#') continue;
        const size_t space = line.rfind(' ');
        EXPECT_NE(space, std::string::npos) << line;
        EXPECT_TRUE(out.emplace(line.substr(0, space), std::stod(line.substr(space + 1))).second)
            << "duplicate series " << line;
    }
    return out;
}

const std::string kLabel = "{model_name=\"qwen\"}";

}  // namespace

TEST(Metrics, FreshRenderHasEverySeriesAtZero) {
    Metrics m("qwen");
    const std::string body = m.render();
    auto s = samples(body);
    for (const char* name :
         {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
          "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
          "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
          "vllm:num_preemptions_total", "vllm:time_to_first_token_seconds_count",
          "vllm:time_per_output_token_seconds_count", "vllm:inter_token_latency_seconds_count",
          "vllm:e2e_request_latency_seconds_sum"}) {
        ASSERT_TRUE(s.count(name + kLabel)) << name;
        EXPECT_EQ(s[name + kLabel], 0.0) << name;
    }
    for (const char* reason : {"stop", "length", "abort", "error"})
        EXPECT_EQ(s.at(fmt::format(
                      "vllm:request_success_total{{model_name=\"qwen\",finished_reason=\"{}\"}}",
                      reason)),
                  0.0);
    EXPECT_NE(body.find("# TYPE vllm:kv_cache_usage_perc gauge\n"), std::string::npos);
    EXPECT_NE(body.find("# TYPE vllm:prompt_tokens_total counter\n"), std::string::npos);
    EXPECT_NE(body.find("# TYPE vllm:e2e_request_latency_seconds histogram\n"), std::string::npos);
    EXPECT_NE(body.find("# HELP vllm:num_requests_waiting "), std::string::npos);
}

TEST(Metrics, StructuredOutputTimesAreHistograms) {
    Metrics m("qwen");
    auto s = samples(m.render());
    for (const char* name :
         {"miniinfer:structured_mask_seconds", "miniinfer:grammar_compile_seconds"}) {
        EXPECT_EQ(s.at(std::string(name) + "_count" + kLabel), 0.0) << name;
        EXPECT_EQ(s.at(std::string(name) + "_sum" + kLabel), 0.0) << name;
    }
    m.observe_structured_mask(0.00002);
    m.observe_structured_mask(0.003);
    m.observe_grammar_compile(0.9);
    const std::string body = m.render();
    s = samples(body);
    EXPECT_EQ(s["miniinfer:structured_mask_seconds_count" + kLabel], 2);
    EXPECT_DOUBLE_EQ(s["miniinfer:structured_mask_seconds_sum" + kLabel], 0.00302);
    EXPECT_EQ(s["miniinfer:structured_mask_seconds_bucket{model_name=\"qwen\",le=\"2.5e-05\"}"], 1);
    EXPECT_EQ(s["miniinfer:structured_mask_seconds_bucket{model_name=\"qwen\",le=\"+Inf\"}"], 2);
    EXPECT_EQ(s["miniinfer:grammar_compile_seconds_count" + kLabel], 1);
    EXPECT_EQ(s["miniinfer:grammar_compile_seconds_bucket{model_name=\"qwen\",le=\"0.5\"}"], 0);
    EXPECT_EQ(s["miniinfer:grammar_compile_seconds_bucket{model_name=\"qwen\",le=\"1.0\"}"], 1);
    EXPECT_NE(body.find("# TYPE miniinfer:grammar_compile_seconds histogram\n"), std::string::npos);
}

TEST(Metrics, GaugesOverwriteCountersAccumulate) {
    Metrics m("qwen");
    m.set_requests(3, 7);
    m.set_requests(2, 5);
    m.set_kv_cache_usage(0.25);
    m.add_tokens(100, 1);
    m.add_tokens(20, 9);
    m.add_prefix_cache(64, 16);
    m.add_prefix_cache(32, 32);
    m.add_preemptions(2);
    m.add_request_finished("stop");
    m.add_request_finished("stop");
    m.add_request_finished("length");
    m.add_request_finished("tool_calls");  // unknown reasons get their own series
    auto s = samples(m.render());
    EXPECT_EQ(s["vllm:num_requests_running" + kLabel], 2);
    EXPECT_EQ(s["vllm:num_requests_waiting" + kLabel], 5);
    EXPECT_EQ(s["vllm:kv_cache_usage_perc" + kLabel], 0.25);
    EXPECT_EQ(s["vllm:prompt_tokens_total" + kLabel], 120);
    EXPECT_EQ(s["vllm:generation_tokens_total" + kLabel], 10);
    EXPECT_EQ(s["vllm:prefix_cache_queries_total" + kLabel], 96);
    EXPECT_EQ(s["vllm:prefix_cache_hits_total" + kLabel], 48);
    EXPECT_EQ(s["vllm:num_preemptions_total" + kLabel], 2);
    const std::string success = "vllm:request_success_total{model_name=\"qwen\",finished_reason=";
    EXPECT_EQ(s[success + "\"stop\"}"], 2);
    EXPECT_EQ(s[success + "\"length\"}"], 1);
    EXPECT_EQ(s[success + "\"abort\"}"], 0);
    EXPECT_EQ(s[success + "\"tool_calls\"}"], 1);
}

TEST(Metrics, HistogramBucketsAreCumulativeAndInfEqualsCount) {
    Metrics m("qwen");
    // vLLM's TTFT bounds start 0.001, 0.005, 0.01; a value equal to a bound lands in that bucket.
    for (double v : {0.0005, 0.001, 0.003, 0.01, 3000.0}) m.observe_time_to_first_token(v);
    m.observe_e2e_request_latency(0.4);
    auto s = samples(m.render());
    const std::string b = "vllm:time_to_first_token_seconds_bucket{model_name=\"qwen\",le=";
    EXPECT_EQ(s.at(b + "\"0.001\"}"), 2);
    EXPECT_EQ(s.at(b + "\"0.005\"}"), 3);
    EXPECT_EQ(s.at(b + "\"0.01\"}"), 4);
    EXPECT_EQ(s.at(b + "\"2560.0\"}"), 4);  // whole numbers keep ".0", as in vLLM's output
    EXPECT_EQ(s.at(b + "\"+Inf\"}"), 5);
    EXPECT_EQ(s.at("vllm:time_to_first_token_seconds_count" + kLabel), 5);
    EXPECT_NEAR(s.at("vllm:time_to_first_token_seconds_sum" + kLabel), 3000.0145, 1e-9);

    // Every histogram: 22, 19, 19 and 21 finite bounds, non-decreasing, ending at the count.
    const std::map<std::string, size_t> num_bounds = {{"vllm:time_to_first_token_seconds", 22},
                                                      {"vllm:time_per_output_token_seconds", 19},
                                                      {"vllm:inter_token_latency_seconds", 19},
                                                      {"vllm:e2e_request_latency_seconds", 21}};
    for (const auto& [name, n] : num_bounds) {
        std::vector<double> buckets;
        for (const auto& [series, value] : s)
            if (series.starts_with(name + "_bucket{")) buckets.push_back(value);
        EXPECT_EQ(buckets.size(), n + 1) << name;
    }
    const std::string e2e = "vllm:e2e_request_latency_seconds_bucket{model_name=\"qwen\",le=";
    EXPECT_EQ(s.at(e2e + "\"0.3\"}"), 0);
    EXPECT_EQ(s.at(e2e + "\"0.5\"}"), 1);
    EXPECT_EQ(s.at(e2e + "\"+Inf\"}"), 1);
}

TEST(Metrics, BucketOrderInTheBodyIsAscending) {
    Metrics m("qwen");
    m.observe_inter_token_latency(0.02);
    m.observe_inter_token_latency(0.3);
    std::istringstream in(m.render());
    std::vector<double> cumulative;
    for (std::string line; std::getline(in, line);)
        if (line.starts_with("vllm:inter_token_latency_seconds_bucket"))
            cumulative.push_back(std::stod(line.substr(line.rfind(' ') + 1)));
    ASSERT_EQ(cumulative.size(), 20u);
    for (size_t i = 1; i < cumulative.size(); ++i) EXPECT_LE(cumulative[i - 1], cumulative[i]);
    EXPECT_EQ(cumulative.front(), 0);
    EXPECT_EQ(cumulative[1], 1);  // le=0.025
    EXPECT_EQ(cumulative.back(), 2);
}

TEST(Metrics, LabelValuesAreEscaped) {
    EXPECT_EQ(escape_label_value("plain/model-0.6B"), "plain/model-0.6B");
    EXPECT_EQ(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    Metrics m("we\"ird\\name\n");
    m.add_request_finished("x\"y");
    const std::string body = m.render();
    EXPECT_NE(body.find("vllm:num_requests_running{model_name=\"we\\\"ird\\\\name\\n\"} 0.0\n"),
              std::string::npos)
        << body;
    EXPECT_NE(body.find("finished_reason=\"x\\\"y\"} 1.0\n"), std::string::npos);
    // No raw newline leaked into a sample line: every line is a comment or ends in a number.
    std::istringstream in(body);
    for (std::string line; std::getline(in, line);)
        EXPECT_TRUE(line.starts_with("# ") || line.starts_with("vllm:") ||
                    line.starts_with("miniinfer:"))
            << line;
}

TEST(Metrics, ConcurrentUpdatesAreAllCounted) {
    Metrics m("qwen");
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&] {
            for (int i = 0; i < 1000; ++i) {
                m.add_tokens(1, 2);
                m.observe_inter_token_latency(0.05);
                m.add_request_finished("stop");
                if (i % 100 == 0) (void)m.render();
            }
        });
    for (auto& t : threads) t.join();
    auto s = samples(m.render());
    EXPECT_EQ(s["vllm:prompt_tokens_total" + kLabel], 4000);
    EXPECT_EQ(s["vllm:generation_tokens_total" + kLabel], 8000);
    EXPECT_EQ(s["vllm:inter_token_latency_seconds_count" + kLabel], 4000);
    EXPECT_EQ(s["vllm:request_success_total{model_name=\"qwen\",finished_reason=\"stop\"}"], 4000);
}

TEST(MetricsDeathTest, OutOfRangeUpdatesAreBugs) {
    Metrics m("qwen");
    EXPECT_DEATH(m.set_kv_cache_usage(1.5), "kv cache usage");
    EXPECT_DEATH(m.add_tokens(-1, 0), "negative token counts");
    EXPECT_DEATH(m.add_prefix_cache(4, 5), "prefix cache hits");
}
