"""End-to-end tests of `miniinfer tokenize | detokenize | chat-template` against the goldens.

Run by ctest (label tokenizer) with MINIINFER_BIN set to the built binary.
"""
import json
import os
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).parent
MODEL = Path(os.environ.get("MINIINFER_FIXTURES", HERE.parent / "fixtures")) / "qwen3-demo"
BIN = os.environ.get("MINIINFER_BIN", "miniinfer")


def golden(name):
    with open(HERE / "golden" / name, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def run(args, lines, expect_rc=0):
    stdin = "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines)
    proc = subprocess.run([BIN, *args, "--model", str(MODEL)], input=stdin.encode(), capture_output=True)
    assert proc.returncode == expect_rc, proc.stderr.decode()
    # split on "\n" only: str.splitlines() would also split inside texts at U+2028, U+0085, ...
    return [json.loads(line) for line in proc.stdout.decode().split("\n")[:-1]]


@pytest.fixture(scope="module")
def corpus():
    return golden("encode.jsonl")


def test_tokenize_matches_goldens(corpus):
    out = run(["tokenize"], [{"text": r["text"]} for r in corpus])
    assert [o["ids"] for o in out] == [r["ids"] for r in corpus]


def test_tokenize_without_parsing_special_tokens(corpus):
    out = run(["tokenize", "--no-parse-special"], [{"text": r["text"]} for r in corpus])
    assert [o["ids"] for o in out] == [r["ids_plain"] for r in corpus]


def test_detokenize_matches_goldens(corpus):
    lines = [{"ids": r["ids"]} for r in corpus]
    assert [o["text"] for o in run(["detokenize"], lines)] == [r["decoded"] for r in corpus]
    assert [o["text"] for o in run(["detokenize", "--skip-special-tokens"], lines)] == [r["decoded_skip"] for r in corpus]


def test_chat_template_matches_transformers():
    cases = golden("chat.jsonl")
    lines = [{k: c[k] for k in ("messages", "tools", "add_generation_prompt", "kwargs")} for c in cases]
    assert [o["text"] for o in run(["chat-template"], lines)] == [c["text"] for c in cases]


def test_bad_lines_report_errors_and_fail_at_the_end():
    out = run(["tokenize"], [{"text": "ok"}, {"txt": "missing"}, {"text": 3}, {"text": "ok again"}], expect_rc=1)
    assert "ids" in out[0] and "ids" in out[3]
    assert "missing field 'text'" in out[1]["error"] and "wrong type" in out[2]["error"]
    out = run(["chat-template"], [{"messages": "not a list"}], expect_rc=1)
    assert "messages" in out[0]["error"]


def test_missing_model_dir_is_one_line_error():
    proc = subprocess.run([BIN, "tokenize", "--model", "/nonexistent"], input=b"", capture_output=True)
    assert proc.returncode != 0
    assert proc.stderr.decode().startswith("error:") and len(proc.stderr.decode().splitlines()) == 1
