"""Greedy outputs equal Hugging Face's (tests/fixtures/*/reference.json), one prompt at a time
and all together, in one process and through the multi-process pipeline."""
import pytest

from conftest import DEMO, HF_FIXTURES, FIXTURES, reference, small_engine_kwargs
from miniinfer.engine.llm_engine import LLMEngine
from miniinfer.utils import SamplingParams


def greedy(ref):
    return SamplingParams(temperature=0, max_tokens=ref["greedy_tokens"], ignore_eos=True)


@pytest.mark.parametrize("name", HF_FIXTURES)
def test_greedy_matches_hugging_face_alone_and_batched(name):
    ref = reference(name)
    prompts = [p["ids"] for p in ref["prompts"]]
    expected = [p["greedy"] for p in ref["prompts"]]
    with LLMEngine(model=str(FIXTURES / name), **small_engine_kwargs()) as engine:
        batched = engine.generate(prompts, greedy(ref), use_tqdm=False)
        assert [o["token_ids"] for o in batched] == expected
        assert all(o["finish_reason"] == "length" for o in batched)
        assert [o["prompt_token_ids"] for o in batched] == prompts
        for prompt, want in zip(prompts, expected):
            assert engine.generate([prompt], greedy(ref), use_tqdm=False)[0]["token_ids"] == want


@pytest.mark.parametrize("name", ["qwen3-tiny", "qwen3-demo", "qwen3.5-moe-tiny"])
def test_greedy_matches_hugging_face_multiprocess(name):
    ref = reference(name)
    prompts = [p["ids"] for p in ref["prompts"]]
    with LLMEngine(model=str(FIXTURES / name), use_multiprocess=True,
                   **small_engine_kwargs()) as engine:
        outs = engine.generate(prompts, greedy(ref), use_tqdm=False)
        assert [o["token_ids"] for o in outs] == [p["greedy"] for p in ref["prompts"]]
        assert engine.generate(prompts[1:2], greedy(ref), use_tqdm=False)[0]["token_ids"] == \
            ref["prompts"][1]["greedy"]


def test_text_prompt_dict_fields_and_per_prompt_params(demo_engine):
    ref = reference("qwen3-demo")
    outs = demo_engine.generate(["The capital of France is", {"prompt_token_ids": ref["prompts"][0]["ids"]}],
                                [greedy(ref), SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)],
                                use_tqdm=False)
    first, second = outs
    assert first["prompt_token_ids"] == ref["prompts"][1]["ids"]
    assert first["token_ids"] == ref["prompts"][1]["greedy"]
    assert first["text"] == demo_engine.tokenizer.decode(first["token_ids"], skip_special_tokens=True)
    assert first["prompt"] == "The capital of France is"
    assert set(first) >= {"text", "token_ids", "finish_reason", "stop_reason", "num_prompt_tokens",
                          "num_cached_tokens", "logprobs"}
    assert first["num_prompt_tokens"] == 5 and first["logprobs"] is None
    assert second["token_ids"] == ref["prompts"][0]["greedy"][:5] and second["prompt"] is None


def test_chat_prompts_stop_strings_and_logprobs(demo_engine):
    chat = [{"role": "user", "content": "Hi"}]
    out = demo_engine.generate([chat], SamplingParams(max_tokens=4, logprobs=2, seed=3),
                               use_tqdm=False, chat_template_kwargs={"enable_thinking": False})[0]
    rendered = demo_engine.tokenizer.apply_chat_template(chat, add_generation_prompt=True,
                                                         tokenize=False, enable_thinking=False)
    assert out["prompt"] == rendered and out["num_prompt_tokens"] > 5
    assert len(out["logprobs"]) == len(out["token_ids"])
    assert all(len(t["top"]) == 2 and t["logprob"] <= 0 for t in out["logprobs"])
    # A stop string from the middle of a greedy text ends the output there (not included).
    ref = reference("qwen3-demo")
    full = demo_engine.generate(["The capital of France is"], greedy(ref), use_tqdm=False)[0]["text"]
    stop = full[6:10]
    cut = demo_engine.generate(["The capital of France is"],
                               SamplingParams(temperature=0, max_tokens=32, ignore_eos=True, stop=stop),
                               use_tqdm=False)[0]
    assert cut["finish_reason"] == "stop" and cut["stop_reason"] == stop
    assert cut["text"] == full[:full.find(stop)]


def test_default_params_come_from_generation_config(demo_engine):
    p = demo_engine.get_default_sampling_params()
    assert (p.temperature, p.top_k, p.top_p) == (0.6, 20, 0.95)
    out = demo_engine.generate("Hello", use_tqdm=False)[0]  # sampling_params=None: the defaults
    assert len(out["token_ids"]) <= 16


def test_max_tokens_none_fills_the_context(demo_engine):
    out = demo_engine.generate(["The capital of France is"],
                               SamplingParams(temperature=0, max_tokens=None, ignore_eos=True),
                               use_tqdm=False)[0]
    assert out["num_prompt_tokens"] + len(out["token_ids"]) == demo_engine.max_model_len == 256
    assert out["finish_reason"] == "length" and out["prompt"] == "The capital of France is"
