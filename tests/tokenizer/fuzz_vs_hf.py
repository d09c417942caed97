#!/usr/bin/env python3
"""Differential fuzz: MiniInfer's tokenizer against Hugging Face `tokenizers`.

Generates fresh random strings (random bytes, random code points from many Unicode blocks,
random mixes of corpus-like pieces), encodes them with both (with and without special-token
parsing), and decodes the ids with both; then decodes random id sequences (partial UTF-8
characters, special tokens, out-of-range ids) with both, with and without skip_special_tokens. Exits 0 when all agree, 1 on the first mismatches
(printed), 77 when `tokenizers` is not importable (ctest reports the test as skipped).

usage: fuzz_vs_hf.py DRIVER MODEL_DIR [--count N] [--seed S]
"""
import argparse
import random
import subprocess
import sys
import time

try:
    from tokenizers import Tokenizer
except ImportError:
    print("SKIP: Python package `tokenizers` not installed", file=sys.stderr)
    sys.exit(77)

BLOCKS = [  # (first, last) code point ranges, weighted toward scripts models see
    (0x20, 0x7E), (0x00, 0x1F), (0x7F, 0xFF), (0x100, 0x24F), (0x250, 0x2FF), (0x300, 0x36F),
    (0x370, 0x3FF), (0x400, 0x4FF), (0x530, 0x58F), (0x590, 0x5FF), (0x600, 0x6FF),
    (0x900, 0x97F), (0x980, 0x9FF), (0xA00, 0xA7F), (0xB80, 0xBFF), (0xE00, 0xE7F),
    (0x10A0, 0x10FF), (0x1100, 0x11FF), (0x1680, 0x169F), (0x1E00, 0x1EFF), (0x2000, 0x206F),
    (0x20A0, 0x20CF), (0x2100, 0x214F), (0x2190, 0x21FF), (0x2200, 0x22FF), (0x2460, 0x24FF),
    (0x2500, 0x257F), (0x2600, 0x26FF), (0x2700, 0x27BF), (0x3000, 0x303F), (0x3040, 0x30FF),
    (0x3100, 0x312F), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xF900, 0xFAFF), (0xFE00, 0xFE0F),
    (0xFE30, 0xFE4F), (0xFF00, 0xFFEF), (0xFFF0, 0xFFFF), (0x10000, 0x1007F), (0x1D400, 0x1D7FF),
    (0x1F300, 0x1F5FF), (0x1F600, 0x1F64F), (0x1F680, 0x1F6FF), (0x1F900, 0x1F9FF),
    (0x1FA70, 0x1FAFF), (0x20000, 0x2A6DF), (0xE0000, 0xE007F), (0xF0000, 0xF00FF),
    (0x1800, 0x18AF), (0x1AB0, 0x1AFF), (0x1DC0, 0x1DFF), (0x3130, 0x318F), (0xE000, 0xE0FF),
    (0xFB50, 0xFDFF), (0xE0100, 0xE01EF), (0x0800, 0x08FF), (0x0C00, 0x0DFF), (0x1000, 0x109F),
    (0x11000, 0x11FFF), (0x16F00, 0x16FFF), (0x1E000, 0x1E4FF), (0x1E900, 0x1E95F),
    (0x2B740, 0x2B81F), (0x30000, 0x323AF), (0x1F000, 0x1F2FF), (0x10FFF0, 0x10FFFF),
]
PIECES = [
    " ", "  ", "   ", "\t", "\n", "\r\n", "\n\n", " \n", "\u00a0", "\u3000", "\u2028", "\u0085",
    "'s", "'S", "'t", "'RE", "'Ve", "'m", "'LL", "'d", "\u017f", "'", '"', "can't", "I'M",
    "hello", "World", "the", " the", "ÉCOLE", "naïve", "e\u0301", "A\u030a", "\u1100\u1161\u11a8",
    "\u1100", "\u1161", "\u11a7", "\u11a8", "\uac00", "\uac01", "\u0cc6\u0cc2\u0cd5", "\u09c7\u09be",
    "123", "4567890", "3.14", "1,000", "٣٤٥", "५६", "Ⅻ", "½", "²",
    "你好", "世界", "日本語", "カタカナ", "한국어", "Привет", "мир", "مرحبا", "שלום", "नमस्ते", "ไทย",
    "😀", "👍🏽", "👨\u200d👩\u200d👧\u200d👦", "🏳️\u200d🌈", "🇫🇷", "\u200b", "\u200d", "\ufeff",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
    "</tool_call>", "<|im_start", "im_end|>", "<|", "|>", "<<|im_end|>>", "<|fim_prefix|>",
    "def f(x):", "    return x+1", "{\"a\": [1, 2]}", "/* c */", "#include <x>", "=>", "!==", "...",
    "\x00", "\x01", "\x1b[0m", "\x7f",
]


def random_text(rng):
    kind = rng.random()
    n = rng.randint(0, 40)
    if kind < 0.15:  # raw bytes, often invalid UTF-8
        return bytes(rng.getrandbits(8) for _ in range(n))
    if kind < 0.25:  # valid UTF-8 with broken bytes spliced in
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 8))).encode()
        pos = rng.randint(0, len(text))
        return text[:pos] + bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 3))) + text[pos:]
    if kind < 0.35:  # one code point from anywhere, in contexts where its class matters
        cp = rng.randint(0, 0x323AF)
        c = chr(cp if not 0xD800 <= cp <= 0xDFFF else 0x20)
        return rng.choice(["x{c}y {c}{c} 1{c}'{c}s", "{c}a{c}", " {c}\n{c}1", "'{c}{c}", "\u00e9{c}\u0301"]).format(c=c).encode()
    if kind < 0.6:  # random code points from many blocks
        chars = []
        for _ in range(n):
            lo, hi = rng.choice(BLOCKS)
            cp = rng.randint(lo, hi)
            if 0xD800 <= cp <= 0xDFFF:
                cp = 0x20
            chars.append(chr(cp))
        return "".join(chars).encode()
    # mixes of corpus pieces and random ASCII
    parts = []
    for _ in range(rng.randint(1, 12)):
        if rng.random() < 0.8:
            parts.append(rng.choice(PIECES))
        else:
            parts.append("".join(chr(rng.randint(0x20, 0x7E)) for _ in range(rng.randint(1, 6))))
    return "".join(parts).encode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("driver")
    ap.add_argument("model_dir")
    ap.add_argument("--count", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else int(time.time())
    rng = random.Random(seed)
    texts = [random_text(rng) for _ in range(args.count)]

    hf = Tokenizer.from_file(f"{args.model_dir}/tokenizer.json")
    proc = subprocess.run([args.driver, args.model_dir], input="".join(t.hex() + "\n" for t in texts),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"driver failed ({proc.returncode}): {proc.stderr}", file=sys.stderr)
        return 1
    lines = proc.stdout.split("\n")[:-1]
    if len(lines) != len(texts):
        print(f"driver printed {len(lines)} lines for {len(texts)} texts", file=sys.stderr)
        return 1
    mismatches = 0
    for raw, line in zip(texts, lines):
        text = raw.decode("utf-8", errors="replace")
        ours_special, ours_plain, ours_decoded = (p.strip() for p in line.split("|"))
        hf.encode_special_tokens = False
        want_special = hf.encode(text, add_special_tokens=True).ids
        hf.encode_special_tokens = True
        want_plain = hf.encode(text, add_special_tokens=True).ids
        want_decoded = hf.decode(want_special, skip_special_tokens=False)
        got_special = [int(x) for x in ours_special.split()]
        got_plain = [int(x) for x in ours_plain.split()]
        got_decoded = bytes.fromhex(ours_decoded).decode("utf-8")
        if (got_special, got_plain, got_decoded) != (want_special, want_plain, want_decoded):
            mismatches += 1
            if mismatches <= 10:
                print(f"MISMATCH text={raw!r}\n  hf    ={want_special} / {want_plain} / {want_decoded!r}"
                      f"\n  ours  ={got_special} / {got_plain} / {got_decoded!r}")
    vocab_size = hf.get_vocab_size(with_added_tokens=True)
    added_ids = sorted(hf.get_added_tokens_decoder()) or [0]
    id_lists = [[rng.choice([rng.randrange(vocab_size + 20), rng.choice(added_ids), rng.randrange(256)])
                 for _ in range(rng.randint(0, 12))] for _ in range(args.count // 5)]
    proc = subprocess.run([args.driver, args.model_dir], capture_output=True, text=True,
                          input="".join("ids " + " ".join(map(str, ids)) + "\n" for ids in id_lists))
    lines = proc.stdout.split("\n")[:-1]
    if proc.returncode != 0 or len(lines) != len(id_lists):
        print(f"driver failed on id lists ({proc.returncode}): {proc.stderr}", file=sys.stderr)
        return 1
    for ids, line in zip(id_lists, lines):
        got = [bytes.fromhex(p.strip()).decode("utf-8") for p in line.split("|")]
        want = [hf.decode(ids, skip_special_tokens=False), hf.decode(ids, skip_special_tokens=True)]
        if got != want:
            mismatches += 1
            if mismatches <= 10:
                print(f"MISMATCH ids={ids}\n  hf  ={want}\n  ours={got}")
    print(f"fuzz seed={seed}: {len(texts)} strings, {len(id_lists)} id lists, {mismatches} mismatches")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
