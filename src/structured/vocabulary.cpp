#include "structured/vocabulary.h"

#include <algorithm>

#include "core/check.h"
#include "tokenizer/tokenizer.h"

namespace miniinfer::structured {

Vocabulary::Vocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> stop_ids)
    : token_bytes_(std::move(token_bytes)), stop_ids_(std::move(stop_ids)) {
    nonempty_mask_.assign(num_mask_words(), 0);
    std::vector<int32_t> sorted;
    uint64_t h = 1469598103934665603ull;  // FNV-1a over lengths and bytes
    auto mix = [&h](uint8_t b) { h = (h ^ b) * 1099511628211ull; };
    for (int32_t id = 0; id < size(); ++id) {
        const std::string& b = token_bytes_[id];
        for (int k = 0; k < 4; ++k) mix(uint8_t(b.size() >> (8 * k)));
        for (char c : b) mix(uint8_t(c));
        if (b.empty()) continue;
        sorted.push_back(id);
        nonempty_mask_[id / 32] |= 1u << (id % 32);
    }
    for (int32_t id : stop_ids_) {
        MI_CHECK(id >= 0 && id < size(), "stop id {} outside the vocabulary", id);
        for (int k = 0; k < 4; ++k) mix(uint8_t(id >> (8 * k)));
    }
    fingerprint_ = h;
    std::sort(sorted.begin(), sorted.end(),
              [this](int32_t a, int32_t b) { return token_bytes_[a] < token_bytes_[b]; });
    build_trie(sorted, 0, sorted.size(), 0, 0);
}

void Vocabulary::build_trie(std::vector<int32_t>& sorted, size_t lo, size_t hi, size_t depth,
                            uint8_t byte) {
    const auto idx = int32_t(trie_.size());
    trie_.push_back({byte, 0, int32_t(trie_tokens_.size()), 0, 0});
    while (lo < hi && token_bytes_[sorted[lo]].size() == depth)
        trie_tokens_.push_back(sorted[lo++]);
    trie_[idx].self_end = int32_t(trie_tokens_.size());
    while (lo < hi) {
        const auto b = uint8_t(token_bytes_[sorted[lo]][depth]);
        size_t j = lo;
        while (j < hi && uint8_t(token_bytes_[sorted[j]][depth]) == b) ++j;
        build_trie(sorted, lo, j, depth + 1, b);
        lo = j;
    }
    trie_[idx].end = int32_t(trie_.size());
    trie_[idx].tokens_end = int32_t(trie_tokens_.size());
}

std::shared_ptr<const Vocabulary> Vocabulary::from_tokenizer(const Tokenizer& tokenizer,
                                                             int32_t vocab_size,
                                                             std::vector<int32_t> stop_ids) {
    std::vector<std::string> bytes(std::max(vocab_size, tokenizer.vocab_size()));
    for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
        if (!tokenizer.is_special(id)) bytes[id] = std::string(tokenizer.token_bytes(id));
    }
    return std::make_shared<const Vocabulary>(std::move(bytes), std::move(stop_ids));
}

}  // namespace miniinfer::structured
