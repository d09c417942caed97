// What the structured-output tests share: a byte vocabulary (fast to compile against), the
// Qwen3 vocabulary of the demo fixture (loaded once), and the schema suite.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"
#include "structured/compiled_grammar.h"
#include "structured/grammar_matcher.h"
#include "structured/stack_arena.h"
#include "structured/vocabulary.h"
#include "tokenizer/tokenizer.h"

namespace miniinfer::testing {

// Tokens 0..255 are the single bytes, 256 is the stop token.
inline std::shared_ptr<const structured::Vocabulary> byte_vocab() {
    static const auto vocab = [] {
        std::vector<std::string> bytes(257);
        for (int b = 0; b < 256; ++b) bytes[b] = std::string(1, char(b));
        return std::make_shared<const structured::Vocabulary>(std::move(bytes),
                                                              std::vector<int32_t>{256});
    }();
    return vocab;
}

// True if the whole of text is a complete document of the grammar (the stacks alone: no
// vocabulary, no masks).
inline bool matches(const structured::Grammar& grammar, std::string_view text) {
    structured::StackArena arena(grammar);
    structured::StackState state, next;
    arena.start_state(state);
    for (char c : text) {
        arena.advance(state, uint8_t(c), next);
        if (next.empty()) return false;
        std::swap(state, next);
    }
    return state.can_end;
}

inline const Tokenizer& qwen3_tokenizer() {
    static const Tokenizer tok = Tokenizer::load(MINIINFER_FIXTURES "/qwen3-demo");
    return tok;
}

// Qwen3's vocabulary with <|im_end|> and <|endoftext|> as stop tokens.
inline std::shared_ptr<const structured::Vocabulary> qwen3_vocab() {
    static const auto vocab = [] {
        const Tokenizer& tok = qwen3_tokenizer();
        return structured::Vocabulary::from_tokenizer(
            tok, tok.vocab_size(),
            {*tok.token_to_id("<|im_end|>"), *tok.token_to_id("<|endoftext|>")});
    }();
    return vocab;
}

struct SchemaCase {
    std::string name;
    std::string schema;  // JSON text, keys in the file's order
    std::vector<std::string> valid;
    std::vector<std::string> invalid;
};

inline const std::vector<SchemaCase>& schema_suite() {
    static const std::vector<SchemaCase> suite = [] {
        std::vector<SchemaCase> out;
        const std::string text =
            read_text_file(MINIINFER_SOURCE_DIR "/tests/data/structured/schemas.jsonl");
        size_t start = 0;
        while (start < text.size()) {
            size_t end = text.find('\n', start);
            if (end == std::string::npos) end = text.size();
            if (end > start) {
                const auto line = nlohmann::ordered_json::parse(text.substr(start, end - start));
                out.push_back({line["name"].get<std::string>(), line["schema"].dump(),
                               line["valid"].get<std::vector<std::string>>(),
                               line["invalid"].get<std::vector<std::string>>()});
            }
            start = end + 1;
        }
        return out;
    }();
    return suite;
}

}  // namespace miniinfer::testing
