// The "pre_tokenizer" of tokenizer.json: splits normalized text into pieces that BPE encodes
// independently. Supported steps (alone or in a Sequence):
//   Split      with a Regex (compiled by PCRE2 with UTF + UCP and JIT) or a literal String;
//              behavior Isolated (every match and every gap is a piece) or Removed (matches
//              dropped); invert false.
//   ByteLevel  add_prefix_space, use_regex (GPT-2's pattern); its byte-to-character mapping is
//              reported by byte_level() and done by the caller.
// Any other step or option is an Error at load time.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"

namespace miniinfer {

class Regex;

class PreTokenizer {
  public:
    static PreTokenizer from_json(const Json& spec);  // `spec` may be null: one piece
    PreTokenizer();
    ~PreTokenizer();
    PreTokenizer(PreTokenizer&&) noexcept;
    PreTokenizer& operator=(PreTokenizer&&) noexcept;

    // True when pieces must be spelled in the byte-level alphabet before BPE.
    bool byte_level() const { return byte_level_; }

    // Calls on_piece for each non-empty piece of valid UTF-8 `text`, in order. Views are valid
    // only during the call. Thread-safe.
    void split(std::string_view text, const std::function<void(std::string_view)>& on_piece) const;

  private:
    struct Step {
        std::shared_ptr<const Regex> regex;  // null: add_prefix_space only
        bool remove_matches = false;
        bool add_prefix_space = false;
    };
    void run(size_t step_idx, std::string_view text,
             const std::function<void(std::string_view)>& on_piece) const;
    void add_step(const Json& spec);

    std::vector<Step> steps_;
    bool byte_level_ = false;
};

// A compiled PCRE2 pattern (UTF, UCP, JIT when available). Thread-safe to use concurrently.
class Regex {
  public:
    // Error naming the pattern when it does not compile.
    Regex(std::string_view pattern, bool literal);
    ~Regex();
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;

    // Calls on_match(begin, end) for each successive non-overlapping match in valid UTF-8 text.
    void for_each_match(std::string_view text,
                        const std::function<void(size_t, size_t)>& on_match) const;

  private:
    // Oniguruma-compatible pattern, and a faster one equal to it on text without the letters,
    // numbers and (when the pattern has \p{M}) marks only Oniguruma knows (see hf_unicode.h);
    // both pcre2_code_8*.
    void* code_ = nullptr;
    void* fast_code_ = nullptr;
    bool jit_ = false, fast_jit_ = false;
    bool uses_marks_ = false;
};

}  // namespace miniinfer
