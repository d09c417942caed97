"""Bad parameters raise ValueError naming the field (the C++ rules, through the C API); bad
engine options and prompts too; nothing runs and the engine stays usable."""
import re

import pytest

from conftest import DEMO, small_engine_kwargs
from miniinfer.engine.llm_engine import LLMEngine, engine_options
from miniinfer.utils import SamplingParams


@pytest.mark.parametrize("kwargs, field", [
    ({"temperature": -1}, "temperature"),
    ({"temperature": float("nan")}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"top_k": -2}, "top_k"),
    ({"min_p": 2}, "min_p"),
    ({"repetition_penalty": 0}, "repetition_penalty"),
    ({"presence_penalty": 3}, "presence_penalty"),
    ({"frequency_penalty": -2.5}, "frequency_penalty"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"min_tokens": -1}, "min_tokens"),
    ({"min_tokens": 20, "max_tokens": 10}, "min_tokens"),
    ({"stop": ["ok", ""]}, "stop"),
    ({"logprobs": 21}, "logprobs"),
    ({"temperature": "hot"}, "temperature"),
    ({"max_tokens": 1.5}, "max_tokens"),
    ({"n": 0}, "n"),
    ({"prompt_logprobs": 1}, "prompt_logprobs"),
    ({"best_of": 3}, "best_of"),
    ({"detokenize": False}, "detokenize"),
    ({"structured_outputs": {}}, "structured_outputs"),
    ({"guided_decoding": {"json": {"type": "object"}}}, "guided_decoding"),
    ({"logits_processors": [print]}, "logits_processors"),
    ({"logit_bias": {5: 101}}, "logit_bias"),
    ({"allowed_token_ids": []}, "allowed_token_ids"),
    ({"bad_words": [""]}, "bad_words"),
    ({"truncate_prompt_tokens": 0}, "truncate_prompt_tokens"),
])
def test_bad_sampling_params_raise_value_error_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"'{field}'"):
        SamplingParams(**kwargs)


def test_structured_outputs_constrain_the_text(demo_engine):
    choices = ["yes", "no", "maybe not"]
    out = demo_engine.generate(["Well?"], SamplingParams(temperature=0, max_tokens=20,
                                                         structured_outputs={"choice": choices}),
                               use_tqdm=False)
    assert out[0]["text"] in choices and out[0]["finish_reason"] == "stop"
    out = demo_engine.generate(["Code:"], SamplingParams(seed=3, max_tokens=20,
                                                         structured_outputs={"regex": "[a-c]{4}"}),
                               use_tqdm=False)
    assert re.fullmatch("[a-c]{4}", out[0]["text"]) and out[0]["finish_reason"] == "stop"


def test_the_servers_sampling_fields_are_honoured(demo_engine):
    base = dict(temperature=0, max_tokens=5, ignore_eos=True)
    forced = demo_engine.generate(["Hello"], SamplingParams(**base, logit_bias={1234: 100}),
                                  use_tqdm=False)
    assert forced[0]["token_ids"] == [1234] * 5
    allowed = demo_engine.generate(["Hello"], SamplingParams(**base, allowed_token_ids=[11, 13]),
                                   use_tqdm=False)
    assert set(allowed[0]["token_ids"]) <= {11, 13}
    SamplingParams(include_stop_str_in_output=True, spaces_between_special_tokens=False,
                   best_of=1, bad_words=["hello"], truncate_prompt_tokens=-1)


def test_good_sampling_params_and_unknown_field():
    p = SamplingParams(temperature=0.5, top_k=-1, stop="x", seed=-3, max_tokens=None, logprobs=0)
    assert p.stop == ["x"] and p.stop_token_ids == []
    with pytest.raises(TypeError, match="nucleus"):
        SamplingParams(nucleus=0.9)


def test_engine_options_unknown_and_bad_values():
    assert {"max_num_seqs", "max_model_len", "max_num_batched_tokens", "gpu_memory_utilization",
            "enable_prefix_caching", "enforce_eager", "attention_backend", "device", "load_format",
            "seed", "use_multiprocess"} <= set(engine_options())
    with pytest.raises(TypeError, match="max_num_sequences"):
        LLMEngine(model=DEMO, max_num_sequences=3)
    with pytest.raises(ValueError, match="max_num_seqs"):
        LLMEngine(model=DEMO, max_num_seqs=0)
    with pytest.raises(ValueError, match="max_num_seqs"):
        LLMEngine(model=DEMO, max_num_seqs="many")
    with pytest.raises(ValueError, match="device"):
        LLMEngine(model=DEMO, device="tpu")
    with pytest.raises(ValueError, match="no-such-model"):
        LLMEngine(model="/no-such-model")


def test_bad_prompts_run_nothing_and_leave_the_engine_usable(demo_engine):
    good = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    with pytest.raises(ValueError, match="prompt 1: .*empty"):
        demo_engine.generate(["Hello", ""], good, use_tqdm=False)
    with pytest.raises(ValueError, match="prompt 1: .*stop_token_ids"):
        demo_engine.generate(["Hello", "Hi"], [good, SamplingParams(stop_token_ids=[10**7])],
                             use_tqdm=False)
    with pytest.raises(ValueError, match="prompt 0: .*"):
        demo_engine.generate([[1] * 300], good, use_tqdm=False)  # longer than max_model_len 256
    with pytest.raises(ValueError, match="2 sampling params for 1 prompts"):
        demo_engine.generate(["Hello"], [good, good], use_tqdm=False)
    with pytest.raises(TypeError):
        demo_engine.generate([3.5], good, use_tqdm=False)
    assert not demo_engine.has_unfinished_requests() or demo_engine.step() == []
    out = demo_engine.generate(["Hello"], good, use_tqdm=False)
    assert len(out[0]["token_ids"]) == 4
