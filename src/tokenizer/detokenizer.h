// Streaming detokenization of one request's generated tokens.
//
// push(id) returns the text that became final with that token: only whole UTF-8 characters
// (a character split across tokens comes out once, complete) and never text that might be
// the start of a stop string. The concatenation of every push() and finish() equals
// tokenizer.decode(all ids, skip_special_tokens), cut just before the stop string that
// completes first (on the first token that completes two, the one starting earlier). As in vLLM,
// a stop string only counts if it ends in the text of a token after the first min_tokens ones
// (it may begin earlier). Work per token
// is proportional to the token's bytes plus the stop strings' lengths, never to the length of the
// sequence so far.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace miniinfer {

class IncrementalDetokenizer {
  public:
    // `tokenizer` must outlive this object. Empty stop strings are ignored. Stop strings are
    // not looked for until more than `min_tokens` tokens have been pushed.
    // `include_stop_string`: the text is cut just after the stop string instead of before it
    // (vLLM's include_stop_str_in_output).
    IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens,
                           std::vector<std::string> stop_strings = {}, int64_t min_tokens = 0,
                           bool include_stop_string = false);

    // Adds the next generated token. Returns newly final text (often empty). After a stop
    // string has matched, returns "" and ignores further tokens.
    std::string push(int32_t id);

    // The sequence ended: returns the text held back (an unfinished character becomes
    // U+FFFD, as in decode). Call once; later pushes are ignored.
    std::string finish();

    // True once a stop string matched; stop_string() is then the one that did.
    bool stopped() const { return stop_idx_ >= 0; }
    const std::string& stop_string() const;

  private:
    std::string release(std::string text, bool final);

    const Tokenizer* tokenizer_;
    bool skip_special_tokens_;
    std::vector<std::string> stop_strings_;
    std::string pending_bytes_;  // an unfinished UTF-8 character (at most 3 bytes)
    std::string held_;           // decoded text that may begin a stop string
    int64_t min_tokens_ = 0;
    int64_t num_tokens_ = 0;  // tokens pushed so far
    int stop_idx_ = -1;
    bool include_stop_string_ = false;
    bool finished_ = false;
};

}  // namespace miniinfer
