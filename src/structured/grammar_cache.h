// The grammar a request's StructuredOutput (config/structured_output.h) asks its output to
// follow, and the compiled grammars of one vocabulary, cached by content: the same schema sent
// by many requests is compiled once.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/structured_output.h"
#include "structured/compiled_grammar.h"

namespace miniinfer::structured {

// The grammar a constraint describes (with reasoning_end set: after up to two newlines).
// Error (naming what is wrong) for a bad schema, regex or grammar.
Grammar build_grammar(const StructuredOutput& spec);

class GrammarCache {
  public:
    explicit GrammarCache(std::shared_ptr<const Vocabulary> vocab, size_t max_entries = 128);

    // The compiled grammar of spec (cached by spec.key()), compiling it on a miss (outside the
    // lock, so two threads may compile one spec at once; the first stored wins). Throws what
    // build_grammar throws; failures are not cached. Thread-safe. The least recently used entry
    // goes when full. compile_seconds, when given: the time this call spent building and
    // compiling the grammar (0 when it was cached).
    std::shared_ptr<const CompiledGrammar> get(const StructuredOutput& spec,
                                               double* compile_seconds = nullptr);

    // The compiled grammar of spec if cached (a hit), else null; never compiles and counts no
    // miss (the get() that follows does). Thread-safe.
    std::shared_ptr<const CompiledGrammar> find(const StructuredOutput& spec);

    const Vocabulary& vocab() const { return *vocab_; }
    int64_t num_hits() const;
    int64_t num_misses() const;

  private:
    using Entry = std::pair<std::string, std::shared_ptr<const CompiledGrammar>>;
    std::shared_ptr<const Vocabulary> vocab_;
    size_t max_entries_;
    mutable std::mutex mutex_;
    std::list<Entry> lru_;  // most recent first
    std::unordered_map<std::string, std::list<Entry>::iterator> index_;
    int64_t num_hits_ = 0;
    int64_t num_misses_ = 0;
};

}  // namespace miniinfer::structured
