"""The package's surface: the `miniinfer` command, type stubs that match the modules, and the
Python benchmark's table."""
import ast
import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DEMO

PACKAGE = Path(importlib.import_module("miniinfer").__file__).parent
REPO = Path(__file__).resolve().parents[2]


def test_miniinfer_command_runs_the_bundled_binary():
    exe = shutil.which("miniinfer", path=os.path.dirname(sys.executable))
    if exe is None:
        pytest.skip("the package is not installed (PYTHONPATH run): no `miniinfer` script")
    p = subprocess.run([exe, "generate", "--model", DEMO, "--prompt", "Hi", "--max-tokens", "2"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert '"token_ids"' in p.stdout


@pytest.mark.parametrize("module", ["miniinfer", "miniinfer.utils", "miniinfer.llm",
                                    "miniinfer.tokenizer", "miniinfer.engine.llm_engine"])
def test_stubs_name_every_public_name(module):
    mod = importlib.import_module(module)
    stub = Path(mod.__file__).with_suffix(".pyi")
    assert stub.is_file(), f"{stub} is missing"
    tree = ast.parse(stub.read_text())
    declared = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            declared.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            declared.add(node.target.id)
        elif isinstance(node, ast.ImportFrom):
            declared.update(a.asname or a.name for a in node.names)
    assert set(mod.__all__) <= declared


def test_python_benchmark_prints_the_bench_table():
    p = subprocess.run([sys.executable, str(REPO / "bench" / "bench_miniinfer.py"), "--model", DEMO,
                        "--num-seqs", "2", "--max-model-len", "2048"],
                       capture_output=True, text=True, timeout=300, cwd=REPO)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert lines[0].startswith("| workload | device | attention | page | graphs | overlap |")
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    assert cells[:5] == ["balanced", "cpu", "cpu", "16", "off"] and cells[6] == "2"
    assert cells[5] in ("on", "off") and int(cells[7]) > 0
    assert cells[-2:] == ["—", "—"]  # no speed of light on the CPU, as `miniinfer bench`


def test_python_benchmark_runs_a_workload_again_and_reports_first_and_steady():
    p = subprocess.run([sys.executable, str(REPO / "bench" / "bench_miniinfer.py"), "--model", DEMO,
                        "--num-seqs", "2", "--max-model-len", "2048", "--runs", "3"],
                       capture_output=True, text=True, timeout=300, cwd=REPO)
    assert p.returncode == 0, p.stderr
    rows = [l for l in p.stdout.splitlines() if l.startswith("| balanced")]
    assert [r.split("|")[1].strip() for r in rows[:3]] == [
        "balanced (run 1)", "balanced (run 2)", "balanced (run 3)"]
    assert "first run" in rows[3] and "steady state" in rows[3] and "mean of runs 2-3" in rows[3]
    bad = subprocess.run([sys.executable, str(REPO / "bench" / "bench_miniinfer.py"), "--model",
                          DEMO, "--runs", "0"], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert bad.returncode != 0 and "--runs 0: at least 1" in bad.stderr
    # multiturn's prompts depend on the outputs: `miniinfer bench` runs it, the C API refuses it.
    bad = subprocess.run([sys.executable, str(REPO / "bench" / "bench_miniinfer.py"), "--model",
                          DEMO, "--workload", "multiturn"],
                         capture_output=True, text=True, timeout=60, cwd=REPO)
    assert bad.returncode != 0 and "--workload multiturn: " in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr, bad.stderr
