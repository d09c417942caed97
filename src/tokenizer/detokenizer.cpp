#include "tokenizer/detokenizer.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace miniinfer {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens,
                                               std::vector<std::string> stop_strings,
                                               int64_t min_tokens, bool include_stop_string)
    : tokenizer_(&tokenizer),
      skip_special_tokens_(skip_special_tokens),
      min_tokens_(min_tokens),
      include_stop_string_(include_stop_string) {
    for (std::string& s : stop_strings)
        if (!s.empty()) stop_strings_.push_back(std::move(s));
}

const std::string& IncrementalDetokenizer::stop_string() const {
    MI_CHECK(stopped(), "stop_string() before a stop string matched");
    return stop_strings_[stop_idx_];
}

std::string IncrementalDetokenizer::push(int32_t id) {
    if (stopped() || finished_) return {};
    ++num_tokens_;
    if (skip_special_tokens_ && tokenizer_->is_special(id)) return {};
    std::string bytes = std::move(pending_bytes_);
    bytes.append(tokenizer_->token_bytes(id));
    pending_bytes_.clear();
    std::string text;
    for (size_t i = 0; i < bytes.size();) {
        const utf8::Scan s = utf8::scan(std::string_view(bytes).substr(i));
        if (s.kind == utf8::Scan::kIncomplete) {  // may complete with the next token
            pending_bytes_ = bytes.substr(i);
            break;
        }
        if (s.kind == utf8::Scan::kValid)
            text.append(bytes, i, s.len);
        else
            text.append(utf8::kReplacementUtf8);
        i += s.len;
    }
    return release(std::move(text), false);
}

std::string IncrementalDetokenizer::finish() {
    if (stopped() || finished_) return {};
    finished_ = true;
    std::string text = pending_bytes_.empty() ? "" : std::string(utf8::kReplacementUtf8);
    pending_bytes_.clear();
    return release(std::move(text), true);
}

// Appends `text` to what is held, cuts at the first stop string that ends inside the new text,
// and returns all that can no longer become part of a stop string. Only matches ending in the
// new text count: earlier ones were cut already, or fell in the first min_tokens tokens. The
// search cost is bounded by |held_| + |text|.
std::string IncrementalDetokenizer::release(std::string text, bool final) {
    const size_t old_len = held_.size();
    std::string all = std::move(held_);
    all += text;
    held_.clear();
    size_t first = std::string::npos;
    const bool may_stop = num_tokens_ > min_tokens_;
    for (size_t i = 0; may_stop && i < stop_strings_.size(); ++i) {
        const size_t len = stop_strings_[i].size();
        const size_t pos = all.find(stop_strings_[i], old_len + 1 > len ? old_len + 1 - len : 0);
        if (pos < first) first = pos, stop_idx_ = int(i);
    }
    if (first != std::string::npos) {
        all.resize(first + (include_stop_string_ ? stop_strings_[size_t(stop_idx_)].size() : 0));
        return all;
    }
    if (final) return all;
    // Hold back the longest suffix that is a proper prefix of some stop string.
    size_t hold = 0;
    for (const std::string& stop : stop_strings_) {
        for (size_t len = std::min(stop.size() - 1, all.size()); len > hold; --len) {
            if (all.compare(all.size() - len, len, stop, 0, len) == 0) {
                hold = len;
                break;
            }
        }
    }
    held_ = all.substr(all.size() - hold);
    all.resize(all.size() - hold);
    return all;
}

}  // namespace miniinfer
