"""`miniinfer generate` and `miniinfer chat` on the bundled demo model (random weights)."""
import json
import os
import subprocess

BIN = os.environ["MINIINFER_BIN"]
FIXTURES = os.environ["MINIINFER_FIXTURES"]
DEMO = os.path.join(FIXTURES, "qwen3-demo")
REF = json.load(open(os.path.join(DEMO, "reference.json")))


def run(*args, stdin=None):
    p = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=300, input=stdin)
    return p.returncode, p.stdout, p.stderr


def lines(out):
    return [json.loads(l) for l in out.splitlines() if l.strip()]


def test_greedy_text_prompts_match_hugging_face():
    code, out, err = run("generate", "--model", DEMO, "--prompt", "Hello", "--prompt", "The capital of France is",
                         "--temperature", "0", "--max-tokens", "32", "--ignore-eos")
    assert code == 0, err
    results = lines(out)
    assert [r["token_ids"] for r in results] == [REF["prompts"][0]["greedy"], REF["prompts"][1]["greedy"]]
    assert [r["num_prompt_tokens"] for r in results] == [1, 5]
    assert all(r["finish_reason"] == "length" for r in results)


def test_jsonl_input_output_file_and_per_line_errors(tmp_path):
    inp = tmp_path / "in.jsonl"
    inp.write_text("\n".join([
        json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}),
        json.dumps({"prompt_token_ids": REF["prompts"][2]["ids"], "temperature": 0, "max_tokens": 6, "ignore_eos": True}),
        "this is not json",
        json.dumps({"prompt": "x", "temperature": -1}),
        json.dumps({"prompt": ""}),
    ]) + "\n")
    outp = tmp_path / "out.jsonl"
    code, out, err = run("generate", "--model", DEMO, "--input", str(inp), "--output", str(outp))
    assert code == 1 and "3 of 5 requests failed" in err, err
    assert out == ""
    r = lines(outp.read_text())
    assert len(r) == 5
    assert len(r[0]["token_ids"]) <= 4 and r[0]["num_prompt_tokens"] > 5  # the chat template was applied
    assert r[1]["token_ids"] == REF["prompts"][2]["greedy"][:6]
    assert "not valid JSON" in r[2]["error"]
    assert "temperature" in r[3]["error"]
    assert "empty" in r[4]["error"]


def test_chat_template_flag_and_logprobs():
    code, out, err = run("generate", "--model", DEMO, "--prompt", "Hi", "--chat", "--no-thinking",
                         "--max-tokens", "3", "--logprobs", "2", "--sampling-seed", "5")
    assert code == 0, err
    r = lines(out)[0]
    assert r["num_prompt_tokens"] > 10
    assert len(r["logprobs"]) == len(r["token_ids"]) == 3
    assert all(len(t["top"]) == 2 and t["logprob"] <= 0 for t in r["logprobs"])


def test_seeded_sampling_repeats():
    args = ["generate", "--model", DEMO, "--prompt", "Hello", "--max-tokens", "12", "--temperature", "1.0",
            "--sampling-seed", "42", "--ignore-eos"]
    a, b = run(*args), run(*args)
    assert a[0] == 0 and lines(a[1]) == lines(b[1])


def test_bad_engine_options():
    code, _, err = run("generate", "--model", DEMO, "--prompt", "x", "--device", "tpu")
    assert code == 1 and "device 'tpu'" in err


def test_input_from_standard_input():
    stdin = json.dumps({"prompt_token_ids": REF["prompts"][2]["ids"], "temperature": 0, "max_tokens": 6,
                        "ignore_eos": True}) + "\n\nnot json\n"
    code, out, err = run("generate", "--model", DEMO, "--input", "-", stdin=stdin)
    assert code == 1 and "1 of 2 requests failed" in err, err
    r = lines(out)
    assert r[0]["token_ids"] == REF["prompts"][2]["greedy"][:6]
    assert "standard input line 3" in r[1]["error"]


def test_nothing_to_read_or_nowhere_to_write_fails_before_the_model_loads(tmp_path):
    # "engine ready" is logged once the model is loaded: these must fail before that.
    code, _, err = run("generate", "--model", DEMO)
    assert code == 1 and "nothing to generate" in err and "engine ready" not in err
    code, _, err = run("generate", "--model", DEMO, "--input", str(tmp_path / "missing.jsonl"))
    assert code == 1 and "cannot open" in err and "engine ready" not in err
    code, _, err = run("generate", "--model", DEMO, "--prompt", "x",
                       "--output", str(tmp_path / "no" / "such" / "dir.jsonl"))
    assert code == 1 and "cannot write" in err and "engine ready" not in err


def test_generation_config_flag(tmp_path):
    # A folder's generation_config.json gives the defaults: temperature 0 makes an unflagged
    # request greedy, so it must reproduce Hugging Face's greedy tokens.
    (tmp_path / "generation_config.json").write_text('{"temperature": 0.0}')
    code, out, err = run("generate", "--model", DEMO, "--prompt", "Hello", "--max-tokens", "32", "--ignore-eos",
                         "--generation-config", str(tmp_path))
    assert code == 0, err
    assert lines(out)[0]["token_ids"] == REF["prompts"][0]["greedy"]
    code, _, err = run("generate", "--model", DEMO, "--prompt", "x", "--generation-config", str(tmp_path / "nope"))
    assert code == 1 and "generation_config" in err and "nope" in err


def test_chat_streams_and_keeps_history():
    code, out, err = run("chat", "--model", DEMO, "--max-tokens", "4", "--temperature", "0",
                         stdin="Hello there\n/reset\nAgain\n/exit\n")
    assert code == 0, err
    assert out.count("> ") == 4  # three prompts answered or reset, then /exit


def test_fp8_kv_cache_keeps_the_demo_greedy_tokens():
    code, out, err = run("generate", "--model", DEMO, "--prompt", "The capital of France is",
                         "--temperature", "0", "--max-tokens", "32", "--ignore-eos",
                         "--kv-cache-dtype", "fp8")
    assert code == 0, err
    assert lines(out)[0]["token_ids"] == REF["prompts"][1]["greedy"]
    code, _, err = run("generate", "--model", DEMO, "--prompt", "x", "--kv-cache-dtype", "int4")
    assert code != 0 and "kv_cache_dtype 'int4' is not supported (auto, fp8, fp8_e4m3)" in err


def test_structured_outputs_input_lines():
    stdin = "\n".join(json.dumps(l) for l in [
        {"prompt": "Pick", "temperature": 0, "max_tokens": 20, "structured_outputs": {"choice": ["up", "down"]}},
        {"prompt": "Pick", "max_tokens": 20, "structured_outputs": {"json": {"type": "array", "uniqueItems": True}}},
    ]) + "\n"
    code, out, err = run("generate", "--model", DEMO, "--input", "-", stdin=stdin)
    assert code == 1, err
    r = lines(out)
    assert r[0]["text"] in ("up", "down") and r[0]["finish_reason"] == "stop"
    assert "uniqueItems" in r[1]["error"]
