#!/usr/bin/env python3
"""Encode throughput of MiniInfer's tokenizer and Hugging Face `tokenizers`, side by side.

Builds three document sets (English prose, source code, the multilingual golden corpus),
encodes each with Hugging Face (single thread: encode() per document; batch: encode_batch
over all cores) and with MiniInfer's bench_tokenizer binary, checks that both produce the
same number of tokens, and prints a Markdown table.

usage: bench_tokenizer.py BENCH_BINARY [--model tests/fixtures/qwen3-demo] [--repeats 5]
"""
import argparse
import glob
import json
import os
import subprocess
import tempfile
import time

from tokenizers import Tokenizer


def chunks(text, size=4000):
    out, cur = [], []
    n = 0
    for line in text.splitlines(keepends=True):
        cur.append(line)
        n += len(line)
        if n >= size:
            out.append("".join(cur))
            cur, n = [], 0
    if cur:
        out.append("".join(cur))
    return out


PROSE_FILES = ["/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0",
               "/usr/share/common-licenses/GFDL-1.3", "/usr/share/common-licenses/LGPL-2.1"]


def document_sets(root, prose_files):
    prose = ""
    for path in prose_files:
        if os.path.exists(path):
            prose += open(path, encoding="utf-8", errors="replace").read()
    if not prose:
        raise SystemExit("no English prose found: pass --prose FILE...")
    code = "".join(open(p, encoding="utf-8").read()
                   for p in sorted(glob.glob(os.path.join(root, "src/**/*.[ch]*"), recursive=True)))
    golden = [json.loads(l)["text"] for l in open(os.path.join(root, "tests/tokenizer/golden/encode.jsonl"), encoding="utf-8")]
    # A few MB each: large enough for stable timings and for batch encoding to spread out.
    def scale(text):
        return text * max(1, 3_000_000 // max(1, len(text.encode())))
    return {"english prose": chunks(scale(prose)), "C++ source": chunks(scale(code)),
            "multilingual corpus": chunks(scale("\n".join(golden)))}


def bench_hf(tok, docs, repeats):
    tokens = sum(len(e.ids) for e in tok.encode_batch(docs))
    best = best_batch = 1e30
    for _ in range(repeats):
        t0 = time.perf_counter()
        for d in docs:
            tok.encode(d)
        best = min(best, time.perf_counter() - t0)
        t0 = time.perf_counter()
        tok.encode_batch(docs)
        best_batch = min(best_batch, time.perf_counter() - t0)
    return tokens, best, best_batch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench_binary")
    ap.add_argument("--model", default="tests/fixtures/qwen3-demo")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--prose", nargs="+", default=PROSE_FILES, help="English text files (default: Debian's license texts)")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    import platform
    import tokenizers
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; tokenizers {tokenizers.__version__}\n")
    print("| text | MB | tokens | HF 1 thread MB/s | MiniInfer 1 thread MB/s | HF batch MB/s | MiniInfer batch MB/s |")
    print("|---|---|---|---|---|---|---|")
    for name, docs in document_sets(root, args.prose).items():
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps(d) + "\n")
        ours = json.loads(subprocess.run([args.bench_binary, args.model, f.name, str(args.repeats)],
                                         check=True, capture_output=True, text=True).stdout)
        os.unlink(f.name)
        tokens, hf_s, hf_batch_s = bench_hf(tok, docs, args.repeats)
        if tokens != ours["tokens"]:
            raise SystemExit(f"{name}: token counts differ (HF {tokens}, MiniInfer {ours['tokens']})")
        mb = ours["bytes"] / 1e6
        print(f"| {name} | {mb:.2f} | {tokens} | {mb / hf_s:.2f} | {ours['single_MBps']:.2f} | "
              f"{mb / hf_batch_s:.2f} | {ours['batch_MBps']:.2f} |")


if __name__ == "__main__":
    main()
