#include "tokenizer/jinja/py_str.h"

#include <utf8proc.h>

#include <algorithm>

#include "core/check.h"
#include "tokenizer/utf8.h"

namespace miniinfer::jinja::py {

bool is_space(char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

std::vector<char32_t> code_points(const std::string& s) {
    std::vector<char32_t> out;
    for (size_t pos = 0; pos < s.size();) out.push_back(utf8::next(s, pos));
    return out;
}
std::string from_code_points(const std::vector<char32_t>& cps, size_t begin, size_t end) {
    std::string out;
    for (size_t i = begin; i < end; ++i) utf8::append(out, cps[i]);
    return out;
}

std::string strip(const std::string& s, const std::optional<Value>& chars, bool left, bool right) {
    const auto cps = code_points(s);
    std::vector<char32_t> set;
    const bool custom = chars && !chars->is_none();
    if (custom) set = code_points(chars->str());
    auto strippable = [&](char32_t c) {
        return custom ? std::find(set.begin(), set.end(), c) != set.end() : is_space(c);
    };
    size_t b = 0, e = cps.size();
    while (left && b < e && strippable(cps[b])) ++b;
    while (right && e > b && strippable(cps[e - 1])) --e;
    return from_code_points(cps, b, e);
}

std::string map_case(const std::string& s, Case mode) {
    std::string out;
    bool prev_cased = false;
    size_t i = 0;
    for (size_t pos = 0; pos < s.size(); ++i) {
        const auto c = utf8proc_int32_t(utf8::next(s, pos));
        const bool upper = mode == Case::kUpper || (mode == Case::kTitle && !prev_cased) ||
                           (mode == Case::kCapitalize && i == 0);
        utf8::append(out, char32_t(upper ? utf8proc_toupper(c) : utf8proc_tolower(c)));
        const auto cat = utf8proc_category(c);
        prev_cased = cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL ||
                     cat == UTF8PROC_CATEGORY_LT;
    }
    return out;
}

List split(const std::string& s, const std::optional<Value>& sep_arg, int64_t maxsplit) {
    List out;
    if (!sep_arg || sep_arg->is_none()) {  // runs of whitespace, no empty strings
        const auto cps = code_points(s);
        size_t i = 0;
        while (i < cps.size()) {
            while (i < cps.size() && is_space(cps[i])) ++i;
            if (i == cps.size()) break;
            size_t j = i;
            if (maxsplit >= 0 && int64_t(out.size()) == maxsplit)
                j = cps.size();
            else
                while (j < cps.size() && !is_space(cps[j])) ++j;
            std::string piece = from_code_points(cps, i, j);
            if (j == cps.size() && maxsplit >= 0 && int64_t(out.size()) == maxsplit)
                piece = strip(piece, std::nullopt, false, true);
            out.push_back(piece);
            i = j;
        }
        return out;
    }
    const std::string sep = sep_arg->str();
    if (sep.empty()) fail("empty separator");
    size_t start = 0;
    for (size_t pos; (maxsplit < 0 || int64_t(out.size()) < maxsplit) &&
                     (pos = s.find(sep, start)) != std::string::npos;
         start = pos + sep.size())
        out.push_back(s.substr(start, pos - start));
    out.push_back(s.substr(start));
    return out;
}

std::string replace(const std::string& s, const std::string& old, const std::string& repl,
                    int64_t count) {
    if (old.empty()) fail("replace() with an empty pattern is not supported");
    std::string out;
    size_t start = 0, pos;
    for (int64_t n = 0; (count < 0 || n < count) && (pos = s.find(old, start)) != std::string::npos;
         ++n) {
        out.append(s, start, pos - start).append(repl);
        start = pos + old.size();
    }
    return out.append(s, start);
}

bool starts_or_ends(const std::string& s, const Value& arg, bool starts) {
    auto test = [&](const std::string& p) {
        return p.size() <= s.size() && (starts ? s.compare(0, p.size(), p) == 0
                                               : s.compare(s.size() - p.size(), p.size(), p) == 0);
    };
    if (arg.is_list())
        return std::any_of(arg.as_list().begin(), arg.as_list().end(),
                           [&](const Value& v) { return test(v.str()); });
    return test(arg.str());
}

std::string html_escape(const std::string& s) {
    std::string out;
    out.reserve(s.size());
    for (char c : s) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '\'':
                out += "&#39;";
                break;
            case '"':
                out += "&#34;";
                break;
            default:
                out += c;
        }
    }
    return out;
}

}  // namespace miniinfer::jinja::py
