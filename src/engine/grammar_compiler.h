// GrammarCompiler: compiles structured-output grammars on one background thread, so that the
// engine thread never waits for one. The engine holds a request whose grammar is not cached
// back from scheduling until its future is ready; the other requests keep decoding meanwhile.
//
// One dedicated thread rather than ThreadPool: the pool runs one parallel_for at a time and the
// engine fills token masks with it every step, which a compile of tens of ms would hold up.
// Compiles run one at a time, in arrival order.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "config/structured_output.h"
#include "structured/compiled_grammar.h"

namespace miniinfer {

class GrammarCompiler {
  public:
    using Compiled = std::shared_ptr<const structured::CompiledGrammar>;
    // compile runs on the worker thread; what it throws (Error for a bad spec) the future
    // rethrows.
    explicit GrammarCompiler(std::function<Compiled(const StructuredOutput&)> compile);
    // Waits for the compile under way; queued ones are dropped (their futures hold
    // broken_promise).
    ~GrammarCompiler();
    GrammarCompiler(const GrammarCompiler&) = delete;
    GrammarCompiler& operator=(const GrammarCompiler&) = delete;

    // The compile of spec: the one queued or running for the same spec.key() (requests with one
    // schema share it), else a new one queued. Thread-safe.
    std::shared_future<Compiled> compile(const StructuredOutput& spec);

  private:
    struct Job {
        std::string key;
        StructuredOutput spec;
        std::promise<Compiled> done;
    };
    void run();

    std::function<Compiled(const StructuredOutput&)> compile_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<Job> queue_;
    std::unordered_map<std::string, std::shared_future<Compiled>> in_flight_;  // by key
    bool stop_ = false;
    std::thread thread_;  // last: it starts once the rest exists
};

}  // namespace miniinfer
