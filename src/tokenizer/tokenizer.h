// A Hugging Face tokenizer.json (byte-level BPE: Qwen2, Qwen3 and the like) that encodes and
// decodes exactly as the `tokenizers` library does.
//
// encode: invalid UTF-8 → U+FFFD; split out added tokens; normalize (NFC) the rest; split it
// with the pre-tokenizer's regex; spell pieces in the byte-level alphabet; BPE each piece
// (through a word cache); add the post-processor's special tokens if asked.
// decode: each id's bytes, concatenated; invalid UTF-8 in the result → U+FFFD.
//
// A Tokenizer is immutable after loading and safe to use from many threads at once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"

namespace miniinfer {

class ThreadPool;

struct EncodeOptions {
    bool add_special_tokens = true;  // the post-processor's tokens (none for Qwen's ByteLevel)
    bool parse_special = true;       // false: "<|im_end|>" in the text is plain text
};

class Tokenizer {
  public:
    // Reads model_dir/tokenizer.json. Error when missing, malformed, or asking for a
    // component this implementation does not have.
    static Tokenizer load(const std::filesystem::path& model_dir);
    static Tokenizer from_json(const Json& tokenizer_json);

    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;
    ~Tokenizer();

    std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options = {}) const;
    // True when encode() with add_special_tokens adds tokens (a TemplateProcessing
    // post-processor with a prefix or suffix; Qwen's tokenizers add none).
    bool adds_special_tokens() const;

    // encode() of each text, spread over `pool` (the global pool by default).
    std::vector<std::vector<int32_t>> encode_batch(const std::vector<std::string>& texts,
                                                   const EncodeOptions& options = {},
                                                   ThreadPool* pool = nullptr) const;

    // Unknown ids are skipped, like Hugging Face. skip_special_tokens drops added tokens
    // flagged special.
    std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

    // The raw bytes id stands for (may be a partial UTF-8 character); empty for unknown ids.
    std::string_view token_bytes(int32_t id) const;
    bool is_special(int32_t id) const;
    // One past the largest id (vocabulary plus added tokens).
    int32_t vocab_size() const;
    std::optional<int32_t> token_to_id(std::string_view token) const;
    // The token's string as written in tokenizer.json; empty for unknown ids.
    std::string id_to_token(int32_t id) const;

  private:
    struct Impl;
    explicit Tokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// The model directory's tokenizer, or nullopt if it has no tokenizer.json (a model served by
// token ids only). Error as Tokenizer::load when the file is there but unusable. Every process
// that needs the model's tokenizer (engine, pipeline frontend and workers) loads it this way.
std::optional<Tokenizer> load_tokenizer(const std::filesystem::path& model_dir);

}  // namespace miniinfer
