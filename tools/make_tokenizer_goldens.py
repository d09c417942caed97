#!/usr/bin/env python3
"""Writes the tokenizer golden files in tests/tokenizer/golden/ from Hugging Face.

  encode.jsonl  one object per corpus string: text, ids (special tokens parsed),
                ids_plain (special tokens not parsed: tokenizers' encode_special_tokens),
                decoded and decoded_skip (decode of ids without / with skip_special_tokens)
  chat.jsonl    one object per chat case: messages, tools, add_generation_prompt, kwargs,
                text (transformers' apply_chat_template(..., tokenize=False))
  jinja.jsonl   one object per template snippet: template, context, and text (the render by
                Jinja2 configured as transformers configures it) or error: true

The corpus is built here: hand-written prose in many scripts, code, emoji and ZWJ sequences,
combining marks, digit runs, contractions in every case, whitespace runs, control characters,
special-token strings, and seeded random mixes of all of those.

Qwen3.5's tokenizer has its own form (a split pattern that keeps combining marks in words,
33 added tokens, chat template with content parts and XML tool calls). Its fixture,
tests/fixtures/qwen35-tokenizer, is a small byte-level BPE trained here in that form
(--rebuild-qwen35-fixture; the chat template there is hand-written), and its goldens are
  qwen35_encode.jsonl  as encode.jsonl, plus pieces: the pre-tokenizer's pieces (byte-level
                       spelled) of the normalized text; ids_plain is left out when it equals
                       ids, decoded when it equals text, decoded_skip when it equals decoded
  qwen35_chat.jsonl    as chat.jsonl, plus rows with error: true where the template refuses

usage: make_tokenizer_goldens.py [--model tests/fixtures/qwen3-demo] [--out tests/tokenizer/golden]
                                 [--qwen35-model tests/fixtures/qwen35-tokenizer]
                                 [--rebuild-qwen35-fixture]
needs: pip install tokenizers transformers jinja2
"""
import argparse
import itertools
import json
import os
import random
import unicodedata

PROSE = [
    "The quick brown fox jumps over the lazy dog.",
    "It's a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.",
    "We'll see what they've done; I'd say you're right, but he's not sure and I'm tired.",
    "Grüße aus München! Die Straße ist über 3,5 km lang.",
    "L'élève a dû répondre à la question, n'est-ce pas ? Ça coûte 12,50 €.",
    "¿Dónde está la biblioteca? ¡Qué día tan bonito!",
    "Português: ação, coração, informação e pão.",
    "Dziękuję bardzo, że przyszłaś. Źdźbło trawy.",
    "Čeština má háčky a čárky: příliš žluťoučký kůň úpěl ďábelské ódy.",
    "Türkçe: İstanbul'da ılık bir gün; ŞIĞ ve şığ.",
    "Tiếng Việt có nhiều dấu: Xin chào, tôi tên là Nguyễn.",
    "Ελληνικά: Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.",
    "Русский: Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Українська: Чуєш їх, доцю, га? Кумедна ж ти, прощайся без ґольфів!",
    "Български: Жълтата дюля беше щастлива.",
    "עברית: דג סקרן שט בים מאוכזב ולפתע מצא חברה.",
    "العربية: نص حكيم له سر قاطع وذو شأن عظيم مكتوب على ثوب أخضر.",
    "فارسی: به نام خداوند جان و خرد",
    "हिन्दी: ऋषियों को सताने वाले दुष्ट राक्षसों के राजा रावण का सर्वनाश करने वाले।",
    "বাংলা: আমি বাংলায় গান গাই।",
    "தமிழ்: யாமறிந்த மொழிகளிலே தமிழ்மொழி போல் இனிதாவது எங்கும் காணோம்.",
    "ไทย: เป็นมนุษย์สุดประเสริฐเลิศคุณค่า",
    "ລາວ: ສະບາຍດີ",
    "ქართული: ეს არის ტექსტი.",
    "Հայերեն: Բարեւ աշխարհ",
    "中文：我能吞下玻璃而不伤身体。今天天气很好，我们去公园散步吧！",
    "繁體中文：這是一個測試句子，包含標點符號。",
    "日本語：いろはにほへと ちりぬるを わかよたれそ つねならむ。カタカナもﾊﾝｶｸも。",
    "한국어: 다람쥐 헌 쳇바퀴에 타고파. 안녕하세요!",
    "Монгол: Сайн байна уу?",
    "አማርኛ: ሰላም ልዑል",
    "ᐃᓄᒃᑎᑐᑦ: ᐊᐃᖓᐃ",
    "Runes: ᚠᛇᚻ᛫ᛒᛦᚦ᛫ᚠᚱᚩᚠᚢᚱ",
    "Math: ∀x∈ℝ, ∃y: x² + y² ≥ 0; ∑ᵢ aᵢ = ∫₀¹ f(t) dt ≈ 3.14159…",
    "Currency: $100, €200, £300, ¥400, ₹500, ₿0.01",
    "Fullwidth: ＡＢＣ１２３！？",
    "Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇯🇵 ❤️ 🧑🏿‍💻",
    "Mixed: Hello世界123abc!@# Привет😀 مرحبا",
]
CODE = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "#include <stdio.h>\nint main(void) {\n\tprintf(\"hello, world\\n\");\n\treturn 0;\n}\n",
    "for (let i = 0; i < arr.length; i++) { console.log(`${i}: ${arr[i]}`); }",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC;",
    "<html>\n  <body class=\"main\">\n    <p>Hi &amp; bye</p>\n  </body>\n</html>",
    "{\"key\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": \"b\"}}",
    "fn main() -> Result<(), Box<dyn Error>> { let x: Vec<u8> = vec![0xFF; 16]; Ok(()) }",
    "    indented with spaces\n\tindented with tab\r\n    windows line\r\n",
    "x=1;y=2;z=x+y*3**2//4%5!=6&&7||8",
    "git commit -m \"fix: handle CRLF\" && make -j8 2>&1 | tee build.log",
    "# Title\n\n- item one\n- item two\n\n```python\nprint('hi')\n```\n",
    "https://example.com/path?query=1&other=two#frag user@example.org",
]
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|box_end|>",
           "<|vision_pad|>", "<|fim_prefix|>", "<|repo_name|>", "<|file_sep|>", "<tool_call>",
           "</tool_call>", "<think>", "</think>", "<tool_response>", "</tool_response>"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"]
WHITESPACE = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", " \n", "\n ", " \t \n",
              "\u00a0", "\u2003", "\u3000", "\u2028", "\u0085", "\u000b", "\u000c", "\u200b"]
CONTROL = ["\x00", "\x01", "\x07", "\x08", "\x1b", "\x1f", "\x7f", "\x80", "\x9f", "\ufeff",
           "\u200e", "\u200f", "\u202e", "\u2066", "\ufffd", "\U000e0041"]
COMBINING_BASES = ["a", "e", "o", "u", "A", "n", "c", "s", "z", "α", "ω", "и", "ā"]
MARKS = ["\u0300", "\u0301", "\u0302", "\u0303", "\u0308", "\u030a", "\u030c", "\u0327", "\u0328",
         "\u0323", "\u0331", "\u0345", "\u0334", "\u20d7"]
EMOJI = ["😀", "👍", "👍🏻", "👍🏿", "❤️", "❤", "👨‍👩‍👧", "👩‍❤️‍💋‍👨", "🧑‍🚀", "🏴‍☠️", "🇺🇸", "🇩🇪",
         "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "#️⃣", "1️⃣", "🫠", "🫶🏼", "☺︎", "™", "©️"]


def build_corpus(seed=1234, num_random=3000):
    rng = random.Random(seed)
    corpus = []
    corpus += PROSE + CODE + SPECIAL
    # Sentences cut into prefixes: every boundary inside multi-byte text.
    for text in PROSE[:20]:
        corpus += [text[:i] for i in range(1, len(text), 7)]
    # Contractions in every case, with and without a word before, in the middle of words.
    for c in CONTRACTIONS:
        for variant in sorted({"".join(p) for p in itertools.product(*[(ch.lower(), ch.upper()) for ch in c])}):
            corpus += [variant, "it" + variant, "IT" + variant + " go", "x " + variant + "y", variant + variant]
    corpus += ["don't", "DON'T", "Don'T", "y'all'd've", "rock'n'roll", "o'clock", "'tis", "’s curly", "it’s"]
    # Digit runs and numbers.
    for n in range(1, 25):
        corpus.append("".join(str((i * 7 + n) % 10) for i in range(n)))
    corpus += ["3.14159", "-42", "1,234,567.89", "1e-10", "0x1F", "v1.2.3", "2024-01-31T12:00:00Z",
               "٠١٢٣٤٥٦٧٨٩", "०१२३", "１２３", "①②③", "ⅠⅡⅢ", "½¾", "x²y³", "１0２0"]
    # Whitespace runs, alone and between words, in every combination of two.
    for a in WHITESPACE:
        corpus += [a, "a" + a + "b", a + "word", "word" + a, a * 5, "x" + a * 3 + "y"]
        corpus += [a + b for b in WHITESPACE[:12]]
    corpus += [" " * n for n in range(1, 40, 3)] + ["\n" * n for n in range(1, 10)]
    corpus += ["a" + " " * n + "b" for n in range(1, 20)] + ["\t" * n + "x" for n in range(1, 8)]
    # Control characters.
    for c in CONTROL:
        corpus += [c, "a" + c + "b", c * 3, "hello" + c, c + " world"]
    # Combining marks, composed and decomposed (NFC must recompose).
    for base in COMBINING_BASES:
        for m in MARKS:
            corpus += [base + m, "x" + base + m + "y", base + m + m]
        corpus.append(base + "".join(rng.sample(MARKS, 3)))
    corpus += [unicodedata.normalize("NFD", t) for t in PROSE[3:12]]
    corpus += ["\u1100\u1161\u11a8", "\u1112\u1161\u11ab\u1100\u1173\u11af", "Å", "Å", "Å"]
    # Hangul: syllables and conjoining jamo compose algorithmically; U+11A7 must not.
    jamo = ["\u1100", "\u1112", "\u1161", "\u1175", "\u11a7", "\u11a8", "\u11c2", "\uac00", "\uac01", "\ud7a3"]
    corpus += ["".join(rng.choice(jamo) for _ in range(rng.randint(2, 6))) for _ in range(60)]
    # Emoji and ZWJ sequences.
    for e in EMOJI:
        corpus += [e, e * 2, "a" + e + "b", " " + e, e + "!"]
    # Special-token strings inside text.
    for s in SPECIAL:
        corpus += [f"before{s}after", f" {s} ", f"{s}{s}", f"text {s}\n", s[:-1], s[1:], "<" + s + ">"]
    corpus += ["<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n", "<|im_end", "<|IM_END|>",
               "<think>\nreasoning\n</think>\n\nanswer", "<|endoftext|><|endoftext|>x"]
    # Seeded random mixes of everything above.
    pieces = (PROSE + CODE + SPECIAL + CONTRACTIONS + WHITESPACE + CONTROL + EMOJI + MARKS +
              [w for t in PROSE for w in t.split()])
    for _ in range(num_random):
        corpus.append("".join(rng.choice(pieces) for _ in range(rng.randint(1, 8))))
    for _ in range(num_random // 3):
        corpus.append("".join(chr(rng.choice([rng.randint(0x20, 0x7E), rng.randint(0xA0, 0x2FFF),
                                              rng.randint(0x3000, 0x9FFF), rng.randint(0x1F300, 0x1FAFF)]))
                              for _ in range(rng.randint(1, 30))))
    corpus.append(" ".join(PROSE))        # one long text
    corpus.append("ab" * 3000)            # long single word (BPE heap path)
    corpus.append(" " * 5000 + "x")      # long whitespace run (regex look-ahead)
    seen, unique = set(), []
    for t in corpus:
        if t not in seen:
            seen.add(t)
            unique.append(t)
    return unique


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}
SEARCH_TOOL = {"type": "function", "function": {
    "name": "search", "description": "Search the web. Ünïcødé ok; <tags> & 'quotes'.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"},
                                                    "top_k": {"type": "integer", "default": 5},
                                                    "score": {"type": "number", "minimum": 0.5}}}}}


def random_value(rng, depth=0):
    kind = rng.randrange(8 if depth < 2 else 5)
    if kind == 0:
        return rng.choice([0, 1, -7, 42, 10**12, -(2**40)])
    if kind == 1:
        return rng.choice([0.5, -1.25, 3.0, 1e-7, 2.5e16, 123456.789, 0.1 + 0.2, 1e100])
    if kind == 2:
        return rng.choice([True, False, None])
    if kind in (3, 4):
        return rng.choice(PROSE + CODE + SPECIAL + EMOJI + CONTROL + ["", "a\"b", "back\\slash", "tab\there"])
    if kind == 5:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["city", "query", "n", "ünï", "nested", "a b", "<k>"]) + str(i): random_value(rng, depth + 1)
            for i in range(rng.randint(0, 3))}


def random_conversations(rng, count):
    """Seeded random chats: any order of roles, random contents, tool calls with nested
    arguments (as dicts and as JSON strings), reasoning in both forms."""
    out = []
    for _ in range(count):
        msgs = []
        if rng.random() < 0.4:
            msgs.append({"role": "system", "content": rng.choice(PROSE)})
        for _ in range(rng.randint(1, 6)):
            role = rng.choice(["user", "user", "assistant", "assistant", "tool"])
            content = "".join(rng.choice(PROSE + CODE + SPECIAL + EMOJI + WHITESPACE) for _ in range(rng.randint(0, 3)))
            msg = {"role": role, "content": content}
            if role == "assistant" and rng.random() < 0.3:
                msg["reasoning_content"] = rng.choice(PROSE + ["", "\nthinking\n"])
            if role == "assistant" and rng.random() < 0.2:
                msg["content"] = "<think>\n" + rng.choice(PROSE) + "\n</think>\n\n" + content
            if role == "assistant" and rng.random() < 0.35:
                calls = []
                for _ in range(rng.randint(1, 3)):
                    args = {f"arg{i}": random_value(rng) for i in range(rng.randint(0, 3))}
                    fn = {"name": rng.choice(["get_weather", "search", "run_code"]),
                          "arguments": json.dumps(args, ensure_ascii=rng.random() < 0.5) if rng.random() < 0.3 else args}
                    calls.append({"type": "function", "function": fn} if rng.random() < 0.8 else fn)
                msg["tool_calls"] = calls
            msgs.append(msg)
        out.append(msgs)
    return out


def chat_cases(num_random=150):
    sys_msg = {"role": "system", "content": "You are a helpful assistant."}
    user = {"role": "user", "content": "What is the capital of France?"}
    answer = {"role": "assistant", "content": "The capital of France is Paris."}
    user2 = {"role": "user", "content": "And of Japan? 日本の首都は？"}
    think_answer = {"role": "assistant", "content": "<think>\nThe user asks about Japan.\n</think>\n\nTokyo."}
    reasoning = {"role": "assistant", "content": "Tokyo.", "reasoning_content": "Japan's capital is Tokyo."}
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]}
    call_text = {"role": "assistant", "content": "Let me check.", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Tokyo\"}"}},
        {"type": "function", "function": {"name": "search", "arguments": {"query": "Tokyo weather", "top_k": 3, "score": 0.75}}}]}
    tool_result = {"role": "tool", "content": "{\"temperature\": 21, \"sky\": \"clear\"}"}
    tool_result2 = {"role": "tool", "content": "Sunny, 25°C"}
    final = {"role": "assistant", "content": "It is 21 °C and clear in Paris."}
    conversations = [
        [user], [sys_msg, user], [user, answer], [sys_msg, user, answer, user2],
        [user, answer, user2, think_answer], [user, think_answer, user2], [user, reasoning],
        [user, reasoning, user2, reasoning], [sys_msg, user, call, tool_result, final],
        [user, call_text, tool_result, tool_result2], [user, call_text, tool_result, tool_result2, final, user2],
        [{"role": "user", "content": "<tool_response>\nnot really\n</tool_response>"}, answer],
        [user, {"role": "assistant", "content": "\n\nLeading newlines\n"}],
        [{"role": "user", "content": "Quotes \"double\" and 'single', backslash \\ and <|im_end|>"}],
        [sys_msg, {"role": "system", "content": "A second system message."}, user],
        [user, {"role": "assistant", "content": "Answer", "reasoning_content": None}],
    ]
    cases = []
    variants = [(tools, agp, kwargs) for tools in (None, [WEATHER_TOOL, SEARCH_TOOL]) for agp in (True, False)
                for kwargs in ({}, {"enable_thinking": False}, {"enable_thinking": True})]
    for msgs in conversations:
        for tools, agp, kwargs in variants:
            cases.append({"messages": msgs, "tools": tools, "add_generation_prompt": agp, "kwargs": kwargs})
    rng = random.Random(7)
    for msgs in random_conversations(random.Random(99), num_random):
        for tools, agp, kwargs in rng.sample(variants, 2):
            cases.append({"messages": msgs, "tools": tools, "add_generation_prompt": agp, "kwargs": kwargs})
    return cases



# ---- Qwen3.5's form --------------------------------------------------------------------------

# Qwen3.5's split (transformers' Qwen3_5Tokenizer and the checkpoints' tokenizer.json): Qwen3's,
# with combining marks (\p{M}) kept in words and out of punctuation runs.
QWEN35_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                  r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Its added tokens follow the BPE vocabulary (248,044 tokens there, a few hundred here):
# Qwen3's 26 in Qwen3's order, then these, all special.
QWEN35_AUDIO_TOKENS = ["<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>",
                       "<tts_text_eod>", "<tts_text_bos_single>", "<|audio_pad|>"]
QWEN35_VOCAB_SIZE = 640  # 256 bytes + 384 merges
# Text whose words carry combining marks: Indic vowel signs and viramas, Thai tone marks, Arabic
# and Hebrew vowel points, Latin letters with combining accents, marks after non-letters.
MARK_PROSE = [
    "नमस्ते दुनिया, क्या हाल है? मैं ठीक हूँ।", "संस्कृतम् अतीव प्राचीना भाषा अस्ति।",
    "আমার সোনার বাংলা, আমি তোমায় ভালোবাসি।", "தமிழ் மொழி மிகவும் பழமையானது.",
    "ภาษาไทยมีวรรณยุกต์ ่ ้ ๊ ๋ และสระ ิ ี ึ ื", "ພາສາລາວ ສະບາຍດີ ຂອບໃຈ",
    "بِسْمِ ٱللَّٰهِ ٱلرَّحْمَٰنِ ٱلرَّحِيمِ", "בְּרֵאשִׁית בָּרָא אֱלֹהִים",
    "Tiếng Việt: Xin chào, tôi tên là Nguyễn.", "ಕನ್ನಡ ಭಾಷೆ ಸುಂದರವಾಗಿದೆ", "മലയാളം ഭാഷ",
    "Z\u0351a\u0362l\u0336g\u0337o\u0338 t\u0301e\u0302x\u0303t\u0304", "e\u0301le\u0300ve na\u0308ive",
]


def hf_marks():
    """Every code point that is \p{M} to Hugging Face (Oniguruma's tables)."""
    from tokenizers import Regex, pre_tokenizers
    split = pre_tokenizers.Split(Regex(r"\p{M}"), "removed")
    return [c for c in range(0x300, 0x110000)
            if not 0xD800 <= c <= 0xDFFF and not split.pre_tokenize_str(chr(c))]


def qwen35_corpus(marks):
    corpus = build_corpus(num_random=600) + MARK_PROSE
    corpus += [unicodedata.normalize("NFD", t) for t in MARK_PROSE]
    # Marks in every position the pattern distinguishes: inside and after words, after a space,
    # a digit, punctuation, an apostrophe and a newline, alone, in runs.
    for m in map(chr, marks):
        corpus.append(f"a{m}b {m}x 1{m} !{m}? '{m}s\n{m}")
    corpus += ["'\u0301s", "x'\u0301S", "1\u0301", "!\u0301!", " \u0301", "\u0301" * 5, "don\u0301't"]
    seen = set()
    return [t for t in corpus if not (t in seen or seen.add(t))]


def build_qwen35_fixture(out_dir, marks):
    """Trains a small byte-level BPE in Qwen3.5's form and writes tokenizer.json and
    tokenizer_config.json into out_dir (chat_template.jinja there is written by hand)."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN35_PATTERN), "isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=QWEN35_VOCAB_SIZE, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    # Mark-heavy words weigh more, so that merges join letters with the marks after them (also
    # the marks PCRE2 10.42 does not know) and a wrong split shows in the ids.
    mark_words = [f"a{chr(m)}" for m in marks[::7]] + [f"\u0628{chr(m)}" for m in (0x897, 0x64E, 0x651)]
    tok.train_from_iterator((PROSE + CODE) * 2 + MARK_PROSE * 6 + mark_words * 4, trainer)
    spec = json.loads(tok.to_str())
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    spec["pre_tokenizer"]["pretokenizers"][1] = byte_level
    spec["post_processor"] = spec["decoder"] = byte_level
    qwen3 = json.load(open("tests/fixtures/qwen3-demo/tokenizer.json", encoding="utf-8"))
    contents = [(t["content"], t["special"]) for t in qwen3["added_tokens"]]
    contents += [(c, True) for c in QWEN35_AUDIO_TOKENS]
    first = len(spec["model"]["vocab"])
    spec["added_tokens"] = [{"id": first + i, "content": c, "single_word": False, "lstrip": False,
                             "rstrip": False, "normalized": False, "special": special}
                            for i, (c, special) in enumerate(contents)]
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(spec, f, ensure_ascii=False, indent=1)
        f.write("\n")
    config = {
        "add_prefix_space": False,
        "added_tokens_decoder": {str(t["id"]): {k: t[k] for k in ("content", "lstrip", "normalized", "rstrip",
                                                                  "single_word", "special")}
                                 for t in spec["added_tokens"]},
        "bos_token": None, "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>",
        "errors": "replace", "model_max_length": 262144, "pad_token": "<|endoftext|>",
        "split_special_tokens": False, "tokenizer_class": "Qwen3_5Tokenizer", "unk_token": None,
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
        f.write("\n")


def qwen35_chat_cases():
    """Qwen3's fixed cases (JSON-string tool arguments are refused by Qwen3.5's template: error
    rows), content given as parts (text, image, video), and seeded random chats with parts."""
    image = {"type": "image", "image": "file:///cat.png"}
    image_url = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
    video = {"type": "video", "video": "file:///clip.mp4"}
    text = {"type": "text", "text": "What is in it?"}
    call = {"type": "function", "function": {"name": "get_weather", "arguments": {
        "city": "Paris", "days": [1, 2], "options": {"unit": "celsius", "alerts": None},
        "verbose": True, "ratio": 0.5, "note": "<b>&</b>"}}}
    conversations = [
        [{"role": "user", "content": [text, image]}],
        [{"role": "system", "content": [{"type": "text", "text": "Look closely."}]},
         {"role": "user", "content": [image_url, text, video, image]},
         {"role": "assistant", "content": [{"type": "text", "text": "A cat and a clip."}]},
         {"role": "user", "content": [video, {"type": "text", "text": "And now?"}]}],
        [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": None, "tool_calls": [call]},
         {"role": "tool", "content": [{"type": "text", "text": "Sunny"}]}, {"role": "tool", "content": "21 C"}],
        [{"role": "user", "content": "Weather?"},
         {"role": "assistant", "content": "Checking.", "reasoning_content": "Use the tool.",
          "tool_calls": [call, {"name": "search", "arguments": {"query": "Paris"}}, {"name": "noop"}]},
         {"role": "tool", "content": "ok"}, {"role": "assistant", "content": "<think>\nDone.\n</think>\n\nSunny."}],
        [{"role": "tool", "content": "orphan result"}, {"role": "user", "content": "q"}],
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "reasoning_content": 42}],
        # refused by the template
        [{"role": "system", "content": [image]}, {"role": "user", "content": "q"}],
        [{"role": "user", "content": [{"type": "audio", "audio": "a.wav"}]}],
        [{"role": "user", "content": 5}],
        [{"role": "user", "content": "<tool_response>\nonly results\n</tool_response>"}],
        [{"role": "user", "content": "q"}, {"role": "critic", "content": "x"}],
        [],
    ]
    variants = [(tools, agp, kwargs) for tools in (None, [WEATHER_TOOL, SEARCH_TOOL]) for agp in (True, False)
                for kwargs in ({}, {"enable_thinking": False}, {"add_vision_id": True})]
    cases = [{"messages": m, "tools": t, "add_generation_prompt": a, "kwargs": k}
             for m in conversations for t, a, k in variants]
    cases += chat_cases(num_random=0)
    rng = random.Random(35)
    parts = [text, image, image_url, video, {"type": "text", "text": ""}]
    for msgs in random_conversations(random.Random(135), 100):
        for msg in msgs:
            if rng.random() < 0.3 and msg["role"] != "system":
                msg["content"] = [dict(rng.choice(parts)) for _ in range(rng.randint(1, 3))]
            for call in msg.get("tool_calls", []):  # Qwen3.5's template takes arguments as a mapping
                fn = call.get("function", call)
                if isinstance(fn["arguments"], str):
                    fn["arguments"] = json.loads(fn["arguments"])
        for tools, agp, kwargs in rng.sample(variants, 2):
            cases.append({"messages": msgs, "tools": tools, "add_generation_prompt": agp, "kwargs": kwargs})
    return cases


def write_qwen35_goldens(model_dir, out_dir, marks):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    hf = AutoTokenizer.from_pretrained(model_dir)
    corpus = qwen35_corpus(marks)
    with open(os.path.join(out_dir, "qwen35_encode.jsonl"), "w", encoding="utf-8") as f:
        for text in corpus:
            tok.encode_special_tokens = False
            ids = tok.encode(text, add_special_tokens=True).ids
            # transformers builds Qwen3_5Tokenizer's pipeline itself: it must agree.
            assert hf(text)["input_ids"] == ids, text
            tok.encode_special_tokens = True
            ids_plain = tok.encode(text, add_special_tokens=True).ids
            pieces = [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(text))]
            decoded = tok.decode(ids, skip_special_tokens=False)
            decoded_skip = tok.decode(ids, skip_special_tokens=True)
            # A few hundred tokens make long id lists: fields equal to another are left out.
            row = {"text": text, "ids": ids, "pieces": pieces}
            if ids_plain != ids:
                row["ids_plain"] = ids_plain
            if decoded != text:
                row["decoded"] = decoded
            if decoded_skip != decoded:
                row["decoded_skip"] = decoded_skip
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    cases = qwen35_chat_cases()
    with open(os.path.join(out_dir, "qwen35_chat.jsonl"), "w", encoding="utf-8") as f:
        for case in cases:
            try:
                text = hf.apply_chat_template(case["messages"], tools=case["tools"], tokenize=False,
                                              add_generation_prompt=case["add_generation_prompt"], **case["kwargs"])
                row = {**case, "text": text}
            except Exception as e:  # the template refused (raise_exception) or failed
                row = {**case, "error": True, "message": str(e)}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{len(corpus)} Qwen3.5 encode cases, {len(cases)} Qwen3.5 chat cases written to {out_dir}")

JINJA_CASES = [
    # whitespace control: trim_blocks, lstrip_blocks, explicit -, + opt-outs
    ("a\n{% if true %}\nb\n{% endif %}\nc", {}),
    ("  {% if true %}x{% endif %}  \n  y", {}),
    ("a  {%- if true -%}  b  {%- endif -%}  c", {}),
    ("x {{- ' y ' -}} z\n", {}),
    ("line\n    {%+ if true %}kept{% endif %}\n", {}),
    ("{% if true +%}\nnewline kept{% endif %}", {}),
    ("{# comment #}\nafter\n  {#- c -#}  tail", {}),
    ("{% for i in range(3) %}\n  item {{ i }}\n{% endfor %}\n", {}),
    ("\r\n{% if true %}\r\nwin\r\n{% endif %}\r\n", {}),
    # expressions and precedence
    ("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }}", {}),
    ("{{ 1 ~ 2 + 3 }} {{ 'a' ~ none ~ true }} {{ 'ab' * 3 }}", {}),
    ("{{ 1 < 2 < 3 }} {{ not 1 == 2 }} {{ 1 if false }}|{{ 'y' if 0 else 'n' }}", {}),
    ("{{ a or b }} {{ a and b }} {{ b or 'dflt' }} {{ x is defined }} {{ x | default('d') }}", {"a": 1, "b": 0}),
    ("{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }}", {}),
    ("{{ xs|length - 1 }} {{ xs[::-1] }} {{ xs[1:] }} {{ xs[:-1] }} {{ xs[-1] }} {{ xs.0 }} {{ 'héllo'[1:3] }} {{ 'abc'[::-1] }}", {"xs": [1, 2, 3]}),
    ("{{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1.5e-7 }} {{ 2.0 }} {{ 100000.0 }} {{ 1/3 }} {{ 3 * 1.0 }} {{ 0.0001 }}", {}),
    ("{{ [1, 'a', none, true, 2.5, {'k': 'v'}] }} {{ {'a': [1, 2], 'b': \"it's\"} }} {{ ('t', 1) }}", {}),
    # statements
    ("{% set x = 5 %}{% set y, z = [1, 2] %}{{ x + y + z }}", {}),
    ("{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}", {}),
    ("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}", {}),
    ("{% set block %}inside {{ 1 + 1 }}{% endset %}[{{ block }}]", {}),
    ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {"d": {"b": 1, "a": 2}}),
    ("{% for x in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }} {% endfor %}", {"xs": "abc"}),
    ("{% for x in xs if x > 1 %}{{ x }}{{ loop.length }}{% else %}empty{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}", {"xs": [1, 2, 3]}),
    ("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 4 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("{% for x in xs %}{{ loop.cycle('a', 'b') }}{{ loop.previtem is defined }}{% endfor %}", {"xs": [1, 2, 3]}),
    ("{% if a %}A{% elif b %}B{% elif c %}C{% else %}D{% endif %}", {"a": 0, "b": "", "c": [1]}),
    ("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('x') }} {{ greet('y', punct='?') }}", {}),
    ("{% generation %}gen {{ 1 }}{% endgeneration %}", {}),
    # filters
    ("{{ '  pad  '|trim }}|{{ 'Hello'|upper }}|{{ 'Hello'|lower }}|{{ 'hello world'|title }}|{{ 'hello'|capitalize }}", {}),
    ("{{ xs|join(', ') }}|{{ xs|first }}|{{ xs|last }}|{{ xs|length }}|{{ xs|reverse|list }}|{{ xs|sum }}|{{ xs|max }}|{{ xs|min }}", {"xs": [3, 1, 2]}),
    ("{{ xs|sort }}|{{ xs|sort(reverse=true) }}|{{ ys|sort(attribute='n')|map(attribute='n')|list }}|{{ xs|unique|list }}", {"xs": [3, 1, 2, 1], "ys": [{"n": 2}, {"n": 1}]}),
    ("{{ ms|selectattr('role', 'equalto', 'user')|list|length }}|{{ ms|rejectattr('role', 'eq', 'user')|map(attribute='role')|join(',') }}|{{ [0, 1, 2]|select|list }}|{{ [1, 2, 3, 4]|select('even')|list }}", {"ms": [{"role": "user"}, {"role": "assistant"}, {"role": "user"}]}),
    ("{{ 'a-b-c'|replace('-', '+') }}|{{ 3.7|int }}|{{ '42'|int + 1 }}|{{ 'x'|int }}|{{ 2|float }}|{{ -3|abs }}|{{ 2.567|round(2) }}|{{ 2.5|round }}", {}),
    ("{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ 'é\"\\\n\t<>&\u0001'|tojson }}|{{ [1.0, 2.5, none, false]|tojson }}|{{ d|tojson(sort_keys=true) }}", {"d": {"z": [1, {"y": None}], "a": "b", "e": {}}}),
    ("{{ d|tojson(ensure_ascii=true) }}|{{ d|tojson(separators=(',', ':')) }}|{{ d|tojson(true) }}|{{ d|tojson(false, 1) }}|{{ d|tojson(indent=2, separators=(', ', ' = ')) }}", {"d": {"k": ["é😀\u2028\u0085", 1.5, None, {"n": []}]}}),
    ("{{ d|items|list }}|{{ d|dictsort }}|{{ 'abc'|list }}|{{ x|string ~ '!' }}|{{ none|default('n', true) }}|{{ ''|default('empty', boolean=true) }}", {"d": {"b": 1, "a": 2}, "x": 5}),
    ("{{ 'line1\nline2\n\nline4'|indent(2) }}|{{ 'a\nb'|indent(4, true) }}", {}),
    # tests
    ("{{ none is none }} {{ 1 is number }} {{ 1.0 is float }} {{ true is boolean }} {{ 1 is integer }} {{ 's' is string }} {{ {} is mapping }} {{ [] is iterable }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }}", {}),
    ("{{ x is defined }} {{ x is undefined }} {{ false is false }} {{ 0 is false }} {{ true is true }} {{ 1 is sameas true }} {{ 2 is equalto 2 }} {{ 'a' is in 'cat' }} {{ 'abc' is lower }} {{ 'A' is upper }} {{ 1 is not none }}", {}),
    # string and dict methods
    ("{{ s.startswith('he') }} {{ s.endswith(('x', 'lo')) }} {{ s.upper() }} {{ s.split('l') }} {{ ' a  b '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ s.replace('l', 'L', 1) }} {{ s.find('l') }} {{ s.count('l') }}", {"s": "hello"}),
    ("{{ '\n\nx\n'.strip('\n') }}|{{ '  x  '.lstrip() }}|{{ '  x  '.rstrip() }}|{{ 'xxaxx'.strip('x') }}|{{ '-'.join(['a', 'b']) }}|{{ 'a\nb\r\nc'.splitlines() }}|{{ '123'.isdigit() }}", {}),
    ("{{ d.get('a') }} {{ d.get('zz', 'dflt') }} {{ d.get('zz') }} {{ d.keys()|list }} {{ d.values()|list }} {{ d['a'] }} {{ d.a }} {{ d.missing is defined }}", {"d": {"a": 1, "b": [2]}}),
    ("{{ m.content.split('</think>')[-1].lstrip('\n') }}|{{ m.content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') }}", {"m": {"content": "<think>\nreason\n</think>\n\nanswer"}}),
    ("{{ [1, 2, 2].count(2) }} {{ ['a', 'b'].index('b') }} {{ xs + [4] }} {{ range(2, 8, 2)|list }} {{ dict(a=1, b='x') }}", {"xs": [1]}),
    ("{{ 'Ünïcødé'|upper }} {{ 'ÀÉÎ'|lower }} {{ 'straße'|length }} {{ '日本語'[1] }} {{ 'emoji 😀'|reverse }}", {}),
    # printing of values
    ("{{ none }}|{{ true }}|{{ false }}|{{ 1 }}|{{ 1.0 }}|{{ \"q's\" }}|{{ [\"q's\", 'd\"q', 'both\\'\"', '\\\\'] }}|{{ undefined_var }}|", {}),
    ("{{ (1,) }} {{ () }} {{ {'a': 1}.items()|list }} {{ [(1, 2)]|tojson }}", {}),
    # Jinja's own semantics where they differ from Python's
    ("{{ '4x-y z(a'|title }}|{{ '4x-y z(a'.title() }}|{{ 'ab1'.capitalize() }}|{{ (1, 'x') is lower }}|{{ '123' is lower }}|{{ 'ABC' is upper }}", {}),
    ("{{ 3.7 is odd }}|{{ 3.0 is odd }}|{{ -3 is odd }}|{{ 4.5 is divisibleby 1.5 }}|{{ 7 is divisibleby 2 }}|{{ 2|round }}|{{ 2|round(1, 'floor') }}|{{ true * 'ab' }}|{{ 2 * [1] }}|{{ (1,) * 2 }}", {}),
    ("{% if xs|selectattr('a') %}iterators are true{% endif %}|{% if xs|select|list %}x{% else %}lists are not{% endif %}|{% if d|items %}y{% endif %}|{{ 'k' in nothing }}|{{ nothing is sequence }}", {"xs": [1, 2], "d": {}}),
    # |safe makes a markupsafe.Markup: `+` with a plain string escapes the plain one
    ("{{ '<p>' + (d|tojson|safe) + '</p>' }}|{{ '<p>' ~ (d|tojson|safe) ~ '</p>' }}|{% set v = d|tojson|safe if d is mapping else d|string %}{{ v }}", {"d": {"k": "<&>'\""}}),
    ("{{ ('<b>'|safe) + '<i>' }}|{{ ('<b>'|safe|trim) + '<i>' }}|{{ ('<b>'|safe|upper) + '<i>' }}|{{ ('<b>'|safe|string) + '<i>' }}|{{ ('<b>'|safe|title) + '<i>' }}|{{ ('<b>'|safe|replace('b', 'c')) + '<i>' }}", {}),
    ("{{ (5|safe) ~ (none|safe) }}|{{ ('x'|safe) * 2 + '<' }}|{{ ('<x>'|safe)[1:] + '<' }}|{{ ('<x>'|safe)[0] + '<' }}|{{ ('x'|safe) + ('<'|safe) }}|{{ 'a' + 'b'|safe + '<' }}|{{ ('&'|safe) == '&' }}|{{ ('0'|safe) and 'y' }}", {}),
    # errors
    ("{{ nothing|int }}", {}),
    ("{{ raise_exception('custom failure') }}", {}),
    ("{{ undefined_var.attr }}", {}),
    ("{% if %}{% endif %}", {}),
    ("{% for x in xs %}", {"xs": [1]}),
    ("{{ 1 + 'a' }}", {}),
    ("{{ xs.append(1) }}", {"xs": [1]}),
    ("{% set d.x = 1 %}", {"d": {"x": 0}}),
    ("{{ x | nosuchfilter }}", {"x": 1}),
    ("{{ range('a') }}", {}),
    ("{{ 'abc'[1.5] }}{{ {'a': 1}|join(1) }}{{ 3|round('x') }}", {}),
    ("{% for a, b in [1, 2] %}{% endfor %}", {}),
    ("{{ x.y.z }}", {"x": {"y": 1}}),
    ("{{ none.x }}|{{ 5.x }}|{{ [1].x }}", {}),
    ("{{ ('<'|safe) + 1 }}", {}),
]


def render_jinja_cases():
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from transformers.utils.chat_template_utils import _compile_jinja_template

    rows = []
    for source, context in JINJA_CASES:
        try:
            text = _compile_jinja_template(source).render(**context)
            rows.append({"template": source, "context": context, "text": text})
        except (jinja2.exceptions.TemplateError, TypeError, ValueError) as e:
            rows.append({"template": source, "context": context, "error": True, "message": str(e)})
    del ImmutableSandboxedEnvironment
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tests/fixtures/qwen3-demo")
    ap.add_argument("--out", default="tests/tokenizer/golden")
    ap.add_argument("--qwen35-model", default="tests/fixtures/qwen35-tokenizer")
    ap.add_argument("--rebuild-qwen35-fixture", action="store_true",
                    help="retrain the Qwen3.5-form tokenizer (changes every Qwen3.5 id)")
    args = ap.parse_args()
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    os.makedirs(args.out, exist_ok=True)
    corpus = build_corpus()
    with open(os.path.join(args.out, "encode.jsonl"), "w", encoding="utf-8") as f:
        for text in corpus:
            tok.encode_special_tokens = False
            ids = tok.encode(text, add_special_tokens=True).ids
            tok.encode_special_tokens = True
            ids_plain = tok.encode(text, add_special_tokens=True).ids
            row = {"text": text, "ids": ids, "ids_plain": ids_plain,
                   "decoded": tok.decode(ids, skip_special_tokens=False),
                   "decoded_skip": tok.decode(ids, skip_special_tokens=True)}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    hf = AutoTokenizer.from_pretrained(args.model)
    cases = chat_cases()
    with open(os.path.join(args.out, "chat.jsonl"), "w", encoding="utf-8") as f:
        for case in cases:
            text = hf.apply_chat_template(case["messages"], tools=case["tools"], tokenize=False,
                                          add_generation_prompt=case["add_generation_prompt"], **case["kwargs"])
            f.write(json.dumps({**case, "text": text}, ensure_ascii=False) + "\n")
    jinja_rows = render_jinja_cases()
    with open(os.path.join(args.out, "jinja.jsonl"), "w", encoding="utf-8") as f:
        for row in jinja_rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{len(corpus)} encode cases, {len(cases)} chat cases, {len(jinja_rows)} Jinja cases written to {args.out}")
    marks = hf_marks()
    if args.rebuild_qwen35_fixture:
        build_qwen35_fixture(args.qwen35_model, marks)
    write_qwen35_goldens(args.qwen35_model, args.out, marks)


if __name__ == "__main__":
    main()
