#include "tokenizer/bpe.h"

#include <queue>

#include "tokenizer/utf8.h"

namespace miniinfer {

const Json& json_child(const Json& obj, const std::string& key, const std::string& where) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) fail("{}: missing field '{}'", where, key);
    return *it;
}

BpeModel BpeModel::from_json(const Json& spec) {
    const std::string where = "tokenizer.json model";
    BpeModel m;
    const std::string type = json_get_or<std::string>(spec, "type", "BPE", where);
    if (type != "BPE") fail("{}: type '{}' is not supported (only BPE)", where, type);
    if (!spec.value("dropout", Json()).is_null() && spec["dropout"].get<double>() != 0.0)
        fail("{}: BPE dropout is not supported", where);
    if (json_get_or<bool>(spec, "byte_fallback", false, where))
        fail("{}: byte_fallback is not supported", where);
    if (!json_get_or<std::string>(spec, "continuing_subword_prefix", "", where).empty() ||
        !json_get_or<std::string>(spec, "end_of_word_suffix", "", where).empty())
        fail("{}: continuing_subword_prefix / end_of_word_suffix are not supported", where);
    m.fuse_unk_ = json_get_or<bool>(spec, "fuse_unk", false, where);
    m.ignore_merges_ = json_get_or<bool>(spec, "ignore_merges", false, where);

    const Json& vocab = json_child(spec, "vocab", where);
    if (!vocab.is_object()) fail("{}: vocab must be an object", where);
    m.vocab_.reserve(vocab.size());
    for (const auto& [token, id] : vocab.items()) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0)
            fail("{}: vocab id of '{}' is not a non-negative integer", where, token);
        m.vocab_.emplace(token, id.get<int32_t>());
    }
    m.char_ids_.assign(0x800, -1);
    for (const auto& [token, id] : m.vocab_) {
        size_t pos = 0;
        const char32_t cp = utf8::next(token, pos);
        if (pos == token.size() && cp < 0x800) m.char_ids_[cp] = id;
    }
    if (auto unk = json_get_or<std::string>(spec, "unk_token", "", where); !unk.empty()) {
        auto it = m.vocab_.find(unk);
        if (it == m.vocab_.end()) fail("{}: unk_token '{}' is not in the vocabulary", where, unk);
        m.unk_id_ = it->second;
    }

    const Json& merges = json_child(spec, "merges", where);
    m.merges_.reserve(merges.size());
    auto id_of = [&](const std::string& token) {
        auto it = m.vocab_.find(token);
        if (it == m.vocab_.end())
            fail("{}: merge part '{}' is not in the vocabulary", where, token);
        return it->second;
    };
    int32_t rank = 0;
    for (const Json& merge : merges) {
        std::string a, b;
        if (merge.is_string()) {
            const std::string s = merge.get<std::string>();
            const size_t space = s.find(' ', 1);
            if (space == std::string::npos) fail("{}: merge '{}' is not 'a b'", where, s);
            a = s.substr(0, space), b = s.substr(space + 1);
        } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
                   merge[1].is_string()) {
            a = merge[0].get<std::string>(), b = merge[1].get<std::string>();
        } else {
            fail("{}: merge {} is neither 'a b' nor [a, b]", where, merge.dump());
        }
        const int32_t new_id = id_of(a + b);
        m.merges_.try_emplace(pair_key(id_of(a), id_of(b)), Merge{rank++, new_id});
    }
    return m;
}

const BpeModel::Merge* BpeModel::find_merge(int32_t a, int32_t b) const {
    auto it = merges_.find(pair_key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
    if (ignore_merges_) {
        if (auto it = vocab_.find(word); it != vocab_.end()) return out.push_back(it->second);
    }
    std::vector<int32_t> symbols;
    symbols.reserve(word.size());
    bool prev_unk = false;
    for (size_t pos = 0; pos < word.size();) {
        const size_t start = pos;
        const char32_t cp = utf8::next(word, pos);
        int32_t id = cp < 0x800 ? char_ids_[cp] : -1;
        if (id < 0 && cp >= 0x800) {
            auto it = vocab_.find(word.substr(start, pos - start));
            if (it != vocab_.end()) id = it->second;
        }
        if (id < 0) {
            if (unk_id_ && !(fuse_unk_ && prev_unk)) symbols.push_back(*unk_id_);
            prev_unk = true;
            continue;
        }
        prev_unk = false;
        symbols.push_back(id);
    }
    merge_symbols(symbols);
    out.insert(out.end(), symbols.begin(), symbols.end());
}

// Short words: rescan for the best pair each round (cache friendly, no allocation). Long words
// (a 10 kB run of one letter class): a heap of candidate pairs and a linked list of symbols,
// O(n log n). Both pick the lowest rank, leftmost first, so they give the same result.
void BpeModel::merge_symbols(std::vector<int32_t>& symbols) const {
    const size_t n = symbols.size();
    if (n < 2) return;
    if (n <= 64) {
        for (;;) {
            int32_t best_rank = INT32_MAX, best_id = -1;
            size_t best_pos = 0;
            for (size_t i = 0; i + 1 < symbols.size(); ++i) {
                const Merge* m = find_merge(symbols[i], symbols[i + 1]);
                if (m && m->rank < best_rank)
                    best_rank = m->rank, best_id = m->new_id, best_pos = i;
            }
            if (best_id < 0) return;
            symbols[best_pos] = best_id;
            symbols.erase(symbols.begin() + ptrdiff_t(best_pos) + 1);
        }
    }
    struct Candidate {
        int32_t rank;
        size_t pos;
        int32_t left, right;  // the pair this candidate was made for (stale if they changed)
        bool operator>(const Candidate& o) const {
            return rank != o.rank ? rank > o.rank : pos > o.pos;
        }
    };
    std::vector<size_t> next(n), prev(n);
    std::vector<bool> alive(n, true);
    for (size_t i = 0; i < n; ++i) next[i] = i + 1, prev[i] = i - 1;  // prev[0] wraps: unused
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
    auto push = [&](size_t i) {
        if (i >= n || next[i] >= n) return;
        if (const Merge* m = find_merge(symbols[i], symbols[next[i]]))
            heap.push({m->rank, i, symbols[i], symbols[next[i]]});
    };
    for (size_t i = 0; i + 1 < n; ++i) push(i);
    while (!heap.empty()) {
        Candidate c = heap.top();
        heap.pop();
        if (!alive[c.pos] || next[c.pos] >= n) continue;
        const size_t right = next[c.pos];
        if (symbols[c.pos] != c.left || symbols[right] != c.right) continue;
        symbols[c.pos] = find_merge(c.left, c.right)->new_id;
        alive[right] = false;
        next[c.pos] = next[right];
        if (next[right] < n) prev[next[right]] = c.pos;
        if (c.pos > 0) push(prev[c.pos]);
        push(c.pos);
    }
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i)
        if (alive[i]) symbols[kept++] = symbols[i];
    symbols.resize(kept);
}

}  // namespace miniinfer
