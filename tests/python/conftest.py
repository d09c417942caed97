"""Shared fixtures of the Python package's tests (CPU backend, tests/fixtures models).

The package is the installed one (`pip install .`), or a source tree's build when run with
PYTHONPATH=python and a -DMINIINFER_C_API=ON build in build/ (or $MINIINFER_BUILD_DIR).
"""
import json
import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DEMO = str(FIXTURES / "qwen3-demo")  # what scripts/demo.sh runs: the real tokenizer, random weights
HF_FIXTURES = ["qwen2-tiny", "qwen3-tiny", "qwen3-moe-tiny", "qwen3-moe-wide", "qwen3-demo",
               "qwen3.5-tiny", "qwen3.5-moe-tiny", "qwen3-next-tiny"]


def reference(name):
    """tests/fixtures/NAME/reference.json: Hugging Face's prompts and greedy continuations."""
    return json.loads((FIXTURES / name / "reference.json").read_text())


def small_engine_kwargs(**overrides):
    """As tests/unit/test_engine.cpp: a short context and a small page pool (fast to build)."""
    return {"max_model_len": 256, "num_pages": 64, **overrides}


@pytest.fixture(scope="session")
def demo_engine():
    from miniinfer.engine.llm_engine import LLMEngine
    with LLMEngine(model=DEMO, **small_engine_kwargs()) as engine:
        yield engine


@pytest.fixture(autouse=True)
def _quiet_logs(monkeypatch):
    # The engine logs model loading at info level; keep test output readable.
    monkeypatch.setenv("MINIINFER_LOG_LEVEL", os.environ.get("MINIINFER_LOG_LEVEL", "warn"))
