"""The multi-process pipeline (--use-multiprocess): the same results as one process, a dead
engine process is noticed and reported, SIGTERM/SIGINT leave no process and no socket file."""
import concurrent.futures
import json
import os
import re
import shutil
import signal
import time
import urllib.error
import urllib.request

import openai
import pytest

from conftest import DEMO


def client(s):
    return openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=120)


def child_pids(s):
    pids = {role: int(pid) for role, pid in re.findall(r"started the (\w+) process \(pid (\d+)\)", s.log())}
    assert set(pids) == {"tokenizer", "engine", "detokenizer"}, s.log()
    return pids


def ipc_dir(s):
    return re.search(r"sockets in (\S+)\)", s.log()).group(1)


def gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def post(s, path, body):
    req = urllib.request.Request(s.url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def health(s):
    try:
        return urllib.request.urlopen(s.url + "/health", timeout=10).status
    except urllib.error.HTTPError as e:
        return e.code


def strip(body):
    """A response without what differs between any two runs (id, created)."""
    j = json.loads(body)
    j.pop("id", None)
    j.pop("created", None)
    return j


def stream_summary(s, path, body):
    """A streamed response folded into text, finish reason and logprob tokens per choice, and usage."""
    req = urllib.request.Request(s.url + path, json.dumps({**body, "stream": True,
                                                           "stream_options": {"include_usage": True}}).encode(),
                                 {"Content-Type": "application/json"})
    choices, usage = {}, None
    with urllib.request.urlopen(req, timeout=120) as r:
        for line in r.read().decode().splitlines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            for ch in chunk["choices"]:
                c = choices.setdefault(ch["index"], {"text": "", "finish_reason": None, "logprobs": []})
                c["text"] += ch.get("text") or (ch.get("delta") or {}).get("content") or ""
                c["text"] += (ch.get("delta") or {}).get("reasoning_content") or ""
                c["finish_reason"] = ch["finish_reason"] or c["finish_reason"]
                if ch.get("logprobs"):
                    c["logprobs"].append(ch["logprobs"])
    return choices, usage


def test_multiprocess_results_equal_single_process(start_server):
    single = start_server()
    multi = start_server("--use-multiprocess")
    greedy = strip(post(single, "/v1/completions", {"prompt": "The capital of France is", "max_tokens": 32,
                                                    "temperature": 0})[1])["choices"][0]["text"]
    assert len(greedy) > 12
    ids_text = strip(post(single, "/v1/completions", {"prompt": [1, 2, 3, 4], "max_tokens": 10,
                                                      "temperature": 0})[1])["choices"][0]["text"]
    stop_id = json.loads(post(single, "/tokenize", {"prompt": ids_text})[1])["tokens"][2]
    requests = [
        ("/v1/completions", {"prompt": "The capital of France is", "max_tokens": 32, "temperature": 0, "logprobs": 3}),
        ("/v1/completions", {"prompt": "The capital of France is", "max_tokens": 32, "temperature": 0,
                             "stop": [greedy[6:9]]}),
        ("/v1/completions", {"prompt": "The capital of France is", "max_tokens": 32, "temperature": 0,
                             "stop": [greedy[:2]], "min_tokens": 5}),
        ("/v1/completions", {"prompt": ["Once upon a time", "Hello"], "max_tokens": 20, "temperature": 0.8,
                             "seed": 7, "n": 2, "top_p": 0.9}),
        ("/v1/completions", {"prompt": [1, 2, 3, 4], "max_tokens": 10, "temperature": 0,
                             "stop_token_ids": [stop_id]}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi there"}], "max_tokens": 24,
                                  "temperature": 0, "logprobs": True, "top_logprobs": 2}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi there"}], "temperature": 0.5,
                                  "seed": 3, "max_tokens": 30}),
        # Resolved by the tokenizer process, truncated by the engine process.
        ("/v1/completions", {"prompt": "The capital of France is", "max_tokens": 16, "temperature": 0,
                             "bad_words": [greedy.split()[0], "of the"]}),
        ("/v1/completions", {"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0,
                             "truncate_prompt_tokens": 3}),
        ("/v1/completions", {"prompt": [1, 2, 3, 4], "max_tokens": 8, "temperature": 0.7, "seed": 2,
                             "logit_bias": {"11": 5}, "allowed_token_ids": [11, 13, 15, 17]}),
        ("/v1/completions", {"prompt": "x", "max_tokens": 1000}),       # too long: 400
        ("/v1/completions", {"prompt": [1, 999999], "max_tokens": 3}),  # outside the vocabulary: 400
    ]
    stops = 0
    for path, body in requests:
        want = post(single, path, body)
        got = post(multi, path, body)
        stops += want[1].count('"finish_reason":"stop"')
        assert got[0] == want[0], (body, got)
        assert strip(got[1]) == strip(want[1]), body
        if want[0] == 200:
            assert stream_summary(multi, path, body) == stream_summary(single, path, body), body
    assert stops >= 2, "the stop string and stop token cases must really stop"


def test_engine_process_killed_mid_stream(start_server):
    s = start_server("--use-multiprocess")
    engine = child_pids(s)["engine"]
    c = client(s)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        # A non-streaming request in flight too; it gets a 500 with the reason.
        waiting = pool.submit(post, s, "/v1/completions", {"prompt": "Hello", "max_tokens": 240, "ignore_eos": True})
        stream = c.completions.create(model=DEMO, prompt="Tell me everything", max_tokens=240, n=8,
                                      stream=True, extra_body={"ignore_eos": True})
        chunks = iter(stream)
        next(chunks)  # the stream is running...
        deadline = time.time() + 60
        while time.time() < deadline and f"vllm:num_requests_running{{model_name=\"{DEMO}\"}} 9" not in \
                urllib.request.urlopen(s.url + "/metrics").read().decode():
            time.sleep(0.05)  # ...and so is the other request
        os.kill(engine, signal.SIGSTOP)  # frozen mid-generation: nothing can finish before the kill
        os.kill(engine, signal.SIGKILL)
        with pytest.raises(openai.APIError, match=r"engine process \(pid \d+\) was killed by signal 9"):
            for _ in chunks:
                pass
        status, body = waiting.result()
    assert status == 500 and "engine process" in body and '"error"' in body, (status, body)
    assert health(s) == 503
    status, body = post(s, "/v1/completions", {"prompt": "Hi", "max_tokens": 2})
    assert status == 503 and "engine process" in body, body
    assert f"the engine process (pid {engine}) was killed by signal 9 (SIGKILL)" in s.log()
    assert s.stop() == 0, s.log()
    assert not os.path.exists(ipc_dir(s))
    assert all(gone(pid) for pid in child_pids(s).values())


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_stops_every_process_and_removes_the_sockets(start_server, sig):
    s = start_server("--use-multiprocess")
    pids = child_pids(s)
    sockets = ipc_dir(s)
    assert sorted(os.listdir(sockets)) == ["detokenizer.ipc", "engine.ipc", "frontend.ipc", "tokenizer.ipc"]
    assert post(s, "/v1/completions", {"prompt": "Hi", "max_tokens": 4})[0] == 200
    s.proc.send_signal(sig)
    assert s.proc.wait(timeout=20) == 0, s.log()
    assert not os.path.exists(sockets)
    assert all(gone(pid) for pid in pids.values())
    for role, pid in pids.items():
        assert f"the {role} process (pid {pid}) exited with status 0" in s.log()


def test_children_exit_when_the_frontend_dies(start_server):
    s = start_server("--use-multiprocess")
    pids = child_pids(s)
    sockets = ipc_dir(s)
    s.proc.kill()  # no chance to clean up: the children must notice (PR_SET_PDEATHSIG)
    s.proc.wait(timeout=20)
    deadline = time.time() + 30
    while time.time() < deadline and not all(gone(pid) for pid in pids.values()):
        time.sleep(0.05)
    shutil.rmtree(sockets, ignore_errors=True)  # left behind by the SIGKILL, as expected
    assert all(gone(pid) for pid in pids.values())


def test_generate_through_the_pipeline_writes_the_same_lines(tmp_path):
    from conftest import BIN
    import subprocess
    lines = [{"prompt": "The capital of France is", "max_tokens": 12, "temperature": 0, "logprobs": 2},
             {"prompt": "Hello", "max_tokens": 12, "temperature": 0.7, "stop": ["o"]},  # no seed: drawn in order
             {"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0.9, "seed": 11, "min_tokens": 4},
             {"prompt_token_ids": [1, 999999]},                                            # an error line
             {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "temperature": 0}]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(l) + "\n" for l in lines))
    outs = []
    for extra in ([], ["--use-multiprocess"]):
        r = subprocess.run([BIN, "generate", "--model", DEMO, "--input", str(src), "--max-model-len", "256",
                            "--seed", "5", *extra], capture_output=True, text=True, timeout=300)
        assert r.returncode == 1 and "1 of 5 requests failed" in r.stderr, r.stderr  # the bad line
        outs.append([json.loads(l) for l in r.stdout.splitlines()])
    assert len(outs[0]) == 5 and "error" in outs[0][3]
    assert outs[1] == outs[0]
