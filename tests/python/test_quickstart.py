"""The issue's quick start, verbatim but for the model path (the demo model), in both modes,
run as a script of its own as a user would."""
import subprocess
import sys
import textwrap

from conftest import DEMO

QUICK_START = textwrap.dedent('''
    from miniinfer.engine.llm_engine import LLMEngine
    from miniinfer.utils import SamplingParams

    with LLMEngine(model="/path/to/Qwen3-0.6B", max_num_seqs=256, max_model_len=4096) as engine:
        outputs = engine.generate(prompts=["Hello, how are you?"],
                                  sampling_params=SamplingParams(max_tokens=128, temperature=0.7))
        print(outputs[0]["text"])

    with LLMEngine(model="/path/to/Qwen3-0.6B", use_multiprocess=True, max_num_seqs=256) as engine:
        outputs = engine.generate(prompts=["Hello"], sampling_params=SamplingParams(max_tokens=64))
''')


def test_quick_start_runs_verbatim(tmp_path):
    script = tmp_path / "quick_start.py"
    script.write_text(QUICK_START.replace("/path/to/Qwen3-0.6B", DEMO) +
                      'print("tokens:", len(outputs[0]["token_ids"]), outputs[0]["finish_reason"])\n')
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    last = p.stdout.strip().splitlines()[-1]
    assert last.startswith("tokens: ")
    num_tokens, finish_reason = last.split()[1:]
    assert 1 <= int(num_tokens) <= 64 and finish_reason in ("stop", "length")
