#include "engine/grammar_compiler.h"

namespace miniinfer {

GrammarCompiler::GrammarCompiler(std::function<Compiled(const StructuredOutput&)> compile)
    : compile_(std::move(compile)), thread_([this] { run(); }) {}

GrammarCompiler::~GrammarCompiler() {
    {
        std::lock_guard lock(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
}

std::shared_future<GrammarCompiler::Compiled> GrammarCompiler::compile(
    const StructuredOutput& spec) {
    std::string key = spec.key();
    std::lock_guard lock(mutex_);
    if (auto it = in_flight_.find(key); it != in_flight_.end()) return it->second;
    Job& job = queue_.emplace_back(Job{.key = key, .spec = spec, .done = {}});
    std::shared_future<Compiled> result = job.done.get_future().share();
    in_flight_.emplace(std::move(key), result);
    wake_.notify_all();
    return result;
}

void GrammarCompiler::run() {
    std::unique_lock lock(mutex_);
    while (true) {
        wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        Job job = std::move(queue_.front());
        queue_.pop_front();
        lock.unlock();
        Compiled compiled;
        std::exception_ptr error;
        try {
            compiled = compile_(job.spec);
        } catch (...) {
            error = std::current_exception();
        }
        lock.lock();
        // Settled and forgotten together: a later compile() of this key finds it in the
        // caller's cache (or, after a failure, tries again).
        if (error)
            job.done.set_exception(error);
        else
            job.done.set_value(std::move(compiled));
        in_flight_.erase(job.key);
    }
}

}  // namespace miniinfer
