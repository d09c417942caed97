"""The GIL is released while the engine works (a Python thread keeps running), and Ctrl-C
during generate aborts the batch and leaves the engine usable, in both modes."""
import os
import signal
import threading
import time

import pytest

from conftest import DEMO, reference, small_engine_kwargs
from miniinfer.engine.llm_engine import LLMEngine
from miniinfer.utils import SamplingParams

LONG = SamplingParams(temperature=0, max_tokens=200, ignore_eos=True)
GREEDY = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)


def test_a_python_thread_keeps_running_while_generate_works(demo_engine):
    ticks, stop = [0], threading.Event()

    def spin():  # pure Python: runs only while it holds the GIL
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.001)

    t = threading.Thread(target=spin)
    t.start()
    start = time.perf_counter()
    demo_engine.generate([[7] * 30] * 8, LONG, use_tqdm=False)
    seconds = time.perf_counter() - start
    stop.set()
    t.join()
    # Free to run, the thread ticks about once per 1.1 ms; holding the GIL in C++ for the
    # engine's 0.1 s slices would let it tick a few percent of that.
    assert seconds > 0.3, "the batch was too short to tell"
    assert ticks[0] > 0.4 * seconds / 0.0011, (ticks[0], seconds)


@pytest.mark.parametrize("multiprocess", [False, True], ids=["one-process", "multiprocess"])
def test_ctrl_c_aborts_the_batch_and_leaves_the_engine_usable(multiprocess):
    # A shell's background job starts with SIGINT ignored, and Python then leaves it so: give
    # this test Python's usual handler whatever started it.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        check_ctrl_c(multiprocess)
    finally:
        signal.signal(signal.SIGINT, previous)


def check_ctrl_c(multiprocess):
    ref = reference("qwen3-demo")
    with LLMEngine(model=DEMO, use_multiprocess=multiprocess, **small_engine_kwargs()) as engine:
        timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
        timer.start()
        start = time.perf_counter()
        # 64 requests of 250 tokens in a 1,024-token cache: several seconds of work on any
        # machine, so the signal at 0.5 s always lands inside generate.
        with pytest.raises(KeyboardInterrupt):
            engine.generate([[7] * 30] * 64, SamplingParams(max_tokens=220, ignore_eos=True),
                            use_tqdm=False)
        assert time.perf_counter() - start < 5
        timer.join()
        out = engine.generate([ref["prompts"][1]["ids"]], GREEDY, use_tqdm=False)
        assert out[0]["token_ids"] == ref["prompts"][1]["greedy"]
        while engine.has_unfinished_requests():
            assert engine.step() == []
