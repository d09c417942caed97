// A context-free grammar over bytes, in two forms.
//
// Expr: a tree (sequence, alternation, repetition, byte class, rule reference) that the front
// ends build: GBNF (gbnf.h), regular expressions (regex.h), JSON Schema (json_schema.h).
// Grammar: the lowered form the matcher runs. Every rule is a list of alternatives; every
// alternative is a run of elements ending in kEnd, all in one flat array, so a parser
// position is one int32 index. Elements are a byte class, a byte class repeated zero or more
// times in place (kBytesStar: strings, digits and whitespace loop without touching the stack),
// or a rule reference. Characters beyond ASCII are byte sequences (UTF-8), as tokens are.
//
// Lowering rejects (miniinfer::Error) an undefined rule, a rule defined twice and left
// recursion (a rule that can reach itself without consuming a byte), which a pushdown
// matcher cannot run, and a root that can never complete (nothing could be sampled); it
// throws when the lowered grammar exceeds kMaxGrammarElements.
#pragma once

#include <bitset>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace miniinfer::structured {

using ByteSet = std::bitset<256>;

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

struct Expr {
    enum class Kind { kBytes, kSeq, kAlt, kRepeat, kRef };
    Kind kind = Kind::kSeq;
    ByteSet bytes;                  // kBytes
    std::vector<ExprPtr> children;  // kSeq, kAlt; kRepeat: one child
    int min = 0;                    // kRepeat
    int max = -1;                   // kRepeat; -1: unbounded
    std::string rule;               // kRef: the rule's name
};

ExprPtr bytes_expr(const ByteSet& bytes);
ExprPtr byte_range(uint8_t lo, uint8_t hi);
ExprPtr literal(std::string_view text);  // the bytes of text, in order ("" is empty)
ExprPtr seq(std::vector<ExprPtr> children);
ExprPtr alt(std::vector<ExprPtr> children);
ExprPtr repeat(ExprPtr child, int min, int max);  // max -1: unbounded
// The decimal count of a {m,n} repetition at text[i], i moved past its digits (GBNF and regex
// alike); the error to raise, with the parser's position, when none starts there or it is over
// 100,000.
struct RepeatCount {
    int value = 0;
    const char* error = nullptr;
};
RepeatCount parse_repeat_count(std::string_view text, size_t& i);
ExprPtr star(ExprPtr child);
ExprPtr plus(ExprPtr child);
ExprPtr optional(ExprPtr child);
ExprPtr ref(std::string rule);
ExprPtr empty_expr();

// Largest number of elements a lowered grammar may have (bounded repetitions multiply).
inline constexpr int kMaxGrammarElements = 1 << 20;

struct Grammar {
    enum class ElemKind : uint8_t { kBytes, kBytesStar, kRef, kEnd };
    struct Elem {
        ElemKind kind;
        int32_t arg;  // kBytes, kBytesStar: index into classes; kRef: rule index
    };
    std::vector<Elem> elems;
    std::vector<ByteSet> classes;
    std::vector<std::vector<int32_t>> rule_alts;  // per rule: positions of its alternatives
    std::vector<std::string> rule_names;
    int32_t root = 0;

    bool is_terminal(int32_t pos) const {
        return elems[pos].kind == ElemKind::kBytes || elems[pos].kind == ElemKind::kBytesStar;
    }
    const ByteSet& byte_class(int32_t pos) const { return classes[elems[pos].arg]; }
    // One rule per line, in GBNF-like notation (for errors and tests).
    std::string to_string() const;
};

// g's language after up to max_count bytes of `lead` (the blank line a reasoning model writes
// between "</think>" and its answer): a new root whose alternatives are 0..max_count such
// bytes, then g's root. max_count in [0, 8].
Grammar with_optional_lead(Grammar g, const ByteSet& lead, int max_count);

// Collects named rules, then lowers them. Rule names are what users wrote (GBNF) or generated
// names (JSON Schema, regex); lowering adds helper rules named "<rule>_<n>".
class GrammarBuilder {
  public:
    // Error if `name` is already defined.
    void add_rule(const std::string& name, ExprPtr body);
    bool has_rule(const std::string& name) const { return rules_.count(name) != 0; }
    // Lowers every rule reachable from `root`. Throws Error as the file comment says.
    Grammar build(const std::string& root) const;

  private:
    std::map<std::string, ExprPtr> rules_;
    std::vector<std::string> order_;
};

}  // namespace miniinfer::structured
