#!/usr/bin/env python3
"""Differential check of MiniInfer's token masks against xgrammar's (issue 49).

Run by hand in its own virtual environment (xgrammar pulls in torch), never in CI:

    python3 -m venv /tmp/xgr && /tmp/xgr/bin/pip install xgrammar transformers
    ninja -C build-cpu structured_mask_dump
    build-cpu/bench/host/structured_mask_dump tests/fixtures/qwen3-demo \\
        tests/data/structured/schemas.jsonl 3 > /tmp/ours.jsonl
    /tmp/xgr/bin/python tools/structured/xgrammar_diff.py tests/fixtures/qwen3-demo \\
        tests/data/structured/schemas.jsonl /tmp/ours.jsonl

For every record (a schema, a prefix of one of its valid documents, our mask) it
compiles the schema with xgrammar under our output policy (compact: no whitespace,
separators "," and ":"; strict mode: additionalProperties absent means false), accepts the
prefix and compares the allowed sets. It prints the number of equal records and, for each
differing one, the tokens only we allow and only xgrammar allows.
"""
import json
import sys

import numpy as np
import xgrammar as xgr
from transformers import AutoTokenizer


def main():
    model_dir, suite_path, ours_path = sys.argv[1:4]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer))
    compiler = xgr.GrammarCompiler(info)
    schemas = [json.loads(line)["schema"] for line in open(suite_path, encoding="utf-8")]
    compiled = {}
    special = set(tokenizer.all_special_ids)
    num_equal = num_diff = num_special_only = num_rejected = 0
    for line in open(ours_path, encoding="utf-8"):
        rec = json.loads(line)
        idx = rec["schema"]
        if idx not in compiled:
            compiled[idx] = compiler.compile_json_schema(
                json.dumps(schemas[idx]), any_whitespace=False, separators=(",", ":"), strict_mode=True)
        matcher = xgr.GrammarMatcher(compiled[idx])
        refused = next((i for i, t in enumerate(rec["prefix"]) if not matcher.accept_token(t)), None)
        if refused is not None:  # a prefix of a document valid by the schema
            num_rejected += 1
            print(f"schema {idx}: xgrammar refuses {tokenizer.decode(rec['prefix'][:refused + 1])!r}")
            continue
        bitmask = xgr.allocate_token_bitmask(1, info.vocab_size)
        matcher.fill_next_token_bitmask(bitmask)
        words = bitmask[0].numpy().view(np.uint32)
        theirs = {i for i in range(info.vocab_size) if (words[i // 32] >> (i % 32)) & 1}
        hex_mask = rec["mask"]
        ours = {i for i in range(info.vocab_size)
                if i // 32 < len(hex_mask) // 8 and (int(hex_mask[8 * (i // 32):8 * (i // 32) + 8], 16) >> (i % 32)) & 1}
        if theirs == ours:
            num_equal += 1
            continue
        if (theirs ^ ours) <= special:  # special tokens xgrammar reads as their text
            num_special_only += 1
            continue
        num_diff += 1
        show = lambda ids: [tokenizer.convert_ids_to_tokens(i) for i in sorted(ids)[:12]]
        print(f"schema {idx} prefix {tokenizer.decode(rec['prefix'])!r}: "
              f"only ours {len(ours - theirs)} {show(ours - theirs)}, "
              f"only xgrammar {len(theirs - ours)} {show(theirs - ours)}")
    print(f"{num_equal} records equal; {num_special_only} differ only in special tokens "
          f"(xgrammar allows e.g. <|im_start|> as text, we never allow a special token but a stop); "
          f"{num_diff} differ otherwise; {num_rejected} valid prefixes xgrammar refuses")


if __name__ == "__main__":
    main()
