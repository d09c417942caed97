"""The `miniinfer` command line, run as a user would: exit codes, one-line errors, JSON output."""
import json
import os
import re
import shutil
import subprocess

import pytest

BIN = os.environ["MINIINFER_BIN"]
FIXTURES = os.environ["MINIINFER_FIXTURES"]
DEMO = os.path.join(FIXTURES, "qwen3-demo")


def run(*args):
    p = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def assert_clean_error(code, err, *needles):
    """Non-zero exit (not a signal), one 'error:' line naming what is wrong, no sanitizer report."""
    assert code > 0, f"expected a non-zero exit, got {code}: {err}"
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    assert "Sanitizer" not in err and "runtime error" not in err


def test_inspect_demo():
    code, out, err = run("inspect", "--model", DEMO)
    assert code == 0, err
    assert "qwen3" in out and "151936" in out and "tied" in out


def test_inspect_shows_rope_scaling():
    code, out, err = run("inspect", "--model", os.path.join(FIXTURES, "qwen3-yarn"))
    assert code == 0, err
    assert "scaling yarn (factor 4, original_max_position_embeddings 32" in out


def test_inspect_json_counts():
    code, out, err = run("inspect", "--model", os.path.join(FIXTURES, "qwen2-tiny"), "--json")
    assert code == 0, err
    info = json.loads(out)
    assert info["model_type"] == "qwen2"
    assert info["num_files"] == 14 and info["num_tensors"] == 27
    assert info["num_bytes"] == 2 * info["num_params"]
    assert info["attention_bias"] is True and info["qk_norm"] is False


@pytest.fixture
def demo_copy(tmp_path):
    dst = tmp_path / "model"
    shutil.copytree(DEMO, dst)
    return dst


@pytest.mark.parametrize("keep", [0, 7, 100, 5000, None])
def test_inspect_truncated_checkpoint(demo_copy, keep):
    path = demo_copy / "model.safetensors"
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(size - 1 if keep is None else keep)
    code, _, err = run("inspect", "--model", str(demo_copy))
    assert_clean_error(code, err, str(path))
    code, _, err = run("logits", "--model", str(demo_copy), "--ids", "1,2")
    assert_clean_error(code, err, str(path))


def test_inspect_bad_directories(tmp_path, demo_copy):
    code, _, err = run("inspect", "--model", str(tmp_path / "absent"))
    assert_clean_error(code, err, "not a directory")
    code, _, err = run("inspect", "--model", str(tmp_path))
    assert_clean_error(code, err, "config.json")
    cfg = json.loads((demo_copy / "config.json").read_text())
    cfg["model_type"] = "gpt2"
    (demo_copy / "config.json").write_text(json.dumps(cfg))
    code, _, err = run("inspect", "--model", str(demo_copy))
    assert_clean_error(code, err, "model_type 'gpt2' is not supported")


def test_inspect_misshapen_tensor(demo_copy):
    cfg = json.loads((demo_copy / "config.json").read_text())
    cfg["intermediate_size"] = 64  # the checkpoint's MLP is 96 wide
    (demo_copy / "config.json").write_text(json.dumps(cfg))
    code, _, err = run("inspect", "--model", str(demo_copy))
    assert_clean_error(code, err, "model.safetensors", "mlp.gate_proj.weight", "expected [64, 32]")


HYBRIDS = {"qwen3.5-tiny": "qwen3_5_text", "qwen3.5-moe-tiny": "qwen3_5_moe",
           "qwen3-next-tiny": "qwen3_next"}


@pytest.mark.parametrize("name", HYBRIDS)
def test_inspect_hybrid(name):
    model = os.path.join(FIXTURES, name)
    code, out, err = run("inspect", "--model", model)
    assert code == 0, err
    assert "layers      linear x3, full x1" in out
    assert "MiB per request" in out and "bytes per token in bf16 (full-attention layers only" in out
    assert "does not run on --device cuda" not in out
    code, out, err = run("inspect", "--model", model, "--json")
    assert code == 0, err
    info = json.loads(out)
    hybrid = info["hybrid"]
    assert hybrid["num_linear_attention_layers"] == 3 * hybrid["num_full_attention_layers"]
    assert info["kv_bytes_per_token"] == (2 * hybrid["num_full_attention_layers"] *
                                          info["num_kv_heads"] * info["head_dim"] * 2)
    la = hybrid["linear_attention"]
    state = (la["num_value_heads"] * la["key_head_dim"] * la["value_head_dim"] * 4 +
             (la["conv_kernel_dim"] - 1) * (2 * la["num_key_heads"] * la["key_head_dim"] +
                                            la["num_value_heads"] * la["value_head_dim"]) * 4)
    assert hybrid["gdn_state_bytes_per_request"] == hybrid["num_linear_attention_layers"] * state
    assert hybrid["rotary_dim"] == info["head_dim"] // 4
    skipped = info["skipped_tensors"]
    assert skipped["mtp"] > 0 or name == "qwen3.5-tiny"
    assert (skipped["vision"] > 0) == (name == "qwen3.5-moe-tiny")
    assert any("vision input" in s
               for s in info.get("not_supported", [])) == (name == "qwen3.5-moe-tiny")


@pytest.mark.parametrize("name", HYBRIDS)
def test_hybrid_runs_on_the_cpu(name, tmp_path):
    model = os.path.join(FIXTURES, name)
    ref = json.load(open(os.path.join(model, "reference.json")))
    prompt = ref["prompts"][2]
    code, out, err = run("logits", "--model", model, "--ids", ",".join(map(str, prompt["ids"])))
    assert code == 0, err
    assert json.loads(out)["positions"][-1]["top"][0]["id"] == prompt["greedy"][0]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt_token_ids": prompt["ids"]}) + "\n")
    code, out, err = run("generate", "--model", model, "--input", str(prompts), "--max-tokens",
                         "8", "--temperature", "0", "--ignore-eos")
    assert code == 0, err
    assert json.loads(out.splitlines()[0])["token_ids"] == prompt["greedy"][:8]


def test_logits_matches_hugging_face_greedy():
    ref = json.load(open(os.path.join(DEMO, "reference.json")))
    for prompt in ref["prompts"]:
        ids = prompt["ids"]
        code, out, err = run("logits", "--model", DEMO, "--ids", ",".join(map(str, ids)), "--top", "3")
        assert code == 0, err
        result = json.loads(out)
        assert [p["token"] for p in result["positions"]] == ids
        last = result["positions"][-1]["top"]
        assert len(last) == 3 and last[0]["logit"] >= last[1]["logit"] >= last[2]["logit"]
        assert last[0]["id"] == prompt["greedy"][0]


def test_logits_bad_arguments():
    code, _, err = run("logits", "--model", DEMO, "--ids", "1,151936")
    assert_clean_error(code, err, "151936", "outside the vocabulary")
    code, _, err = run("logits", "--model", DEMO, "--ids", "-3")
    assert_clean_error(code, err, "-3")
    code, _, err = run("logits", "--model", DEMO, "--ids", "1", "--top", "0")
    assert_clean_error(code, err, "--top")
    code, _, err = run("logits", "--model", DEMO)
    assert code == 1 and err.startswith("error: --ids is required"), err


def test_logits_dummy_weights_need_no_checkpoint(tmp_path):
    shutil.copy(os.path.join(FIXTURES, "qwen3-moe-tiny", "config.json"), tmp_path)
    code, out, err = run("logits", "--model", str(tmp_path), "--ids", "1,2,3", "--load-format", "dummy")
    assert code == 0, err
    assert len(json.loads(out)["positions"]) == 3
    code, _, err = run("logits", "--model", str(tmp_path), "--ids", "1")
    assert_clean_error(code, err, "no model.safetensors")


def test_fp8_checkpoint_inspect_and_logits(tmp_path):
    """A block-scaled FP8 checkpoint: inspect names its quantization and dtypes and finds
    nothing unsupported; the CPU computes its logits, from the checkpoint or dummy weights."""
    model = os.path.join(FIXTURES, "qwen3-moe-fp8")
    code, out, err = run("inspect", "--model", model)
    assert code == 0, err
    assert "quantized   fp8 e4m3, dynamic activations, blocks 128x128 (not converted: lm_head)" in out
    code, out, err = run("inspect", "--model", model, "--json")
    assert code == 0, err
    info = json.loads(out)
    assert info["quantization"].startswith("fp8 e4m3")
    assert info["weight_dtypes"]["f8e4m3"] == 2 * (4 + 3 * 8) + (4 + 3)  # two MoE layers, one dense
    assert "not_supported" not in info, info["not_supported"]
    code, out, err = run("logits", "--model", model, "--ids", "1,2,3")
    assert code == 0, err
    assert len(json.loads(out)["positions"]) == 3
    shutil.copy(os.path.join(model, "config.json"), tmp_path)
    code, out, err = run("logits", "--model", str(tmp_path), "--ids", "1,2,3", "--load-format", "dummy")
    assert code == 0, err


def test_device_cuda_without_a_gpu_is_one_clear_error():
    """Before any weight is read or made: one error line, whichever the build."""
    if shutil.which("nvidia-smi") and subprocess.run(["nvidia-smi"], capture_output=True).returncode == 0:
        pytest.skip("a GPU is visible here: --device cuda would run")
    for fmt in ("dummy", "auto"):
        code, _, err = run("generate", "--model", DEMO, "--device", "cuda", "--load-format", fmt,
                           "--prompt", "hi")
        assert_clean_error(code, err)
        assert "no usable CUDA device or driver" in err or "has no CUDA backend" in err, err
        assert "--device cpu" in err or "has no CUDA backend" in err, err


def test_serve_a_missing_directory_says_so_first():
    code, _, err = run("serve", "/nonexistent/model")
    assert_clean_error(code, err, "/nonexistent/model", "not a directory")  # no template warning


def test_serve_on_a_taken_port_fails_before_the_model_loads():
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = run("serve", DEMO, "--host", "127.0.0.1", "--port", str(port))
    assert_clean_error(code, err, f"cannot listen on 127.0.0.1:{port}", "in use")
    code, _, err = run("serve", DEMO, "--host", "no-such-host.invalid", "--port", "8123")
    assert_clean_error(code, err, "cannot listen on no-such-host.invalid:8123")


def test_bench_on_the_cpu_shows_no_gpu_speed_of_light(tmp_path):
    out_json = tmp_path / "bench.json"
    code, out, err = run("bench", "--model", DEMO, "--workload", "bs1", "--json", str(out_json))
    assert code == 0, err
    row = [l for l in out.splitlines() if l.startswith("| bs1 ")][0]
    assert row.split("|")[-2].strip() == "—" and row.split("|")[-3].strip() == "—", row
    assert json.loads(out_json.read_text())[0]["percent_of_sol"] is None
    assert "SOL:" not in out
    code, out, err = run("bench", "--model", DEMO, "--workload", "bs1", "--hbm-bytes-per-s", "1e11")
    assert code == 0, err
    assert "%" in [l for l in out.splitlines() if l.startswith("| bs1 ")][0]
    # The figures it is computed against, first: only the one given (the matmuls bound nothing).
    assert out.splitlines()[0] == "SOL: cpu, 0.1 TB/s, matrix rate unknown (--hbm-bytes-per-s given)", out
    # An unwritable --json fails before the model loads, not after the runs.
    code, out, err = run("bench", "--model", DEMO, "--workload", "bs1", "--json",
                         str(tmp_path / "no" / "such" / "dir.json"))
    assert_clean_error(code, err, "cannot write")
    assert "engine ready" not in err and "| bs1 " not in out


def test_bench_reports_time_to_first_token(tmp_path):
    # A small balanced workload: three prompts submitted together, each waiting its turn.
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps({"prompt_token_ids": [[1] * 40, [2] * 30, [3] * 20],
                                   "max_tokens": [3, 4, 5]}))
    out_json = tmp_path / "bench.json"
    code, out, err = run("bench", "--model", DEMO, "--workload", "balanced", "--balanced-file",
                         str(prompts), "--max-num-batched-tokens", "48", "--json", str(out_json))
    assert code == 0, err
    row = [l for l in out.splitlines() if l.startswith("| balanced ")][0]
    assert "(TTFT mean" in row and "p99" in row, row
    r = json.loads(out_json.read_text())[0]
    assert 0 < r["ttft_p50_ms"] <= r["ttft_p99_ms"] <= 1000 * r["seconds"], r
    assert r["ttft_mean_ms"] > 0, r


def test_bench_says_when_a_single_run_found_its_prompts_cached():
    # The same workload twice in one process: the second run's prompt is in the prefix cache.
    code, out, err = run("bench", "--model", DEMO, "--workload", "bs1", "--workload", "bs1")
    assert code == 0, err
    notes = [l for l in out.splitlines() if "came from the prefix cache" in l]
    assert len(notes) == 1 and notes[0].startswith("| bs1: ") and "of its 128" in notes[0], out
    assert out.index(notes[0]) > [m.start() for m in re.finditer(r"\| bs1 \|", out)][1], out


def test_bench_runs_reports_first_run_and_steady_state(tmp_path):
    out_json = tmp_path / "bench.json"
    code, out, err = run("bench", "--model", DEMO, "--workload", "bs1", "--runs", "3", "--json",
                         str(out_json))
    assert code == 0, err
    rows = [l for l in out.splitlines() if l.startswith("| bs1")]
    assert [r.split("|")[1].strip() for r in rows[:3]] == ["bs1 (run 1)", "bs1 (run 2)",
                                                           "bs1 (run 3)"]
    assert "first run" in rows[3] and "steady state" in rows[3], rows[3]
    results = json.loads(out_json.read_text())
    assert [r["run"] for r in results] == [1, 2, 3]
    # The repeats find the prompt in the prefix cache (all but its last page's tokens).
    assert results[0]["cached_prompt_tokens"] == 0, results[0]
    assert 0 < results[1]["cached_prompt_tokens"] < results[1]["prompt_tokens"], results[1]
    assert "prefix cache: 0.0% in run 1" in rows[3], rows[3]
    code, out, err = run("bench", "--model", DEMO, "--workload", "bs1", "--runs", "2",
                         "--no-prefix-caching")
    assert code == 0, err
    summary = [l for l in out.splitlines() if l.startswith("| bs1:")][0]
    assert "0.0% in run 1, 0.0% in run 2 " in summary, summary
    code, _, err = run("bench", "--model", DEMO, "--runs", "0")
    assert code == 1 and err.startswith("error: --runs"), err


def test_bench_multiturn_reports_its_prefix_cache_hit_rate(tmp_path):
    # 8 conversations of 4 turns on qwen3-tiny (ids below its 512-token vocabulary), every length
    # scaled by 512 / 1280 to fit --max-model-len 512.
    args = ("bench", "--model", os.path.join(FIXTURES, "qwen3-tiny"), "--workload", "multiturn",
            "--conversations", "8", "--max-model-len", "512")
    code, out, err = run(*args, "--json", str(tmp_path / "cached.json"))
    assert code == 0, err
    assert "multiturn: 8 conversations x 4 turns: system prompt 102 tokens, user messages 12-51, " \
           "outputs 25-51" in out, out
    row = [l for l in out.splitlines() if l.startswith("| multiturn ")][0]
    assert "prefix cache hits" in row and "turns >= 2" in row, row
    assert "came from the prefix cache" not in out  # the row says it
    r = json.loads((tmp_path / "cached.json").read_text())[0]
    assert r["requests"] == 32 and r["percent_of_sol"] is None
    cache = r["prefix_cache"]
    later = cache["later_turns"]
    assert cache["all_turns"]["turns"] == 32 and later["turns"] == 24
    assert cache["all_turns"]["cached_prompt_tokens"] == r["cached_prompt_tokens"]
    assert cache["all_turns"]["prompt_tokens"] == r["prompt_tokens"]
    # Each later turn resends its whole history; the cache holds all of it but the last page.
    assert 0 < later["ideal_hit_rate"] < 1
    assert later["hit_rate"] >= 0.8 * later["ideal_hit_rate"], later
    assert 0 < later["tokens_short_per_turn"] <= r["page_size"], later

    code, out, err = run(*args, "--no-prefix-caching", "--json", str(tmp_path / "off.json"))
    assert code == 0, err
    off = json.loads((tmp_path / "off.json").read_text())[0]["prefix_cache"]
    for turns in ("all_turns", "later_turns"):
        assert off[turns]["cached_prompt_tokens"] == 0 and off[turns]["hit_rate"] == 0, off
        # ignore_eos: the same lengths, so the same prompts' sizes and the same ideal
        assert off[turns]["ideal_hit_rate"] == cache[turns]["ideal_hit_rate"], off
    assert "prefix cache hits 0.0% of prompt tokens" in out, out


def test_bench_multiturn_hybrids_hit_within_one_snapshot_interval(tmp_path):
    # The hybrids reuse a cached prefix up to its last state snapshot (every 64 tokens): a later
    # turn falls short of the ideal by at most one interval more than Qwen3 does (pages of 16).
    def later_turns(name):
        out = tmp_path / f"{name}.json"
        code, _, err = run("bench", "--model", os.path.join(FIXTURES, name), "--workload",
                           "multiturn", "--conversations", "8", "--max-model-len", "512",
                           "--json", str(out))
        assert code == 0, err
        return json.loads(out.read_text())[0]["prefix_cache"]["later_turns"]
    qwen3 = later_turns("qwen3-tiny")
    for name in HYBRIDS:
        hybrid = later_turns(name)
        assert hybrid["ideal_hit_rate"] == qwen3["ideal_hit_rate"], name
        assert 0 < hybrid["hit_rate"] <= qwen3["hit_rate"], name
        assert hybrid["tokens_short_per_turn"] <= qwen3["tokens_short_per_turn"] + 64, (name, hybrid)


def test_multiturn_runs_only_in_the_offline_bench():
    # Its turns resend the model's outputs: bench-serve (and the C API) cannot list them up front.
    code, _, err = run("bench-serve", "--workload", "multiturn")
    assert_clean_error(code, err, "workload 'multiturn'", "only `miniinfer bench` runs it")


def test_tensor_parallel_short_option():
    base = ("generate", "--model", DEMO, "--prompt", "Hello", "--max-tokens", "6", "--temperature", "0")
    code, one, err = run(*base)
    assert code == 0, err
    code, two, err = run(*base, "-tp", "2")
    assert code == 0, err
    assert json.loads(two.splitlines()[-1])["token_ids"] == json.loads(one.splitlines()[-1])["token_ids"]


@pytest.mark.parametrize("command", ["generate", "chat", "serve", "bench", "inspect", "logits",
                                     "tokenize", "detokenize", "chat-template"])
def test_help_shows_an_example(command):
    code, out, err = run(command, "--help")
    assert code == 0, err
    example = [l for l in out.splitlines() if l.startswith("Example: miniinfer ") or "| miniinfer " in l]
    assert example, out


# Usage errors (CLI11's parse errors) exit 1 with one line naming the problem, as every other
# error of the command line; --help and --version exit 0.
@pytest.mark.parametrize("args, needles", [
    (["foo"], ["unknown command 'foo'", "generate, chat", "miniinfer --help"]),
    ([], ["no command given", "serve"]),
    (["--bogus"], ["--bogus"]),
    (["generate", "--model", DEMO, "--prompt", "hi", "--max-tokens", "many"], ["--max-tokens", "many"]),
    (["generate", "--model", DEMO, "--max-tokens"], ["--max-tokens"]),
    (["chat", "--model", DEMO, "--temperature", "warm"], ["--temperature", "warm"]),
    (["chat", "--model", DEMO, "--no-such-flag"], ["--no-such-flag", "miniinfer chat --help"]),
    (["serve", DEMO, "--port", "eighty"], ["--port", "eighty"]),
    (["serve", DEMO, "extra"], ["extra", "miniinfer serve --help"]),
    (["serve"], ["model", "required"]),
    (["bench", "--model", DEMO, "--workload"], ["--workload"]),
    (["bench", "--model", DEMO, "--hbm-bytes-per-s", "-1"], ["--hbm-bytes-per-s", "positive", "-1"]),
    (["bench", "nonsense"], ["nonsense", "miniinfer bench --help"]),
    (["bench", "serve", "--port", "x"], ["--port", "miniinfer bench serve --help"]),
    (["bench-serve", "--num-prompts"], ["--num-prompts"]),
    (["inspect"], ["--model is required"]),
    (["logits", "--model", DEMO, "--ids", "a,b"], ["--ids"]),
    (["tokenize", "--model", DEMO, "--bad"], ["--bad"]),
    (["detokenize"], ["--model"]),
    (["chat-template", "--model"], ["--model"]),
])
def test_usage_errors_exit_1_with_one_line(args, needles):
    code, out, err = run(*args)
    assert code == 1, (code, err)
    assert_clean_error(code, err, *needles)
    assert out == ""


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["generate", "--help"],
                                  ["bench", "serve", "--help"]])
def test_help_and_version_exit_0(args):
    code, out, err = run(*args)
    assert code == 0 and out and not err, (code, err)


def test_help_states_each_commands_own_max_tokens():
    """chat answers with up to 1024 tokens by default, generate with vLLM's 16 (the values are
    the code's: tests/unit/test_cli_options.cpp)."""
    for command, default in (("chat", "1024"), ("generate", "16")):
        code, out, err = run(command, "--help")
        assert code == 0, err
        line = [l for l in out.splitlines() if l.strip().startswith("--max-tokens")][0]
        assert re.search(rf"--max-tokens \S*={default}\s", line) and "(default" not in line, line
