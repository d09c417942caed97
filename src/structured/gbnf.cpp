#include "structured/gbnf.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"
#include "structured/utf8_ranges.h"
#include "tokenizer/utf8.h"

namespace miniinfer::structured {

namespace {

// Deeper groups would only serve to overflow the parser's stack.
constexpr int kMaxNesting = 256;

bool is_name_char(char c) {
    return std::isalnum(uint8_t(c)) || c == '-' || c == '_';
}

class GbnfParser {
  public:
    explicit GbnfParser(std::string_view text) : text_(text) {}

    Grammar parse() {
        GrammarBuilder builder;
        skip_space();
        if (at_end()) error("the grammar is empty");
        while (!at_end()) {
            const std::string name = parse_name();
            skip_space();
            if (!text_.substr(i_).starts_with("::=")) error("expected '::=' after the rule name");
            i_ += 3;
            skip_space();
            builder.add_rule(name, parse_alternates());
            if (!at_end() && peek() == ')') error("unbalanced ')'");
        }
        if (!builder.has_rule("root")) fail("grammar: no rule named 'root'");
        return builder.build("root");
    }

  private:
    [[noreturn]] void error(std::string_view what) const {
        const size_t line = 1 + std::count(text_.begin(), text_.begin() + i_, '\n');
        fail("grammar: {} (line {})", what, line);
    }
    bool at_end() const { return i_ >= text_.size(); }
    char peek() const { return at_end() ? '\0' : text_[i_]; }

    void skip_space() {
        while (!at_end()) {
            if (peek() == '#') {
                while (!at_end() && peek() != '\n') ++i_;
            } else if (std::isspace(uint8_t(peek()))) {
                ++i_;
            } else {
                return;
            }
        }
    }

    std::string parse_name() {
        const size_t start = i_;
        while (!at_end() && is_name_char(peek())) ++i_;
        if (i_ == start) error(fmt::format("expected a rule name, found '{}'", peek()));
        return std::string(text_.substr(start, i_ - start));
    }

    // True when the next thing is `name ::=`: the current rule has ended.
    bool at_rule_start() const {
        size_t j = i_;
        while (j < text_.size() && is_name_char(text_[j])) ++j;
        if (j == i_) return false;
        while (j < text_.size() && std::isspace(uint8_t(text_[j]))) ++j;
        return text_.substr(j).starts_with("::=");
    }

    ExprPtr parse_alternates() {
        std::vector<ExprPtr> branches{parse_sequence()};
        while (peek() == '|') {
            ++i_;
            skip_space();
            branches.push_back(parse_sequence());
        }
        return branches.size() == 1 ? branches[0] : alt(std::move(branches));
    }

    ExprPtr parse_sequence() {
        std::vector<ExprPtr> items;
        while (!at_end() && peek() != '|' && peek() != ')' && !at_rule_start()) {
            ExprPtr atom = parse_atom();
            skip_space();
            items.push_back(parse_quantifiers(std::move(atom)));
        }
        return items.size() == 1 ? items[0] : seq(std::move(items));
    }

    ExprPtr parse_atom() {
        const char c = peek();
        if (c == '"') return parse_string();
        if (c == '[') return parse_class();
        if (c == '.') {
            ++i_;
            return utf8_class({{0, kMaxCodepoint}});
        }
        if (c == '(') {
            if (++depth_ > kMaxNesting) error("groups nested too deeply");
            ++i_;
            skip_space();
            ExprPtr e = parse_alternates();
            if (peek() != ')') error("missing ')'");
            ++i_;
            --depth_;
            return e;
        }
        if (is_name_char(c)) return ref(parse_name());
        error(fmt::format("unexpected '{}'", c));
    }

    int parse_int() {
        const RepeatCount count = parse_repeat_count(text_, i_);
        if (count.error) error(count.error);
        return count.value;
    }

    ExprPtr parse_quantifiers(ExprPtr atom) {
        for (;;) {
            const char c = peek();
            if (c == '*') {
                atom = star(std::move(atom));
            } else if (c == '+') {
                atom = plus(std::move(atom));
            } else if (c == '?') {
                atom = optional(std::move(atom));
            } else if (c == '{') {
                ++i_;
                skip_space();
                const int min = parse_int();
                int max = min;
                skip_space();
                if (peek() == ',') {
                    ++i_;
                    skip_space();
                    max = peek() == '}' ? -1 : parse_int();
                    skip_space();
                }
                if (peek() != '}') error("unterminated {m,n}");
                if (max >= 0 && max < min) error("{m,n} with n < m");
                atom = repeat(std::move(atom), min, max);
            } else {
                return atom;
            }
            ++i_;
            skip_space();
        }
    }

    uint32_t parse_hex(int num_digits) {
        uint32_t v = 0;
        for (int k = 0; k < num_digits; ++k) {
            const char h = peek();
            if (!std::isxdigit(uint8_t(h))) error("bad hex escape");
            v = v * 16 + uint32_t(std::isdigit(uint8_t(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
            ++i_;
        }
        return v;
    }

    uint32_t parse_char() {
        if (at_end()) error("unterminated string or class");
        if (peek() != '\\') return decode_utf8(text_, i_);
        ++i_;
        const char c = text_[i_++];
        switch (c) {
            case 'n':
                return '\n';
            case 't':
                return '\t';
            case 'r':
                return '\r';
            case 'x':
                return parse_hex(2);
            case 'u':
                return parse_hex(4);
            case 'U':
                return parse_hex(8);
            case '\\':
            case '"':
            case '[':
            case ']':
            case '-':
            case '^':
                return uint8_t(c);
            default:
                error(fmt::format("unknown escape '\\{}'", c));
        }
    }

    ExprPtr parse_string() {
        ++i_;
        std::string bytes;
        while (peek() != '"') {
            if (at_end()) error("unterminated string");
            const uint32_t cp = parse_char();
            if (cp > kMaxCodepoint) error("character beyond U+10FFFF");
            utf8::append(bytes, char32_t(cp));
        }
        ++i_;
        return literal(bytes);
    }

    ExprPtr parse_class() {
        ++i_;
        const bool negated = peek() == '^';
        if (negated) ++i_;
        std::vector<CodepointRange> ranges;
        while (peek() != ']') {
            if (at_end()) error("unterminated class");
            const uint32_t lo = parse_char();
            uint32_t hi = lo;
            if (peek() == '-' && i_ + 1 < text_.size() && text_[i_ + 1] != ']') {
                ++i_;
                hi = parse_char();
                if (hi < lo) error("class range out of order");
            }
            ranges.push_back({lo, hi});
        }
        ++i_;
        return utf8_class(negated ? complement_ranges(ranges) : ranges);
    }

    std::string_view text_;
    size_t i_ = 0;
    int depth_ = 0;
};

}  // namespace

Grammar parse_gbnf(std::string_view text) {
    return GbnfParser(text).parse();
}

}  // namespace miniinfer::structured
