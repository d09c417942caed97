"""add_request / step / abort and stream(): deltas concatenate to the final output."""
import pytest

from conftest import DEMO, reference, small_engine_kwargs
from miniinfer.engine.llm_engine import LLMEngine
from miniinfer.utils import SamplingParams

PARAMS = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)


def check_stream(deltas, ref_greedy=None):
    final = deltas[-1]
    assert final["finished"] and not any(d["finished"] for d in deltas[:-1])
    assert "".join(d["delta_text"] for d in deltas) == final["text"]
    assert [t for d in deltas for t in d["new_token_ids"]] == final["token_ids"]
    assert final["num_output_tokens"] == len(final["token_ids"])
    if ref_greedy is not None:
        assert final["token_ids"] == ref_greedy[:len(final["token_ids"])]


@pytest.mark.parametrize("multiprocess", [False, True], ids=["one-process", "multiprocess"])
def test_stream_deltas_concatenate_to_the_final_text(multiprocess):
    ref = reference("qwen3-demo")
    with LLMEngine(model=DEMO, use_multiprocess=multiprocess, **small_engine_kwargs()) as engine:
        deltas = list(engine.stream("The capital of France is", PARAMS))
        check_stream(deltas, ref["prompts"][1]["greedy"])
        assert len(deltas) > 1
        whole = engine.generate(["The capital of France is"], PARAMS, use_tqdm=False)[0]
        assert deltas[-1]["text"] == whole["text"]
        # Two streams read in turn each get all of their own deltas.
        a = engine.stream("Hello", PARAMS)
        b = engine.stream([{"role": "user", "content": "Hi"}], PARAMS)
        da, db = [next(a)], [next(b)]
        da += list(a)
        db += list(b)
        check_stream(da, ref["prompts"][0]["greedy"])
        check_stream(db)
        assert not engine.has_unfinished_requests() or not engine.step()


def test_add_request_step_and_abort(demo_engine):
    engine = demo_engine
    keep = engine.add_request("Hello", PARAMS)
    gone = engine.add_request([1, 2, 3], SamplingParams(max_tokens=200, ignore_eos=True),
                              request_id="to-abort")
    assert gone == "to-abort"
    with pytest.raises(ValueError, match="already in use"):
        engine.add_request("x", PARAMS, request_id="to-abort")
    seen = {keep: [], gone: []}
    for _ in range(3):
        for out in engine.step():
            seen[out["request_id"]].append(out)
    engine.abort(gone)
    num_before_abort = len(seen[gone])  # overlap scheduling: a step reports the one before it
    while engine.has_unfinished_requests():
        for out in engine.step():
            seen[out["request_id"]].append(out)
    assert len(seen[gone]) == num_before_abort  # nothing after the abort, not even a final
    assert not any(o["finished"] for o in seen[gone])
    check_stream(seen[keep], reference("qwen3-demo")["prompts"][0]["greedy"])
    extra = engine.add_request("x", PARAMS)
    with pytest.raises(RuntimeError, match="streamed requests"):
        engine.generate(["y"], PARAMS, use_tqdm=False)
    engine.abort(extra)
    while engine.has_unfinished_requests():
        assert engine.step() == []


def test_closing_a_stream_early_aborts_its_request(demo_engine):
    s = demo_engine.stream("Hello", SamplingParams(max_tokens=200, ignore_eos=True))
    assert not demo_engine.has_unfinished_requests() or demo_engine.step() == []
    next(s)
    s.close()
    while demo_engine.has_unfinished_requests():
        assert demo_engine.step() == []
