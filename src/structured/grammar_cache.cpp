#include "structured/grammar_cache.h"

#include <chrono>

#include "core/check.h"
#include "structured/gbnf.h"
#include "structured/json_schema.h"
#include "structured/regex.h"

namespace miniinfer::structured {

namespace {

Grammar constraint_grammar(const StructuredOutput& spec) {
    switch (spec.kind) {
        case StructuredOutput::Kind::kJsonSchema:
            return json_schema_grammar(spec.text, spec.prefix, spec.suffix);
        case StructuredOutput::Kind::kJsonObject:
            return any_json_grammar();
        case StructuredOutput::Kind::kRegex:
            return regex_grammar(spec.text);
        case StructuredOutput::Kind::kGrammar:
            return parse_gbnf(spec.text);
        case StructuredOutput::Kind::kChoice: {
            if (spec.choices.empty()) fail("choice: the list of choices is empty");
            std::vector<ExprPtr> branches;
            for (const std::string& c : spec.choices) branches.push_back(literal(c));
            GrammarBuilder b;
            b.add_rule("root", alt(std::move(branches)));
            return b.build("root");
        }
    }
    MI_CHECK(false, "unknown structured output kind {}", int(spec.kind));
}

}  // namespace

Grammar build_grammar(const StructuredOutput& spec) {
    Grammar g = constraint_grammar(spec);
    if (spec.reasoning_end.empty()) return g;
    ByteSet newline;
    newline.set('\n');
    return with_optional_lead(std::move(g), newline, 2);
}

GrammarCache::GrammarCache(std::shared_ptr<const Vocabulary> vocab, size_t max_entries)
    : vocab_(std::move(vocab)), max_entries_(max_entries) {}

std::shared_ptr<const CompiledGrammar> GrammarCache::get(const StructuredOutput& spec,
                                                         double* compile_seconds) {
    if (compile_seconds) *compile_seconds = 0;
    const std::string key = spec.key();
    {
        std::lock_guard lock(mutex_);
        if (auto it = index_.find(key); it != index_.end()) {
            lru_.splice(lru_.begin(), lru_, it->second);
            ++num_hits_;
            return it->second->second;
        }
        ++num_misses_;
    }
    const auto start = std::chrono::steady_clock::now();
    auto compiled = std::make_shared<const CompiledGrammar>(build_grammar(spec), vocab_);
    if (compile_seconds)
        *compile_seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::lock_guard lock(mutex_);
    if (auto it = index_.find(key); it != index_.end()) return it->second->second;
    lru_.emplace_front(key, compiled);
    index_[key] = lru_.begin();
    if (lru_.size() > max_entries_) {
        index_.erase(lru_.back().first);
        lru_.pop_back();
    }
    return compiled;
}

std::shared_ptr<const CompiledGrammar> GrammarCache::find(const StructuredOutput& spec) {
    std::lock_guard lock(mutex_);
    auto it = index_.find(spec.key());
    if (it == index_.end()) return nullptr;
    lru_.splice(lru_.begin(), lru_, it->second);
    ++num_hits_;
    return it->second->second;
}

int64_t GrammarCache::num_hits() const {
    std::lock_guard lock(mutex_);
    return num_hits_;
}

int64_t GrammarCache::num_misses() const {
    std::lock_guard lock(mutex_);
    return num_misses_;
}

}  // namespace miniinfer::structured
