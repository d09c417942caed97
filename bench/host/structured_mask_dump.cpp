// Our allowed-token sets at random prefixes of the schema suite's valid documents, one JSON
// line each, for the differential check against xgrammar (tools/structured/xgrammar_diff.py).
//   structured_mask_dump <model_dir> <schemas.jsonl> [prefixes per document] [seed]
// Line: {"schema": <suite line>, "prefix": [token ids], "mask": "<hex>"}; the mask's uint32
// words, each as 8 hex digits (bit id % 32 of word id / 32: token id allowed).
#include <fmt/format.h>

#include <random>

#include "core/json.h"
#include "structured/grammar_matcher.h"
#include "structured/json_schema.h"
#include "tokenizer/tokenizer.h"

using namespace miniinfer;
using namespace miniinfer::structured;

int main(int argc, char** argv) {
    if (argc < 3) {
        fmt::print(stderr, "usage: {} <model_dir> <schemas.jsonl> [prefixes] [seed]\n", argv[0]);
        return 2;
    }
    const Tokenizer tok = Tokenizer::load(argv[1]);
    const int num_prefixes = argc > 3 ? std::stoi(argv[3]) : 3;
    std::mt19937 rng(argc > 4 ? std::stoul(argv[4]) : 49);
    auto vocab =
        Vocabulary::from_tokenizer(tok, tok.vocab_size(), {*tok.token_to_id("<|im_end|>")});
    std::vector<uint32_t> mask(vocab->num_mask_words());
    const std::string text = read_text_file(argv[2]);
    size_t start = 0;
    for (int line_idx = 0; start < text.size(); ++line_idx) {
        size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        const auto line = nlohmann::ordered_json::parse(text.substr(start, end - start));
        start = end + 1;
        auto compiled = std::make_shared<const CompiledGrammar>(
            json_schema_grammar(line["schema"].dump()), vocab);
        for (const auto& doc : line["valid"]) {
            const auto ids = tok.encode(doc.get<std::string>());
            for (int k = 0; k < num_prefixes; ++k) {
                const size_t cut = rng() % (ids.size() + 1);
                GrammarMatcher m(compiled);
                for (size_t i = 0; i < cut; ++i) m.accept_token(ids[i]);
                m.fill_next_token_mask(mask);
                Json out;
                out["schema"] = line_idx;
                out["prefix"] = std::vector<int32_t>(ids.begin(), ids.begin() + cut);
                std::string hex;
                for (uint32_t w : mask) hex += fmt::format("{:08x}", w);
                out["mask"] = hex;
                fmt::print("{}\n", out.dump());
            }
        }
    }
    return 0;
}
