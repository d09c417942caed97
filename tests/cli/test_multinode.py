"""Tensor parallelism across processes (--nnodes, --node-rank, --master-addr, --master-port):
two "nodes" on this host over loopback TCP, CPU backend. Node 0 schedules and samples; node 1
only runs its ranks. The tokens are Hugging Face's (greedy) and, seeded, those of the same
tensor-parallel world in one process (the collectives add in the same order)."""
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

BIN = os.environ["MINIINFER_BIN"]
FIXTURES = os.environ["MINIINFER_FIXTURES"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def reference(fixture):
    return json.load(open(os.path.join(FIXTURES, fixture, "reference.json")))


def requests_file(tmp_path, fixture, **params):
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"prompt_token_ids": p["ids"], "max_tokens": 32,
                                        "ignore_eos": True, **params}) + "\n"
                            for p in reference(fixture)["prompts"]))
    return path


def generate(fixture, inputs, *flags):
    """`miniinfer generate` on node 0 and node 1 at once; node 0's results and both logs."""
    model = os.path.join(FIXTURES, fixture)
    common = ["generate", "--model", model, "--master-port", str(free_port()), *flags]
    node1 = subprocess.Popen([BIN, *common, "--node-rank", "1"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    node0 = subprocess.run([BIN, *common, "--node-rank", "0", "--input", str(inputs)],
                           capture_output=True, text=True, timeout=300)
    out1, err1 = node1.communicate(timeout=60)
    results = [json.loads(l) for l in node0.stdout.splitlines() if l.strip()]
    return node0.returncode, results, node0.stderr, node1.returncode, out1 + err1


@pytest.mark.parametrize("fixture,flags", [
    ("qwen3-tiny", ["-tp", "2", "--nnodes", "2"]),
    ("qwen2-tiny", ["-tp", "2", "--nnodes", "2"]),
    ("qwen3-tiny", ["-tp", "4", "--nnodes", "2"]),  # two ranks per node: threads and TCP
    ("qwen3-moe-tiny", ["-tp", "2", "--nnodes", "2"]),
    ("qwen3-moe-wide", ["-tp", "2", "--nnodes", "2", "--enable-expert-parallel"]),
])
def test_two_nodes_give_hugging_face_greedy_tokens(tmp_path, fixture, flags):
    inputs = requests_file(tmp_path, fixture, temperature=0)
    code0, results, err0, code1, log1 = generate(fixture, inputs, *flags)
    assert code0 == 0, err0
    assert code1 == 0, log1
    assert "rank 0 ended the group" in log1
    assert [r["token_ids"] for r in results] == [p["greedy"] for p in reference(fixture)["prompts"]]


def test_two_nodes_sample_as_one_process_does(tmp_path):
    inputs = requests_file(tmp_path, "qwen3-tiny", temperature=0.9, seed=7, logprobs=2)
    code0, results, err0, code1, log1 = generate("qwen3-tiny", inputs, "-tp", "2", "--nnodes", "2")
    assert code0 == 0 and code1 == 0, err0 + log1
    one = subprocess.run([BIN, "generate", "--model", os.path.join(FIXTURES, "qwen3-tiny"), "-tp",
                          "2", "--input", str(inputs)], capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr
    want = [json.loads(l) for l in one.stdout.splitlines() if l.strip()]
    assert [r["token_ids"] for r in results] == [r["token_ids"] for r in want]
    assert [r["logprobs"] for r in results] == [r["logprobs"] for r in want]


def test_a_node_with_another_world_or_model_is_refused(tmp_path):
    inputs = requests_file(tmp_path, "qwen3-tiny", temperature=0)
    port = str(free_port())
    base = ["generate", "--master-port", port, "--nnodes", "2"]
    node1 = subprocess.Popen([BIN, *base, "--model", os.path.join(FIXTURES, "qwen3-tiny"), "-tp",
                              "4", "--node-rank", "1"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    node0 = subprocess.run([BIN, *base, "--model", os.path.join(FIXTURES, "qwen3-tiny"), "-tp",
                            "2", "--node-rank", "0", "--input", str(inputs)],
                           capture_output=True, text=True, timeout=300)
    log1 = node1.communicate(timeout=60)[0]
    assert node0.returncode != 0 and "says the world is 4, rank 0 says 2" in node0.stderr
    assert node1.returncode != 0 and "refused by rank 0" in log1

    port = str(free_port())
    base = ["generate", "--master-port", port, "--nnodes", "2", "-tp", "2"]
    node1 = subprocess.Popen([BIN, *base, "--model", os.path.join(FIXTURES, "qwen2-tiny"),
                              "--node-rank", "1"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    node0 = subprocess.run([BIN, *base, "--model", os.path.join(FIXTURES, "qwen3-tiny"),
                            "--node-rank", "0", "--input", str(inputs)],
                           capture_output=True, text=True, timeout=300)
    log1 = node1.communicate(timeout=60)[0]
    assert node0.returncode != 0 and "tensor-parallel rank 1:" in node0.stderr, node0.stderr
    assert "is not rank 0's model" in node0.stderr, node0.stderr
    assert node1.returncode != 0, log1


def serve_two_nodes():
    """`miniinfer serve` of qwen3-tiny, -tp 2 over two nodes: (HTTP port, node 0, node 1)."""
    http = free_port()
    common = ["serve", os.path.join(FIXTURES, "qwen3-tiny"), "-tp", "2", "--nnodes", "2",
              "--master-port", str(free_port())]
    node1 = subprocess.Popen([BIN, *common, "--node-rank", "1"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    node0 = subprocess.Popen([BIN, *common, "--node-rank", "0", "--port", str(http)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return http, node0, node1


def test_serve_over_two_nodes():
    http, node0, node1 = serve_two_nodes()
    try:
        wait_healthy(http, node0)
        ref = reference("qwen3-tiny")["prompts"][0]
        models = json.load(urllib.request.urlopen(f"http://127.0.0.1:{http}/v1/models", timeout=5))
        body = json.dumps({"model": models["data"][0]["id"], "prompt": ref["ids"], "max_tokens": 32,
                           "temperature": 0, "ignore_eos": True}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{http}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        answer = json.load(urllib.request.urlopen(req, timeout=60))
        assert answer["choices"][0]["finish_reason"] == "length"
        assert answer["usage"]["completion_tokens"] == 32
        # Node 1 dies: the next step fails, its request ends with the reason, later ones get 503
        # and /health says so; node 0 stays up to answer.
        node1.kill()
        log1 = node1.communicate(timeout=30)[0]
        with pytest.raises(urllib.error.HTTPError) as failed:
            urllib.request.urlopen(req, timeout=60)
        assert failed.value.code == 500
        assert "the engine" in json.load(failed.value)["error"]["message"]
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=60)
        assert refused.value.code == 503
        assert "the engine is unavailable: tensor-parallel link" in refused.value.read().decode()
        with pytest.raises(urllib.error.HTTPError) as health:
            urllib.request.urlopen(f"http://127.0.0.1:{http}/health", timeout=10)
        assert health.value.code == 503
    finally:
        node1.kill()
        node0.send_signal(signal.SIGTERM)
        log0 = node0.communicate(timeout=30)[0]
    assert node0.returncode == 0, log0
    assert "engine step failed: tensor-parallel link" in log0, log0


def wait_healthy(port, proc):
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            return
        except OSError:
            assert time.monotonic() < deadline and proc.poll() is None, "serve did not start"
            time.sleep(0.2)


def test_worker_node_ends_with_node_zero():
    http, node0, node1 = serve_two_nodes()
    try:
        wait_healthy(http, node0)
    finally:
        node0.send_signal(signal.SIGTERM)
        log0 = node0.communicate(timeout=30)[0]
        log1 = node1.communicate(timeout=30)[0]
    assert node0.returncode == 0, log0
    assert node1.returncode == 0 and "rank 0 ended the group" in log1, log1
