// Prints a /metrics body with every metric populated (a few observations in each histogram, an
// escaped model name, an extra finish reason), for `promtool check metrics` to lint in ctest.
#include <cstdio>

#include "server/metrics.h"

int main() {
    miniinfer::Metrics m("Qwen/Qwen3-0.6B \"demo\"");
    m.set_requests(3, 1);
    m.set_kv_cache_usage(0.4375);
    m.add_tokens(1234, 567);
    m.add_prefix_cache(1024, 256);
    m.add_preemptions(1);
    for (const char* reason : {"stop", "length", "length", "abort", "error", "tool_calls"})
        m.add_request_finished(reason);
    for (double s : {0.0004, 0.02, 0.3, 7.0, 5000.0}) {
        m.observe_time_to_first_token(s);
        m.observe_time_per_output_token(s / 10);
        m.observe_inter_token_latency(s / 10);
        m.observe_e2e_request_latency(s * 3);
        m.observe_structured_mask(s / 1000);
        m.observe_grammar_compile(s / 10);
    }
    std::fputs(m.render().c_str(), stdout);
    return 0;
}
