#include "structured/regex.h"

#include <fmt/format.h>

#include "core/check.h"
#include "structured/utf8_ranges.h"

namespace miniinfer::structured {

namespace {

using Ranges = std::vector<CodepointRange>;

// Deeper groups would only serve to overflow the parser's stack.
constexpr int kMaxNesting = 256;

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const Ranges kSpace = {{'\t', '\r'}, {' ', ' '}};

class RegexParser {
  public:
    RegexParser(std::string_view pattern, bool json_string)
        : text_(pattern), json_string_(json_string) {}

    ExprPtr parse() {
        if (peek() == '^') ++i_;
        ExprPtr e = parse_alt();
        if (i_ < text_.size()) error("unbalanced ')'");
        return e;
    }

  private:
    [[noreturn]] void error(std::string_view what) const {
        fail("regex: {} at offset {} in '{}'", what, i_, text_);
    }
    char peek() const { return i_ < text_.size() ? text_[i_] : '\0'; }
    bool at_end() const { return i_ >= text_.size(); }

    ExprPtr parse_alt() {
        std::vector<ExprPtr> branches{parse_seq()};
        while (peek() == '|') {
            ++i_;
            branches.push_back(parse_seq());
        }
        return branches.size() == 1 ? branches[0] : alt(std::move(branches));
    }

    ExprPtr parse_seq() {
        std::vector<ExprPtr> items;
        while (!at_end() && peek() != '|' && peek() != ')') {
            if (peek() == '$') {
                ++i_;
                if (!at_end() && peek() != ')' && peek() != '|') error("'$' before the end");
                continue;
            }
            ExprPtr atom = parse_atom();
            items.push_back(parse_quantifier(std::move(atom)));
        }
        return items.size() == 1 ? items[0] : seq(std::move(items));
    }

    int parse_int() {
        const RepeatCount count = parse_repeat_count(text_, i_);
        if (count.error) error(count.error);
        return count.value;
    }

    ExprPtr parse_quantifier(ExprPtr atom) {
        for (;;) {
            int min = 0, max = -1;
            const char c = peek();
            if (c == '*') {
                ++i_;
            } else if (c == '+') {
                ++i_;
                min = 1;
            } else if (c == '?') {
                ++i_;
                max = 1;
            } else if (c == '{' && i_ + 1 < text_.size() && std::isdigit(uint8_t(text_[i_ + 1]))) {
                ++i_;
                min = max = parse_int();
                if (peek() == ',') {
                    ++i_;
                    max = peek() == '}' ? -1 : parse_int();
                }
                if (peek() != '}') error("unterminated {m,n}");
                ++i_;
                if (max >= 0 && max < min) error("{m,n} with n < m");
            } else {
                return atom;
            }
            if (peek() == '?') ++i_;  // lazy: the same language
            if (peek() == '+') error("possessive quantifier");
            atom = repeat(std::move(atom), min, max);
        }
    }

    ExprPtr parse_atom() {
        const char c = peek();
        if (c == '(') return parse_group();
        if (c == '[') return chars(parse_class());
        if (c == '.') {
            ++i_;
            return chars(complement_ranges({{'\n', '\n'}}));
        }
        if (c == '\\') {
            Ranges r;
            parse_escape(r, /*in_class=*/false);
            return chars(r);
        }
        if (c == '*' || c == '+' || c == '?') error("quantifier without anything to repeat");
        if (c == '^') error("'^' after the start");
        const uint32_t cp = decode_utf8(text_, i_);
        return chars({{cp, cp}});
    }

    ExprPtr parse_group() {
        if (++depth_ > kMaxNesting) error("groups nested too deeply");
        ++i_;
        if (peek() == '?') {
            const std::string_view rest = text_.substr(i_);
            if (rest.starts_with("?:")) {
                i_ += 2;
            } else if (rest.starts_with("?P<") || (rest.starts_with("?<") && rest.size() > 2 &&
                                                   rest[2] != '=' && rest[2] != '!')) {
                const size_t close = text_.find('>', i_);
                if (close == std::string_view::npos) error("unterminated group name");
                i_ = close + 1;
            } else if (rest.starts_with("?=") || rest.starts_with("?!") ||
                       rest.starts_with("?<=") || rest.starts_with("?<!")) {
                error("lookaround (?=, ?!, ?<=, ?<!) is not supported");
            } else {
                error("inline flags or group extension '(?' is not supported");
            }
        }
        ExprPtr e = parse_alt();
        if (peek() != ')') error("missing ')'");
        ++i_;
        --depth_;
        return e;
    }

    uint32_t parse_hex(size_t num_digits) {
        uint32_t v = 0;
        for (size_t k = 0; k < num_digits; ++k) {
            const char h = peek();
            if (!std::isxdigit(uint8_t(h))) error("bad hex escape");
            v = v * 16 + uint32_t(std::isdigit(uint8_t(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
            ++i_;
        }
        return v;
    }

    // An escape after '\': appends its code points to r.
    void parse_escape(Ranges& r, bool in_class) {
        ++i_;
        if (at_end()) error("trailing '\\'");
        const char c = text_[i_++];
        auto add = [&r](const Ranges& s) { r.insert(r.end(), s.begin(), s.end()); };
        auto add_cp = [&r](uint32_t cp) { r.push_back({cp, cp}); };
        switch (c) {
            case 'd':
                return add(kDigit);
            case 'D':
                return add(complement_ranges(kDigit));
            case 'w':
                return add(kWord);
            case 'W':
                return add(complement_ranges(kWord));
            case 's':
                return add(kSpace);
            case 'S':
                return add(complement_ranges(kSpace));
            case 'n':
                return add_cp('\n');
            case 't':
                return add_cp('\t');
            case 'r':
                return add_cp('\r');
            case 'f':
                return add_cp('\f');
            case 'v':
                return add_cp('\v');
            case '0':
                return add_cp(0);
            case 'x':
                return add_cp(parse_hex(2));
            case 'u':
                if (peek() == '{') {
                    ++i_;
                    uint32_t v = 0;
                    while (peek() != '}') v = v * 16 + parse_hex(1);
                    ++i_;
                    return add_cp(v);
                }
                return add_cp(parse_hex(4));
            case 'b':
                if (in_class) return add_cp('\b');
                error("word boundary \\b is not supported");
            case 'B':
                error("word boundary \\B is not supported");
            default:
                if (std::isdigit(uint8_t(c))) error("backreference is not supported");
                if (std::isalpha(uint8_t(c))) error(fmt::format("unknown escape \\{}", c));
                --i_;
                const uint32_t cp = decode_utf8(text_, i_);
                return add_cp(cp);
        }
    }

    // One member of a class: a character, an escape, or the start of a range.
    Ranges parse_class() {
        ++i_;
        const bool negated = peek() == '^';
        if (negated) ++i_;
        Ranges r;
        bool first = true;
        while (!at_end() && (peek() != ']' || first)) {
            first = false;
            Ranges item;
            if (peek() == '\\') {
                parse_escape(item, /*in_class=*/true);
            } else {
                const uint32_t cp = decode_utf8(text_, i_);
                item.push_back({cp, cp});
            }
            if (peek() == '-' && i_ + 1 < text_.size() && text_[i_ + 1] != ']' &&
                item.size() == 1 && item[0].lo == item[0].hi) {
                ++i_;
                Ranges hi;
                if (peek() == '\\') {
                    parse_escape(hi, /*in_class=*/true);
                } else {
                    const uint32_t cp = decode_utf8(text_, i_);
                    hi.push_back({cp, cp});
                }
                if (hi.size() != 1 || hi[0].lo != hi[0].hi || hi[0].lo < item[0].lo)
                    error("bad class range");
                item[0].hi = hi[0].lo;
            }
            r.insert(r.end(), item.begin(), item.end());
        }
        if (at_end()) error("missing ']'");
        ++i_;
        return negated ? complement_ranges(r) : normalize_ranges(r);
    }

    ExprPtr chars(const Ranges& ranges) const {
        if (!json_string_) return utf8_class(ranges);
        // Inside a JSON string '"', '\' and control characters appear escaped.
        std::vector<ExprPtr> branches;
        Ranges plain;
        for (CodepointRange r : normalize_ranges(ranges)) {
            for (uint32_t cp = r.lo; cp <= std::min(r.hi, 0x5Cu); ++cp) {
                if (cp >= 0x20 && cp != '"' && cp != '\\') continue;
                std::string esc = "\\";
                if (cp == '"' || cp == '\\') {
                    esc += char(cp);
                } else if (cp == '\n') {
                    esc += 'n';
                } else if (cp == '\t') {
                    esc += 't';
                } else if (cp == '\r') {
                    esc += 'r';
                } else {
                    esc += fmt::format("u{:04x}", cp);
                }
                branches.push_back(literal(esc));
            }
            plain.push_back(r);
        }
        Ranges allowed;
        for (CodepointRange r : plain) {
            // drop controls, '"' and '\' from the plain part
            for (CodepointRange part : complement_ranges({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}})) {
                const uint32_t lo = std::max(r.lo, part.lo), hi = std::min(r.hi, part.hi);
                if (lo <= hi) allowed.push_back({lo, hi});
            }
        }
        if (!allowed.empty()) branches.insert(branches.begin(), utf8_class(allowed));
        if (branches.empty()) return alt({});
        return branches.size() == 1 ? branches[0] : alt(std::move(branches));
    }

    std::string_view text_;
    bool json_string_;
    size_t i_ = 0;
    int depth_ = 0;
};

}  // namespace

ExprPtr regex_to_expr(std::string_view pattern, bool json_string) {
    return RegexParser(pattern, json_string).parse();
}

Grammar regex_grammar(std::string_view pattern) {
    GrammarBuilder b;
    b.add_rule("root", regex_to_expr(pattern));
    return b.build("root");
}

}  // namespace miniinfer::structured
