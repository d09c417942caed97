"""close() is idempotent and frees everything: 100 create/close cycles leave the process's
memory flat, and the pipeline's processes are gone after close()."""
import os

import pytest

from conftest import FIXTURES, DEMO, small_engine_kwargs
from miniinfer.engine.llm_engine import LLMEngine
from miniinfer.utils import SamplingParams

TINY = str(FIXTURES / "qwen3-tiny")


def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def cycle():
    engine = LLMEngine(model=TINY, max_num_seqs=4, **small_engine_kwargs())
    out = engine.generate([[1, 2, 3]], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True),
                          use_tqdm=False)
    assert len(out[0]["token_ids"]) == 4
    engine.close()
    engine.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        engine.generate([[1]], use_tqdm=False)


def test_100_create_close_cycles_leave_memory_flat():
    for _ in range(10):  # warm up: allocator arenas, caches
        cycle()
    before = rss_mb()
    for _ in range(100):
        cycle()
    grown = rss_mb() - before
    assert grown < 8, f"RSS grew by {grown:.1f} MiB over 100 cycles"


def child_pids():
    """This process's children, from /proc (running `ps` would add one)."""
    pids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
                pids.add(int(entry))
    return pids


def test_close_stops_the_pipeline_processes():
    before = child_pids()
    with LLMEngine(model=DEMO, use_multiprocess=True, **small_engine_kwargs()) as engine:
        assert len(child_pids() - before) == 3
        engine.generate(["Hi"], SamplingParams(max_tokens=2), use_tqdm=False)
    assert child_pids() - before == set()
    with LLMEngine(model=DEMO, use_multiprocess=True, **small_engine_kwargs()) as engine:
        pass
    engine.close()
    assert child_pids() - before == set()
