#include "tokenizer/jinja/lexer.h"

#include <cctype>

#include "core/check.h"
#include "tokenizer/utf8.h"

namespace miniinfer::jinja {
namespace {

class Lexer {
  public:
    // Jinja reads every line ending as '\n' and drops one newline at the end of the source.
    explicit Lexer(std::string_view source) {
        for (size_t i = 0; i < source.size(); ++i) {
            if (source[i] != '\r')
                source_ += source[i];
            else if (i + 1 >= source.size() || source[i + 1] != '\n')
                source_ += '\n';
        }
        if (!source_.empty() && source_.back() == '\n') source_.pop_back();
        src_ = source_;
    }

    std::vector<Token> run() {
        size_t pos = 0;
        bool strip_next_text = false;  // the previous tag ended with '-'
        bool trim_newline = false;     // trim_blocks after the previous block/comment tag
        while (pos < src_.size()) {
            const size_t tag = find_tag(pos);
            std::string text(src_.substr(pos, tag - pos));
            if (strip_next_text)
                text.erase(0, text.find_first_not_of(" \t\n\r\v\f") == std::string::npos
                                  ? text.size()
                                  : text.find_first_not_of(" \t\n\r\v\f"));
            else if (trim_newline && !text.empty() && text[0] == '\n')
                text.erase(0, 1);
            sync_line(pos);
            if (tag == src_.size()) {
                emit_text(std::move(text));
                break;
            }
            const char kind = src_[tag + 1];  // '{', '%' or '#'
            const char modifier = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
            if (modifier == '-') {
                const size_t keep = text.find_last_not_of(" \t\n\r\v\f");
                text.resize(keep == std::string::npos ? 0 : keep + 1);
            } else if (kind != '{' && modifier != '+') {
                lstrip_line(text, tag);
            }
            emit_text(std::move(text));
            pos = tag + 2 + ((modifier == '-' || modifier == '+') ? 1 : 0);
            char close_modifier = '\0';
            if (kind == '#') {
                const size_t end = src_.find("#}", pos);
                if (end == std::string_view::npos) error("unterminated comment");
                close_modifier = src_[end - 1];
                pos = end + 2;
            } else {
                sync_line(tag);
                tokens_.push_back({kind == '{' ? Token::kExprOpen : Token::kStmtOpen, "", line_});
                pos = lex_tag(pos, kind == '{' ? '}' : '%', close_modifier);
            }
            strip_next_text = close_modifier == '-';
            trim_newline = kind != '{' && close_modifier != '+';
        }
        tokens_.push_back({Token::kEnd, "", line_});
        return std::move(tokens_);
    }

  private:
    [[noreturn]] void error(const std::string& msg) const {
        fail("chat template: line {}: {}", line_, msg);
    }

    size_t find_tag(size_t pos) const {
        for (size_t i = src_.find('{', pos); i != std::string_view::npos; i = src_.find('{', i + 1))
            if (i + 1 < src_.size() &&
                (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
                return i;
        return src_.size();
    }

    // lstrip_blocks: remove spaces/tabs between the line start and the tag, if only those.
    void lstrip_line(std::string& text, size_t tag) const {
        size_t i = text.size();
        while (i > 0 && (text[i - 1] == ' ' || text[i - 1] == '\t')) --i;
        const bool at_line_start =
            i > 0 ? text[i - 1] == '\n' : at_source_line_start(tag - text.size());
        if (at_line_start) text.resize(i);
    }
    bool at_source_line_start(size_t text_begin) const {
        return text_begin == 0 || src_[text_begin - 1] == '\n';
    }

    void emit_text(std::string text) {
        if (!text.empty()) tokens_.push_back({Token::kText, std::move(text), line_});
    }
    // Line numbers come from source offsets, so trimmed whitespace still counts.
    void sync_line(size_t pos) {
        for (; line_pos_ < pos && line_pos_ < src_.size(); ++line_pos_)
            line_ += src_[line_pos_] == '\n';
    }

    // Lexes the inside of {{ ... }} or {% ... %} from pos; returns the position after the close.
    size_t lex_tag(size_t pos, char close, char& close_modifier) {
        for (;;) {
            while (pos < src_.size() && std::isspace(uint8_t(src_[pos]))) ++pos;
            sync_line(pos);
            if (pos >= src_.size()) error("unterminated tag");
            // Close: "}}" / "%}", optionally preceded by '-' or '+'.
            for (int m = 0; m < 2; ++m) {
                const size_t at = pos + size_t(m);
                if (m == 1 && src_[pos] != '-' && src_[pos] != '+') break;
                if (at + 1 < src_.size() && src_[at] == close && src_[at + 1] == '}') {
                    close_modifier = m == 1 ? src_[pos] : '\0';
                    tokens_.push_back(
                        {close == '}' ? Token::kExprClose : Token::kStmtClose, "", line_});
                    return at + 2;
                }
            }
            const char c = src_[pos];
            if (std::isalpha(uint8_t(c)) || c == '_') {
                size_t end = pos;
                while (end < src_.size() && (std::isalnum(uint8_t(src_[end])) || src_[end] == '_'))
                    ++end;
                tokens_.push_back({Token::kName, std::string(src_.substr(pos, end - pos)), line_});
                pos = end;
            } else if (std::isdigit(uint8_t(c))) {
                size_t end = pos;
                while (end < src_.size() && (std::isdigit(uint8_t(src_[end])) || src_[end] == '_'))
                    ++end;
                bool is_float = false;
                if (end + 1 < src_.size() && src_[end] == '.' &&
                    std::isdigit(uint8_t(src_[end + 1]))) {
                    is_float = true;
                    for (++end; end < src_.size() && std::isdigit(uint8_t(src_[end])); ++end) {
                    }
                }
                if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
                    size_t e = end + 1;
                    if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
                    if (e < src_.size() && std::isdigit(uint8_t(src_[e]))) {
                        is_float = true;
                        for (end = e; end < src_.size() && std::isdigit(uint8_t(src_[end]));
                             ++end) {
                        }
                    }
                }
                std::string digits;
                for (size_t i = pos; i < end; ++i)
                    if (src_[i] != '_') digits += src_[i];
                tokens_.push_back({is_float ? Token::kFloat : Token::kInt, digits, line_});
                pos = end;
            } else if (c == '\'' || c == '"') {
                pos = lex_string(pos);
            } else {
                static const char* ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                            "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                            "]",  "{",  "}",  ",",  ".",  ":",  "|"};
                bool matched = false;
                for (const char* op : ops) {
                    const std::string_view o(op);
                    if (src_.substr(pos, o.size()) == o) {
                        tokens_.push_back({Token::kOp, std::string(o), line_});
                        pos += o.size();
                        matched = true;
                        break;
                    }
                }
                if (!matched) error(fmt::format("unexpected character '{}'", c));
            }
        }
    }

    size_t lex_string(size_t pos) {
        const char quote = src_[pos++];
        std::string value;
        while (pos < src_.size() && src_[pos] != quote) {
            const char c = src_[pos++];
            if (c == '\\' && pos < src_.size()) {
                pos = unescape(pos, value);
                continue;
            }
            value += c;
        }
        if (pos >= src_.size()) error("unterminated string");
        tokens_.push_back({Token::kString, std::move(value), line_});
        return pos + 1;
    }

    // Python's unicode-escape decoding of one escape (pos is just after the backslash).
    size_t unescape(size_t pos, std::string& value) const {
        const char e = src_[pos];
        static const std::string_view simple = "\\'\"abfnrtv", decoded = "\\'\"\a\b\f\n\r\t\v";
        if (const size_t k = simple.find(e); k != std::string_view::npos)
            return value += decoded[k], pos + 1;
        if (e == '\n') return pos + 1;  // backslash-newline continues the line
        auto hex = [&](size_t start, size_t len) -> int64_t {
            if (start + len > src_.size()) return -1;
            int64_t v = 0;
            for (size_t i = start; i < start + len; ++i) {
                if (!std::isxdigit(uint8_t(src_[i]))) return -1;
                v = v * 16 + (std::isdigit(uint8_t(src_[i])) ? src_[i] - '0'
                                                             : (std::tolower(src_[i]) - 'a' + 10));
            }
            return v;
        };
        if (e >= '0' && e <= '7') {
            int v = 0;
            size_t end = pos;
            while (end < pos + 3 && end < src_.size() && src_[end] >= '0' && src_[end] <= '7')
                v = v * 8 + (src_[end++] - '0');
            utf8::append(value, char32_t(v));
            return end;
        }
        const size_t len = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (len) {
            const int64_t v = hex(pos + 1, len);
            if (v < 0 || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
                error("bad escape in string");
            utf8::append(value, char32_t(v));
            return pos + 1 + len;
        }
        value += '\\';  // Python keeps unknown escapes as written
        return pos;
    }

    std::string source_;
    std::string_view src_;
    std::vector<Token> tokens_;
    int line_ = 1;
    size_t line_pos_ = 0;
};

}  // namespace

std::vector<Token> lex(std::string_view source) {
    return Lexer(source).run();
}

}  // namespace miniinfer::jinja
