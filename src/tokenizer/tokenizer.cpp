#include "tokenizer/tokenizer.h"

#include <array>
#include <mutex>

#include "core/thread_pool.h"
#include "tokenizer/added_vocab.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace miniinfer {
namespace {

// Pieces already encoded, keyed by their text before byte-level spelling. Sharded so batch
// encoding threads rarely meet on a lock; each shard stops growing when full.
class WordCache {
  public:
    static constexpr size_t kMaxWordBytes = 256;

    bool lookup(std::string_view word, std::vector<int32_t>& out) const {
        const Shard& s = shard(word);
        std::lock_guard lock(s.mutex);
        auto it = s.map.find(word);
        if (it == s.map.end()) return false;
        out.insert(out.end(), it->second.begin(), it->second.end());
        return true;
    }
    void insert(std::string_view word, std::span<const int32_t> ids) {
        Shard& s = shard(word);
        std::lock_guard lock(s.mutex);
        if (s.map.size() < kMaxEntriesPerShard)
            s.map.try_emplace(std::string(word), ids.begin(), ids.end());
    }

  private:
    static constexpr size_t kNumShards = 64, kMaxEntriesPerShard = 4096;
    struct Shard {
        mutable std::mutex mutex;
        std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
    };
    Shard& shard(std::string_view w) const { return shards_[StringHash{}(w) % kNumShards]; }
    mutable std::array<Shard, kNumShards> shards_;
};

}  // namespace

struct Tokenizer::Impl {
    Normalizer normalizer;
    PreTokenizer pre_tokenizer;
    BpeModel model;
    AddedVocab added;
    std::vector<int32_t> prefix_ids, suffix_ids;  // TemplateProcessing's single template
    std::vector<std::string> id_bytes;            // decoded bytes per id
    std::vector<std::string> id_tokens;           // token string per id
    std::vector<bool> id_special;
    std::vector<bool> id_known;
    TokenIdMap added_ids;
    mutable WordCache cache;

    void encode_plain(std::string_view text, std::vector<int32_t>& out) const;
    void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
};

void Tokenizer::Impl::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
    const bool cacheable = piece.size() <= WordCache::kMaxWordBytes;
    if (cacheable && cache.lookup(piece, out)) return;
    const size_t first = out.size();
    if (pre_tokenizer.byte_level())
        model.encode_word(byte_level::encode(piece), out);
    else
        model.encode_word(piece, out);
    if (cacheable) cache.insert(piece, std::span(out).subspan(first));
}

// Text between raw added tokens: normalize, split by normalized added tokens, pre-tokenize, BPE.
void Tokenizer::Impl::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
    std::string normalized_buf;
    const std::string_view normalized = normalizer.apply(text, normalized_buf);
    std::vector<TextSegment> segments;
    added.split(normalized, /*normalized=*/true, /*parse_special=*/true, segments);
    for (const TextSegment& seg : segments) {
        if (seg.id >= 0) {
            out.push_back(seg.id);
            continue;
        }
        pre_tokenizer.split(normalized.substr(seg.begin, seg.end - seg.begin),
                            [&](std::string_view piece) { encode_piece(piece, out); });
    }
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::optional<Tokenizer> load_tokenizer(const std::filesystem::path& model_dir) {
    if (!std::filesystem::exists(model_dir / "tokenizer.json")) return std::nullopt;
    return Tokenizer::load(model_dir);
}

Tokenizer Tokenizer::load(const std::filesystem::path& model_dir) {
    const auto path = model_dir / "tokenizer.json";
    Json j = read_json_file(path);
    try {
        return from_json(j);
    } catch (const Error& e) {
        fail("{}: {}", path.string(), e.what());
    }
}

static void load_post_processor(const Json& spec, std::vector<int32_t>& prefix,
                                std::vector<int32_t>& suffix) {
    const std::string where = "tokenizer.json post_processor";
    if (spec.is_null()) return;
    const std::string type = json_get<std::string>(spec, "type", where);
    if (type == "ByteLevel") return;  // only adjusts offsets, which we do not report
    if (type != "TemplateProcessing") fail("{}: '{}' is not supported", where, type);
    bool seen_sequence = false;
    for (const Json& piece : json_get<Json>(spec, "single", where)) {
        if (piece.contains("Sequence")) {
            seen_sequence = true;
        } else if (piece.contains("SpecialToken")) {
            const std::string name = json_get<std::string>(piece["SpecialToken"], "id", where);
            const Json& entry =
                json_get<Json>(json_get<Json>(spec, "special_tokens", where), name, where);
            for (const Json& id : json_get<Json>(entry, "ids", where))
                (seen_sequence ? suffix : prefix).push_back(id.get<int32_t>());
        } else {
            fail("{}: template piece {} is not supported", where, piece.dump());
        }
    }
}

Tokenizer Tokenizer::from_json(const Json& j) {
    // Hugging Face would truncate or pad every encoding; we return ids as they are.
    for (const char* key : {"truncation", "padding"})
        if (j.contains(key) && !j[key].is_null())
            fail("tokenizer.json: '{}' is set; it is not supported", key);
    auto impl = std::make_unique<Impl>();
    impl->normalizer = Normalizer::from_json(j.value("normalizer", Json()));
    impl->pre_tokenizer = PreTokenizer::from_json(j.value("pre_tokenizer", Json()));
    impl->model = BpeModel::from_json(json_child(j, "model", "tokenizer.json"));
    impl->added = AddedVocab::from_json(j.value("added_tokens", Json()));
    load_post_processor(j.value("post_processor", Json()), impl->prefix_ids, impl->suffix_ids);
    const Json decoder = j.value("decoder", Json());
    if (decoder.is_null() || decoder.value("type", "") != "ByteLevel")
        fail("tokenizer.json: decoder {} is not supported (only ByteLevel)", decoder.dump());

    int32_t size = 0;
    for (const auto& [token, id] : impl->model.vocab()) size = std::max(size, id + 1);
    for (const AddedToken& t : impl->added.tokens()) size = std::max(size, t.id + 1);
    impl->id_bytes.resize(size);
    impl->id_tokens.resize(size);
    impl->id_special.resize(size);
    impl->id_known.resize(size);
    // Hugging Face's ByteLevel decoder maps each token's characters back to bytes, or keeps
    // the token's UTF-8 when some character is outside the byte alphabet.
    auto set = [&](int32_t id, const std::string& token) {
        impl->id_tokens[id] = token;
        impl->id_bytes[id] = byte_level::decode(token).value_or(token);
        impl->id_known[id] = true;
    };
    for (const auto& [token, id] : impl->model.vocab()) set(id, token);
    for (const AddedToken& t : impl->added.tokens()) {  // added tokens take precedence
        set(t.id, t.content);
        impl->added_ids[t.content] = t.id;
    }
    // Hugging Face tests "special" by content, so a vocabulary id spelled like a special token
    // counts too.
    for (const AddedToken& t : impl->added.tokens()) {
        if (!t.special) continue;
        impl->id_special[t.id] = true;
        if (auto it = impl->model.vocab().find(t.content); it != impl->model.vocab().end())
            impl->id_special[it->second] = impl->id_tokens[it->second] == t.content;
    }
    return Tokenizer(std::move(impl));
}

bool Tokenizer::adds_special_tokens() const {
    return !impl_->prefix_ids.empty() || !impl_->suffix_ids.empty();
}

std::vector<int32_t> Tokenizer::encode(std::string_view input, const EncodeOptions& options) const {
    std::string valid_buf;
    std::string_view text = input;
    if (!utf8::is_valid(input)) text = valid_buf = utf8::to_valid(input);
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 8);
    if (options.add_special_tokens) ids = impl_->prefix_ids;
    std::vector<TextSegment> segments;
    impl_->added.split(text, /*normalized=*/false, options.parse_special, segments);
    for (const TextSegment& seg : segments) {
        if (seg.id >= 0)
            ids.push_back(seg.id);
        else
            impl_->encode_plain(text.substr(seg.begin, seg.end - seg.begin), ids);
    }
    if (options.add_special_tokens)
        ids.insert(ids.end(), impl_->suffix_ids.begin(), impl_->suffix_ids.end());
    return ids;
}

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(const std::vector<std::string>& texts,
                                                          const EncodeOptions& options,
                                                          ThreadPool* pool) const {
    std::vector<std::vector<int32_t>> out(texts.size());
    (pool ? *pool : ThreadPool::global())
        .parallel_for(int64_t(texts.size()), [&](int64_t begin, int64_t end) {
            for (int64_t i = begin; i < end; ++i) out[i] = encode(texts[i], options);
        });
    return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
    std::string bytes;
    for (int32_t id : ids) {
        if (skip_special_tokens && is_special(id)) continue;
        bytes.append(token_bytes(id));
    }
    return utf8::to_valid(bytes);
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
    if (id < 0 || id >= vocab_size()) return {};
    return impl_->id_bytes[id];
}

bool Tokenizer::is_special(int32_t id) const {
    return id >= 0 && id < vocab_size() && impl_->id_special[id];
}

int32_t Tokenizer::vocab_size() const {
    return int32_t(impl_->id_bytes.size());
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
    if (auto it = impl_->added_ids.find(token); it != impl_->added_ids.end()) return it->second;
    if (auto it = impl_->model.vocab().find(token); it != impl_->model.vocab().end())
        return it->second;
    return std::nullopt;
}

std::string Tokenizer::id_to_token(int32_t id) const {
    if (id < 0 || id >= vocab_size()) return {};
    return impl_->id_tokens[id];
}

}  // namespace miniinfer
