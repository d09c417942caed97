"""A vLLM offline script runs with only its import changed; the outputs have vLLM's shape."""
import subprocess
import sys
import textwrap

from conftest import DEMO, reference, small_engine_kwargs
from miniinfer import LLM, SamplingParams

VLLM_SCRIPT = textwrap.dedent('''
    from vllm import LLM, SamplingParams

    prompts = [
        "Hello, my name is",
        "The president of the United States is",
        "The capital of France is",
        "The future of AI is",
    ]
    sampling_params = SamplingParams(temperature=0.8, top_p=0.95)

    llm = LLM(model="facebook/opt-125m")
    outputs = llm.generate(prompts, sampling_params)

    for output in outputs:
        prompt = output.prompt
        generated_text = output.outputs[0].text
        print(f"Prompt: {prompt!r}, Generated text: {generated_text!r}")
''')


def test_vllm_example_runs_with_the_import_changed(tmp_path):
    script = tmp_path / "vllm_example.py"
    script.write_text(VLLM_SCRIPT.replace("from vllm import", "from miniinfer import")
                      .replace("facebook/opt-125m", DEMO))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 4 and lines[2].startswith("Prompt: 'The capital of France is', Generated text: ")


def test_request_output_shape():
    ref = reference("qwen3-demo")
    with LLM(model=DEMO, dtype="auto", tensor_parallel_size=1, trust_remote_code=True,
             **small_engine_kwargs()) as llm:
        params = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True, logprobs=1)
        out = llm.generate(["The capital of France is"], params, use_tqdm=False)[0]
        c = out.outputs[0]
        assert c.token_ids == ref["prompts"][1]["greedy"]
        assert out.prompt_token_ids == ref["prompts"][1]["ids"]
        assert out.prompt == "The capital of France is" and out.finished
        assert isinstance(out.request_id, str) and c.finish_reason == "length"
        assert c.text == llm.get_tokenizer().decode(c.token_ids, skip_special_tokens=True)
        assert len(c.logprobs) == 32 and all(t in lp for t, lp in zip(c.token_ids, c.logprobs))
        assert abs(c.cumulative_logprob - sum(lp[t].logprob for t, lp in zip(c.token_ids, c.logprobs))) < 1e-6
        stop_token = ref["prompts"][1]["greedy"][4]
        stopped = llm.generate({"prompt_token_ids": ref["prompts"][1]["ids"]},
                               SamplingParams(temperature=0, max_tokens=32, stop_token_ids=[stop_token]),
                               use_tqdm=False)[0].outputs[0]
        assert stopped.finish_reason == "stop" and stopped.stop_reason == stop_token
        chats = llm.chat([{"role": "user", "content": "Hi"}], SamplingParams(max_tokens=3),
                         use_tqdm=False, chat_template_kwargs={"enable_thinking": False})
        assert len(chats) == 1 and len(chats[0].outputs[0].token_ids) <= 3
        assert llm.get_default_sampling_params().top_k == 20


def test_vllm_only_arguments():
    import pytest
    with pytest.raises(ValueError, match="pipeline_parallel_size"):
        LLM(model=DEMO, pipeline_parallel_size=2)
    with pytest.raises(TypeError, match="no_such_arg"):
        LLM(model=DEMO, no_such_arg=1)


def test_n_completions_per_prompt():
    """SamplingParams.n: n completions in one RequestOutput, seeded seed, seed + 1, ... as the
    OpenAI server seeds its choices; greedy copies agree; LLMEngine takes n = 1 only."""
    import pytest
    with LLM(model=DEMO, **small_engine_kwargs()) as llm:
        prompts = ["The capital of France is", "Hello"]
        outs = llm.generate(prompts, SamplingParams(temperature=0.9, max_tokens=8, seed=5, n=3,
                                                    ignore_eos=True), use_tqdm=False)
        assert [len(o.outputs) for o in outs] == [3, 3]
        assert [c.index for c in outs[0].outputs] == [0, 1, 2]
        assert outs[1].prompt == "Hello"
        for i in range(3):  # completion i is the n = 1 request with seed 5 + i
            alone = llm.generate(prompts[0], SamplingParams(temperature=0.9, max_tokens=8,
                                                            seed=5 + i, ignore_eos=True),
                                 use_tqdm=False)[0].outputs[0]
            assert outs[0].outputs[i].token_ids == alone.token_ids
        assert len({tuple(c.token_ids) for c in outs[0].outputs}) > 1
        greedy = llm.generate(prompts[0], SamplingParams(temperature=0, max_tokens=8, n=2),
                              use_tqdm=False)[0]
        assert greedy.outputs[0].token_ids == greedy.outputs[1].token_ids
        with pytest.raises(ValueError, match="'n'"):
            llm.llm_engine.generate(prompts, SamplingParams(n=2), use_tqdm=False)
    with pytest.raises(ValueError, match="'n' must be an integer in \\[1, 128\\]"):
        SamplingParams(n=0)
