// Unit tests of the tokenizer's parts: UTF-8 handling, the byte-level alphabet, BPE merges,
// added-token matching, and what tokenizer.json may ask for that we reject.
#include <gtest/gtest.h>

#include "golden_util.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/hf_unicode.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace miniinfer {
namespace {

TEST(Utf8, ReplacesMaximalSubparts) {
    EXPECT_EQ(utf8::to_valid("abc"), "abc");
    EXPECT_EQ(utf8::to_valid("a\xFF"
                             "b"),
              "a\xEF\xBF\xBD"
              "b");
    // A truncated 3-byte sequence is one maximal subpart: one U+FFFD.
    EXPECT_EQ(utf8::to_valid("\xE4\xB8"), "\xEF\xBF\xBD");
    // Surrogates and overlongs: every byte is its own subpart.
    EXPECT_EQ(utf8::to_valid("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    EXPECT_EQ(utf8::to_valid("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");
    EXPECT_EQ(utf8::to_valid("\xF4\x90\x80\x80"),
              "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    EXPECT_EQ(utf8::to_valid(std::string("a\0b", 3)), std::string("a\0b", 3));
}

TEST(Utf8, ScanClassifiesIncompleteCharacters) {
    EXPECT_EQ(utf8::scan("\xF0\x9F\x98").kind, utf8::Scan::kIncomplete);
    EXPECT_EQ(utf8::scan("\xF0\x9F\x98\x80").kind, utf8::Scan::kValid);
    EXPECT_EQ(utf8::scan("\xF0\x9F\x98\x80").cp, char32_t(0x1F600));
    EXPECT_EQ(utf8::scan("\xF0\x41").kind, utf8::Scan::kInvalid);
}

TEST(HfUnicode, RegexClassesFollowOniguruma) {
    using hf_unicode::adapt_regex;
    // \p{N} gains Oniguruma's newer numbers (Kaktovik numerals), inside and outside classes.
    EXPECT_EQ(adapt_regex(R"(\p{N}+)").substr(0, 7), R"([\p{N}\)");
    EXPECT_NE(adapt_regex(R"(\p{N}+)").find(R"(\x{1D2C0}-\x{1D2D3})"), std::string::npos);
    EXPECT_EQ(adapt_regex(R"(\p{N}+)").back(), '+');
    EXPECT_NE(adapt_regex(R"([a\p{N}])").find(R"([a\p{N}\x{)"), std::string::npos);
    // U+180E is a space to PCRE2 only: removed from \s, added to \S and negated classes.
    EXPECT_EQ(adapt_regex(R"(\s+(?!\S))"), R"((?:(?![\x{180E}])\s)+(?!(?:\S|[\x{180E}])))");
    EXPECT_EQ(adapt_regex(R"([^\s]+)"), R"((?:[^\s]|[\x{180E}])+)");
    EXPECT_EQ(adapt_regex(R"([\s\]]x)"), R"((?:(?![\x{180E}])[\s\]])x)");
    EXPECT_EQ(adapt_regex(R"(\[a\x{41}[]b])"), R"(\[a\x{41}[]b])");  // other escapes untouched
    EXPECT_THROW(adapt_regex(R"([\S])"), Error);
    // \p{M} (Qwen3.5's pattern) gains Oniguruma's newer marks, such as U+0897 ARABIC PEPET.
    EXPECT_NE(adapt_regex(R"([\p{L}\p{M}]+)").find(R"(\p{M}\x{897})"), std::string::npos);
    EXPECT_EQ(adapt_regex(R"([\p{L}\p{M}]+)", true), R"([\p{L}\p{M}]+)");
    EXPECT_TRUE(hf_unicode::has_hf_only_class_member("a\u0897b", /*marks=*/true));
    EXPECT_FALSE(hf_unicode::has_hf_only_class_member("a\u0897b", /*marks=*/false));
    EXPECT_FALSE(hf_unicode::has_hf_only_class_member("na\u0308ive \u0928\u092E", true));
    EXPECT_TRUE(hf_unicode::unknown_to_normalizer(0x09FE));
    EXPECT_FALSE(hf_unicode::unknown_to_normalizer(0x0301));
}

// Qwen3.5's split keeps combining marks with the letters before them ([\p{L}\p{M}]+), where
// Qwen2/Qwen3's (\p{L}+) cuts a word at each mark.
TEST(PreTokenizer, Qwen35PatternKeepsMarksInWords) {
    auto pieces = [](const char* pattern, std::string_view text) {
        Json spec = {{"type", "Split"},
                     {"pattern", {{"Regex", pattern}}},
                     {"behavior", "Isolated"},
                     {"invert", false}};
        std::vector<std::string> out;
        PreTokenizer::from_json(spec).split(text, [&](std::string_view p) { out.emplace_back(p); });
        return out;
    };
    using Pieces = std::vector<std::string>;
    constexpr const char* kQwen35 =
        R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    constexpr const char* kQwen3 =
        R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    // "नमस्ते": the vowel signs and the virama are marks.
    EXPECT_EQ(pieces(kQwen35, "\u0928\u092E\u0938\u094D\u0924\u0947 x"),
              (Pieces{"\u0928\u092E\u0938\u094D\u0924\u0947", " x"}));
    EXPECT_EQ(pieces(kQwen3, "\u0928\u092E\u0938\u094D\u0924\u0947 x"),
              (Pieces{"\u0928\u092E\u0938", "\u094D\u0924", "\u0947", " x"}));
    EXPECT_EQ(pieces(kQwen35, "e\u0301t\u00E9 'S"), (Pieces{"e\u0301t\u00E9", " '", "S"}));
    EXPECT_EQ(pieces(kQwen35, " \u0301\u0301!"), (Pieces{" \u0301\u0301", "!"}));
    // A mark PCRE2 10.42 does not know yet (U+0897, Unicode 16) is still a mark.
    EXPECT_EQ(pieces(kQwen35, "\u0628\u0897\u0628 1"), (Pieces{"\u0628\u0897\u0628", " ", "1"}));
}

TEST(ByteLevel, AlphabetIsABijection) {
    for (int b = 0; b < 256; ++b)
        EXPECT_EQ(byte_level::char_to_byte(byte_level::byte_to_char(uint8_t(b))), b);
    EXPECT_EQ(byte_level::byte_to_char(' '), char32_t(0x120));  // 'Ġ'
    EXPECT_EQ(byte_level::byte_to_char('A'), char32_t('A'));
    const std::string bytes("\x00\xFF hi", 5);
    EXPECT_EQ(byte_level::decode(byte_level::encode(bytes)), bytes);
    EXPECT_FALSE(byte_level::decode("\xE4\xB8\xAD").has_value());  // '中' is not in the alphabet
}

class QwenTokenizer : public ::testing::Test {
  protected:
    static void SetUpTestSuite() { tok_ = new Tokenizer(Tokenizer::load(testing::qwen3_dir())); }
    static void TearDownTestSuite() { delete tok_; }
    static Tokenizer* tok_;
};
Tokenizer* QwenTokenizer::tok_ = nullptr;

TEST_F(QwenTokenizer, Basics) {
    EXPECT_EQ(tok_->encode("Hello world"), (std::vector<int32_t>{9707, 1879}));
    EXPECT_EQ(tok_->vocab_size(), 151669);
    EXPECT_EQ(tok_->token_to_id("<|im_end|>"), 151645);
    EXPECT_TRUE(tok_->is_special(151645));
    EXPECT_FALSE(tok_->is_special(151667));  // <think> is an added token but not special
    EXPECT_EQ(tok_->id_to_token(9707), "Hello");
    EXPECT_TRUE(tok_->encode("").empty());
}

TEST_F(QwenTokenizer, SpecialTokensOnlyWhenParsed) {
    const auto parsed = tok_->encode("a<|im_end|>b", {.parse_special = true});
    EXPECT_EQ(parsed.size(), 3u);
    EXPECT_EQ(parsed[1], 151645);
    const auto plain = tok_->encode("a<|im_end|>b", {.parse_special = false});
    for (int32_t id : plain) EXPECT_NE(id, 151645);
    EXPECT_EQ(tok_->decode(plain), "a<|im_end|>b");
    // Non-special added tokens still match without parse_special, as in Hugging Face.
    EXPECT_EQ(tok_->encode("<think>", {.parse_special = false}), (std::vector<int32_t>{151667}));
}

TEST_F(QwenTokenizer, InvalidUtf8IsReplacedNotFatal) {
    const auto ids = tok_->encode("ok\xFF\xFE\xE4\xB8");
    EXPECT_EQ(tok_->decode(ids), "ok\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    EXPECT_EQ(ids, tok_->encode("ok\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"));
}

TEST_F(QwenTokenizer, DecodeSkipsUnknownAndSpecialIds) {
    const std::vector<int32_t> ids = {151644, 9707, -5, 99999999, 151645};
    EXPECT_EQ(tok_->decode(ids, true), "Hello");
    EXPECT_EQ(tok_->decode(ids, false), "<|im_start|>Hello<|im_end|>");
}

TEST_F(QwenTokenizer, TokenBytesMayBePartialCharacters) {
    const auto ids = tok_->encode("𣶷");
    ASSERT_GT(ids.size(), 1u);  // a rare CJK character is several byte-level tokens
    std::string bytes;
    for (int32_t id : ids) bytes += tok_->token_bytes(id);
    EXPECT_EQ(bytes, "𣶷");
}

TEST_F(QwenTokenizer, StringMergesGiveTheSameTokenizer) {
    // Older tokenizer.json files (Qwen2, Qwen2.5) write merges as "a b" strings.
    Json j = read_json_file(testing::qwen3_dir() + "/tokenizer.json");
    for (Json& merge : j["model"]["merges"])
        merge = merge[0].get<std::string>() + " " + merge[1].get<std::string>();
    const Tokenizer strings = Tokenizer::from_json(j);
    for (const auto& row : testing::read_jsonl("encode.jsonl")) {
        const auto text = row["text"].get<std::string>();
        ASSERT_EQ(strings.encode(text), tok_->encode(text)) << row["text"].dump();
    }
}

// A tiny tokenizer.json written in the test, to check each feature against known answers.
Json tiny_json() {
    return Json::parse(R"({
      "normalizer": null,
      "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
      "decoder": {"type": "ByteLevel"},
      "post_processor": null,
      "added_tokens": [
        {"id": 100, "content": "<s>", "special": true, "normalized": false},
        {"id": 101, "content": "<ss>", "special": false, "normalized": false},
        {"id": 102, "content": "[M]", "special": true, "lstrip": true, "rstrip": true, "normalized": false},
        {"id": 103, "content": "cat", "special": false, "single_word": true, "normalized": true}
      ],
      "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5, "Ġ": 6,
                                          "Ġa": 7, "t": 8},
                "merges": ["a b", ["b", "c"], "ab c", "Ġ a"]}
    })");
}

TEST(TinyTokenizer, MergesByRankLeftmostFirst) {
    Tokenizer tok = Tokenizer::from_json(tiny_json());
    EXPECT_EQ(tok.encode("abc"), (std::vector<int32_t>{5}));  // a b → ab, then ab c → abc
    EXPECT_EQ(tok.encode("bc"), (std::vector<int32_t>{4}));
    EXPECT_EQ(tok.encode("abab"), (std::vector<int32_t>{3, 3}));
    EXPECT_EQ(tok.encode("a a"), (std::vector<int32_t>{0, 7}));  // GPT-2 split keeps " a"
    EXPECT_EQ(tok.encode("z"), (std::vector<int32_t>{}));        // not in vocab, no unk: dropped
    std::string long_word;
    for (int i = 0; i < 500; ++i) long_word += "ab";
    EXPECT_EQ(tok.encode(long_word), std::vector<int32_t>(500, 3));  // heap path, same answer
}

TEST(TinyTokenizer, AddedTokensLongestMatchAndFlags) {
    Tokenizer tok = Tokenizer::from_json(tiny_json());
    EXPECT_EQ(tok.encode("<ss>"), (std::vector<int32_t>{101}));  // longest wins over <s>
    EXPECT_EQ(tok.encode("a<s>b"), (std::vector<int32_t>{0, 100, 1}));
    EXPECT_EQ(tok.encode("a  [M]  b"), (std::vector<int32_t>{0, 102, 1}));  // lstrip and rstrip
    EXPECT_EQ(tok.encode("a cat b"), (std::vector<int32_t>{0, 6, 103, 6, 1}));
    EXPECT_EQ(tok.encode("cats").front(), 2);  // single_word: no match inside a word
}

TEST(TinyTokenizer, UnsupportedComponentsAreErrors) {
    auto with = [](const char* key, const char* value) {
        Json j = tiny_json();
        j[key] = Json::parse(value);
        return j;
    };
    EXPECT_THROW(Tokenizer::from_json(with("normalizer", R"({"type": "Lowercase"})")), Error);
    EXPECT_THROW(Tokenizer::from_json(with("pre_tokenizer", R"({"type": "Metaspace"})")), Error);
    EXPECT_THROW(Tokenizer::from_json(with("decoder", R"({"type": "WordPiece"})")), Error);
    EXPECT_THROW(Tokenizer::from_json(with("post_processor", R"({"type": "BertProcessing"})")),
                 Error);
    EXPECT_THROW(Tokenizer::from_json(with("pre_tokenizer",
                                           R"({"type": "Split", "pattern": {"Regex": "(unclosed"},
                                               "behavior": "Isolated", "invert": false})")),
                 Error);
    Json bad_merge = tiny_json();
    bad_merge["model"]["merges"].push_back("a zz");
    EXPECT_THROW(Tokenizer::from_json(bad_merge), Error);
    Json dropout = tiny_json();
    dropout["model"]["dropout"] = 0.1;
    EXPECT_THROW(Tokenizer::from_json(dropout), Error);
    EXPECT_THROW(Tokenizer::from_json(with("truncation", R"({"max_length": 8})")), Error);
    EXPECT_THROW(Tokenizer::load("/nonexistent/dir"), Error);
}

TEST(TinyTokenizer, TemplatePostProcessorAddsTokens) {
    Json j = tiny_json();
    j["post_processor"] = Json::parse(R"({"type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                   {"SpecialToken": {"id": "[M]", "type_id": 0}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [100], "tokens": ["<s>"]},
                           "[M]": {"id": "[M]", "ids": [102], "tokens": ["[M]"]}}})");
    Tokenizer tok = Tokenizer::from_json(j);
    EXPECT_EQ(tok.encode("ab", {.add_special_tokens = true}), (std::vector<int32_t>{100, 3, 102}));
    EXPECT_EQ(tok.encode("ab", {.add_special_tokens = false}), (std::vector<int32_t>{3}));
}

}  // namespace
}  // namespace miniinfer
