// Structured output's speed on the CPU: grammar compile time and token-mask time per token for
// the schema suite (tests/data/structured/schemas.jsonl) on Qwen3's vocabulary. Informative
// only, never part of ctest.
//   bench_structured_masks [model_dir_with_tokenizer] [schemas.jsonl]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "core/json.h"
#include "structured/grammar_matcher.h"
#include "structured/json_schema.h"
#include "tokenizer/tokenizer.h"

using namespace miniinfer;
using namespace miniinfer::structured;

namespace {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

void report(const char* what, std::vector<double> v, const char* unit) {
    std::sort(v.begin(), v.end());
    double sum = 0;
    for (double x : v) sum += x;
    auto at = [&v](double q) { return v[std::min(v.size() - 1, size_t(q * v.size()))]; };
    fmt::print(
        "{:<34} n={:<6} median {:8.1f} {}  p90 {:8.1f}  p99 {:8.1f}  max {:8.1f}  mean {:8.1f}\n",
        what, v.size(), at(0.5), unit, at(0.9), at(0.99), v.back(), sum / v.size());
}

}  // namespace

int main(int argc, char** argv) {
    const std::string model_dir =
        argc > 1 ? argv[1] : MINIINFER_SOURCE_DIR "/tests/fixtures/qwen3-demo";
    const std::string suite_path =
        argc > 2 ? argv[2] : MINIINFER_SOURCE_DIR "/tests/data/structured/schemas.jsonl";
    const Tokenizer tok = Tokenizer::load(model_dir);
    auto t0 = Clock::now();
    auto vocab =
        Vocabulary::from_tokenizer(tok, tok.vocab_size(), {*tok.token_to_id("<|im_end|>")});
    fmt::print("vocabulary: {} tokens, trie of {} nodes, built in {:.1f} ms\n", vocab->size(),
               vocab->trie().size(), us_since(t0) / 1000);

    std::vector<double> compile_ms, valid_us, random_us;
    std::vector<uint32_t> mask(vocab->num_mask_words());
    std::mt19937 rng(49);
    const std::string text = read_text_file(suite_path);
    size_t start = 0;
    while (start < text.size()) {
        size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        const auto line = nlohmann::ordered_json::parse(text.substr(start, end - start));
        start = end + 1;
        t0 = Clock::now();
        auto compiled = std::make_shared<const CompiledGrammar>(
            json_schema_grammar(line["schema"].dump()), vocab);
        compile_ms.push_back(us_since(t0) / 1000);
        for (const auto& doc : line["valid"]) {  // masks along valid documents
            GrammarMatcher m(compiled);
            for (int32_t id : tok.encode(doc.get<std::string>())) {
                t0 = Clock::now();
                m.fill_next_token_mask(mask);
                valid_us.push_back(us_since(t0));
                m.accept_token(id);
            }
        }
        GrammarMatcher m(compiled);  // masks along a random walk (a model writing gibberish)
        for (int step = 0; step < 48 && !m.terminated(); ++step) {
            t0 = Clock::now();
            m.fill_next_token_mask(mask);
            random_us.push_back(us_since(t0));
            std::vector<int32_t> allowed;
            for (int32_t id = 0; id < vocab->size(); ++id)
                if ((mask[id / 32] >> (id % 32)) & 1u) allowed.push_back(id);
            if (allowed.empty()) break;
            m.accept_token(allowed[rng() % allowed.size()]);
        }
    }
    report("compile (schema -> masks)", compile_ms, "ms");
    report("mask per token, valid documents", valid_us, "us");
    report("mask per token, random walks", random_us, "us");
    std::vector<double> all = valid_us;
    all.insert(all.end(), random_us.begin(), random_us.end());
    report("mask per token, all", all, "us");
    return 0;
}
