#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/hf_unicode.h"

namespace miniinfer {
namespace {

// GPT-2's split, used by ByteLevel when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct MatchData {
    pcre2_match_data* data;
    pcre2_match_context* context;
    pcre2_jit_stack* stack;
    MatchData(const pcre2_code* code) {
        data = pcre2_match_data_create_from_pattern(code, nullptr);
        context = pcre2_match_context_create(nullptr);
        // Long whitespace runs backtrack through (?!\S); give the JIT room (grows on demand).
        stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr);
        MI_CHECK(data && context && stack, "out of memory creating PCRE2 match data");
        pcre2_jit_stack_assign(context, nullptr, stack);
    }
    ~MatchData() {
        pcre2_jit_stack_free(stack);
        pcre2_match_context_free(context);
        pcre2_match_data_free(data);
    }
};

}  // namespace

namespace {

// Compiles `source` and JIT-compiles it where the platform allows (then `jit` is true).
pcre2_code* compile_jit(const std::string& source, uint32_t options, std::string_view original,
                        bool& jit) {
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(),
                                     options, &err, &err_offset, nullptr);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof(msg));
        fail("tokenizer.json: cannot compile pre-tokenizer regex: {} (pattern: {})",
             reinterpret_cast<const char*>(msg), original);
    }
    jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    return code;
}

}  // namespace

Regex::Regex(std::string_view pattern, bool literal) {
    const uint32_t options =
        PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : 0);
    // Patterns are Oniguruma's (what Hugging Face runs): align PCRE2's classes with its.
    code_ = compile_jit(literal ? std::string(pattern) : hf_unicode::adapt_regex(pattern), options,
                        pattern, jit_);
    fast_code_ =
        compile_jit(literal ? std::string(pattern) : hf_unicode::adapt_regex(pattern, true),
                    options, pattern, fast_jit_);
    uses_marks_ = !literal && pattern.find("\\p{M}") != std::string_view::npos;
}

Regex::~Regex() {
    pcre2_code_free(static_cast<pcre2_code*>(code_));
    pcre2_code_free(static_cast<pcre2_code*>(fast_code_));
}

void Regex::for_each_match(std::string_view text,
                           const std::function<void(size_t, size_t)>& on_match) const {
    const bool full = hf_unicode::has_hf_only_class_member(text, uses_marks_);
    const auto* code = static_cast<const pcre2_code*>(full ? code_ : fast_code_);
    const bool jit = full ? jit_ : fast_jit_;
    // One match block per thread and pattern use; reused across calls on this thread.
    thread_local std::vector<std::pair<const void*, std::unique_ptr<MatchData>>> cache;
    MatchData* md = nullptr;
    for (auto& [key, value] : cache)
        if (key == code) md = value.get();
    if (!md) {
        if (cache.size() >= 8) cache.erase(cache.begin());
        cache.emplace_back(code, std::make_unique<MatchData>(code));
        md = cache.back().second.get();
    }
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0;
    while (pos < text.size()) {
        const int rc =
            jit ? pcre2_jit_match(code, subject, text.size(), pos, 0, md->data, md->context)
                : pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md->data,
                              md->context);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof(msg));
            fail("pre-tokenizer regex failed on a {}-byte text: {}", text.size(),
                 reinterpret_cast<const char*>(msg));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md->data);
        size_t begin = ov[0], end = ov[1];
        if (end == begin) {  // empty match: step over one character, as Oniguruma's find_iter
            pos = end + 1;
            while (pos < text.size() && (uint8_t(text[pos]) & 0xC0) == 0x80) ++pos;
            continue;
        }
        on_match(begin, end);
        pos = end;
    }
}

PreTokenizer::PreTokenizer() = default;
PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

PreTokenizer PreTokenizer::from_json(const Json& spec) {
    PreTokenizer p;
    if (!spec.is_null()) p.add_step(spec);
    return p;
}

void PreTokenizer::add_step(const Json& spec) {
    const std::string where = "tokenizer.json pre_tokenizer";
    const std::string type = json_get<std::string>(spec, "type", where);
    if (type == "Sequence") {
        for (const Json& s : json_get<Json>(spec, "pretokenizers", where)) add_step(s);
    } else if (type == "Split") {
        const Json pattern = json_get<Json>(spec, "pattern", where);
        const std::string behavior = json_get<std::string>(spec, "behavior", where);
        if (json_get_or<bool>(spec, "invert", false, where))
            fail("{}: Split with invert is not supported", where);
        if (behavior != "Isolated" && behavior != "Removed")
            fail("{}: Split behavior '{}' is not supported", where, behavior);
        Step step;
        if (pattern.contains("Regex"))
            step.regex =
                std::make_shared<Regex>(json_get<std::string>(pattern, "Regex", where), false);
        else
            step.regex =
                std::make_shared<Regex>(json_get<std::string>(pattern, "String", where), true);
        step.remove_matches = behavior == "Removed";
        steps_.push_back(std::move(step));
    } else if (type == "ByteLevel") {
        Step step;
        step.add_prefix_space = json_get_or<bool>(spec, "add_prefix_space", false, where);
        if (json_get_or<bool>(spec, "use_regex", true, where))
            step.regex = std::make_shared<Regex>(kGpt2Pattern, false);
        if (step.regex || step.add_prefix_space) steps_.push_back(std::move(step));
        byte_level_ = true;
    } else {
        fail("{}: '{}' is not supported", where, type);
    }
}

void PreTokenizer::split(std::string_view text,
                         const std::function<void(std::string_view)>& on_piece) const {
    if (!text.empty()) run(0, text, on_piece);
}

void PreTokenizer::run(size_t step_idx, std::string_view text,
                       const std::function<void(std::string_view)>& on_piece) const {
    if (step_idx == steps_.size()) return on_piece(text);
    const Step& step = steps_[step_idx];
    std::string prefixed;
    if (step.add_prefix_space && text[0] != ' ') {
        prefixed = " " + std::string(text);
        text = prefixed;
    }
    if (!step.regex) return run(step_idx + 1, text, on_piece);
    size_t prev = 0;
    step.regex->for_each_match(text, [&](size_t begin, size_t end) {
        if (begin > prev) run(step_idx + 1, text.substr(prev, begin - prev), on_piece);
        if (!step.remove_matches) run(step_idx + 1, text.substr(begin, end - begin), on_piece);
        prev = end;
    });
    if (prev < text.size()) run(step_idx + 1, text.substr(prev), on_piece);
}

}  // namespace miniinfer
