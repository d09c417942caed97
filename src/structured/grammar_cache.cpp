#include "structured/grammar_cache.h"

#include <fmt/format.h>

#include "core/check.h"
#include "structured/gbnf.h"
#include "structured/json_schema.h"
#include "structured/regex.h"

namespace miniinfer::structured {

std::string StructuredSpec::key() const {
    std::string k = fmt::format("{}:{}:", int(kind), text.size());
    k += text;
    for (const std::string& c : choices) k += fmt::format(":{}:{}", c.size(), c);
    k += fmt::format("|{}:{}{}:{}", prefix.size(), prefix, suffix.size(), suffix);
    return k;
}

Grammar build_grammar(const StructuredSpec& spec) {
    switch (spec.kind) {
        case StructuredSpec::Kind::kJsonSchema:
            return json_schema_grammar(spec.text, spec.prefix, spec.suffix);
        case StructuredSpec::Kind::kJsonObject:
            return any_json_grammar();
        case StructuredSpec::Kind::kRegex:
            return regex_grammar(spec.text);
        case StructuredSpec::Kind::kGrammar:
            return parse_gbnf(spec.text);
        case StructuredSpec::Kind::kChoice: {
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

GrammarCache::GrammarCache(std::shared_ptr<const Vocabulary> vocab, size_t max_entries)
    : vocab_(std::move(vocab)), max_entries_(max_entries) {}

std::shared_ptr<const CompiledGrammar> GrammarCache::get(const StructuredSpec& spec) {
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
    auto compiled = std::make_shared<const CompiledGrammar>(build_grammar(spec), vocab_);
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

int64_t GrammarCache::num_hits() const {
    std::lock_guard lock(mutex_);
    return num_hits_;
}

int64_t GrammarCache::num_misses() const {
    std::lock_guard lock(mutex_);
    return num_misses_;
}

}  // namespace miniinfer::structured
