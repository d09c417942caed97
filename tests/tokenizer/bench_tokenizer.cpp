// Encode throughput on a file of documents (one JSON string per line, as written by
// tools/bench_tokenizer.py): single-thread encode() and encode_batch() over all threads.
// usage: bench_tokenizer MODEL_DIR DOCS_JSONL [REPEATS]
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "core/json.h"
#include "core/thread_pool.h"
#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s MODEL_DIR DOCS_JSONL [REPEATS]\n", argv[0]);
        return 2;
    }
    using namespace miniinfer;
    using Clock = std::chrono::steady_clock;
    const Tokenizer tok = Tokenizer::load(argv[1]);
    std::vector<std::string> docs;
    std::ifstream in(argv[2]);
    size_t bytes = 0;
    for (std::string line; std::getline(in, line);) {
        docs.push_back(Json::parse(line).get<std::string>());
        bytes += docs.back().size();
    }
    const int repeats = argc > 3 ? std::atoi(argv[3]) : 5;
    size_t tokens = 0;
    for (const auto& d : docs) tokens += tok.encode(d).size();  // warm-up (fills the word cache)
    double best = 1e30;
    for (int r = 0; r < repeats; ++r) {
        const auto t0 = Clock::now();
        for (const auto& d : docs) tokens += tok.encode(d).size() > 0 ? 0 : 0;
        best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    tokens = 0;
    for (const auto& d : docs) tokens += tok.encode(d).size();
    double best_batch = 1e30;
    for (int r = 0; r < repeats; ++r) {
        const auto t0 = Clock::now();
        auto out = tok.encode_batch(docs);
        best_batch = std::min(best_batch, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    std::printf(
        "{\"docs\": %zu, \"bytes\": %zu, \"tokens\": %zu, \"single_s\": %.6f, \"single_MBps\": "
        "%.2f, "
        "\"batch_threads\": %d, \"batch_s\": %.6f, \"batch_MBps\": %.2f}\n",
        docs.size(), bytes, tokens, best, bytes / best / 1e6, ThreadPool::global().num_threads(),
        best_batch, bytes / best_batch / 1e6);
    return 0;
}
