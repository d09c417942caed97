// What a request asks its output to follow, and the compiled grammars of one vocabulary,
// cached by content: the same schema sent by many requests is compiled once.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "structured/compiled_grammar.h"

namespace miniinfer::structured {

struct StructuredSpec {
    enum class Kind { kJsonSchema, kJsonObject, kRegex, kGrammar, kChoice };
    Kind kind = Kind::kJsonObject;
    std::string text;                  // the schema (JSON text), the regex or the GBNF grammar
    std::vector<std::string> choices;  // kChoice: the output is exactly one of these
    // kJsonSchema: texts around the document (a tool call's "<tool_call>\n" and "\n</tool_call>").
    std::string prefix, suffix;

    // Identifies the spec's content (the cache key).
    std::string key() const;
};

// The grammar a spec describes. Error (naming what is wrong) for a bad schema, regex or grammar.
Grammar build_grammar(const StructuredSpec& spec);

class GrammarCache {
  public:
    explicit GrammarCache(std::shared_ptr<const Vocabulary> vocab, size_t max_entries = 128);

    // The compiled grammar of spec, compiling it on a miss (outside the lock, so two threads
    // may compile one spec at once; the first stored wins). Throws what build_grammar throws;
    // failures are not cached. Thread-safe. The least recently used entry goes when full.
    std::shared_ptr<const CompiledGrammar> get(const StructuredSpec& spec);

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
