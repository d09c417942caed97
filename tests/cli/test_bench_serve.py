"""`miniinfer bench-serve` against a tiny fake OpenAI server (streamed /v1/completions)."""
import http.server
import json
import os
import subprocess
import threading
import time

import pytest

BIN = os.environ["MINIINFER_BIN"]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NUM_CHUNKS = 4
FIRST_DELAY = 0.05  # seconds before the first chunk: TTFT must exceed it
GAP = 0.02          # seconds between chunks: ITL must exceed it


class FakeServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512

    def __init__(self, fail_every=0, fail_mode="http", api_key=None):
        super().__init__(("127.0.0.1", 0), Handler)
        self.fail_every, self.fail_mode, self.api_key = fail_every, fail_mode, api_key
        self.lock = threading.Lock()
        self.bodies, self.in_flight, self.peak = [], 0, 0


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def reply_error(self, status, message):
        body = json.dumps({"error": {"message": message}}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        s = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with s.lock:
            s.bodies.append((self.path, dict(self.headers), body))
            index = len(s.bodies)
            s.in_flight += 1
            s.peak = max(s.peak, s.in_flight)
        counted = [True]  # still counted as in flight

        def leave():
            with s.lock:
                if counted[0]:
                    s.in_flight -= 1
                    counted[0] = False
        try:
            if s.api_key and self.headers.get("Authorization") != "Bearer " + s.api_key:
                return self.reply_error(401, "bad api key")
            failing = s.fail_every and index % s.fail_every == 0
            if failing and s.fail_mode == "http":
                return self.reply_error(500, "injected failure")
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            time.sleep(FIRST_DELAY)
            for i in range(NUM_CHUNKS):
                if i:
                    time.sleep(GAP)
                chunk = {"id": "cmpl-1", "object": "text_completion", "model": body.get("model"),
                         "choices": [{"index": 0, "text": "tok%d " % i, "finish_reason": None}]}
                self.send_chunk(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                if failing:  # fail_mode "event": an error event mid-stream, as vLLM sends
                    self.send_chunk(b'data: {"error": {"message": "injected failure"}}\n\n')
                    return self.send_chunk(b"")
            usage = {"id": "cmpl-1", "object": "text_completion", "choices": [],
                     "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": NUM_CHUNKS,
                               "total_tokens": len(body["prompt"]) + NUM_CHUNKS}}
            # Out of flight before the client can see [DONE] and start its next request.
            leave()
            self.send_chunk(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
            self.send_chunk(b"")
        finally:
            leave()


@pytest.fixture
def server_factory():
    servers = []

    def make(**kwargs):
        s = FakeServer(**kwargs)
        threading.Thread(target=s.serve_forever, daemon=True).start()
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.shutdown()
        s.server_close()


def bench(server, tmp_path, *args, command=("bench-serve",)):
    out = tmp_path / "result.json"
    p = subprocess.run([BIN, *command, "--port", str(server.server_address[1]), "--json", str(out), *args],
                       capture_output=True, text=True, timeout=120)
    result = json.loads(out.read_text()) if out.exists() else None
    return p, result


def test_random_workload_counts_latencies_and_request_fields(server_factory, tmp_path):
    s = server_factory(api_key="sekrit")
    p, r = bench(s, tmp_path, "--workload", "random", "--num-prompts", "10", "--input-len", "5",
                 "--output-len", "7", "--max-concurrency", "3", "--model", "demo", "--api-key", "sekrit")
    assert p.returncode == 0, p.stderr
    assert "Serving Benchmark Result" in p.stdout and "Successful requests:" in p.stdout
    assert "Mean TTFT (ms):" in p.stdout and "P99 ITL (ms):" in p.stdout
    assert (r["completed"], r["failed"], r["num_prompts"]) == (10, 0, 10)
    assert r["total_input_tokens"] == 50
    assert r["total_output_tokens"] == 10 * NUM_CHUNKS  # from usage, not max_tokens
    assert s.peak == 3  # ten requests at once, at most three in flight
    # Latencies: TTFT includes the first delay; ITL and TPOT include the gaps; none absurdly high.
    assert FIRST_DELAY * 1000 <= r["median_ttft_ms"] < 2000
    assert FIRST_DELAY * 1000 <= r["p99_ttft_ms"] < 2000
    assert GAP * 1000 <= r["mean_itl_ms"] < 1000 and GAP * 1000 <= r["median_itl_ms"]
    assert GAP * 1000 <= r["mean_tpot_ms"] < 1000
    # Four rounds of three: at least four requests' worth of time.
    assert r["duration"] >= 4 * (FIRST_DELAY + (NUM_CHUNKS - 1) * GAP)
    assert r["output_throughput"] == pytest.approx(r["total_output_tokens"] / r["duration"])
    for path, headers, body in s.bodies:
        assert path == "/v1/completions"
        assert headers["Authorization"] == "Bearer sekrit"
        assert len(body["prompt"]) == 5 and all(isinstance(t, int) for t in body["prompt"])
        assert body["max_tokens"] == 7 and body["ignore_eos"] is True and body["temperature"] == 0
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
        assert body["model"] == "demo"


def test_bench_serve_is_also_spelled_like_vllm(server_factory, tmp_path):
    # `miniinfer bench serve` (as `vllm bench serve`) is the same command; bench's --model is
    # not required there.
    s = server_factory()
    p, r = bench(s, tmp_path, "--workload", "random", "--num-prompts", "4", "--input-len", "3",
                 "--output-len", "2", command=("bench", "serve"))
    assert p.returncode == 0, p.stderr
    assert (r["completed"], r["failed"]) == (4, 0)
    p = subprocess.run([BIN, "bench", "--workload", "bs1"], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "--model is required" in p.stderr


@pytest.mark.parametrize("mode", ["http", "event"])
def test_failures_are_counted_and_reported(server_factory, tmp_path, mode):
    s = server_factory(fail_every=3, fail_mode=mode)
    p, r = bench(s, tmp_path, "--workload", "random", "--num-prompts", "9", "--input-len", "2", "--output-len", "2")
    assert p.returncode == 0, p.stderr
    assert (r["completed"], r["failed"]) == (6, 3)
    assert "3 requests failed" in p.stderr and "injected failure" in p.stderr
    assert ("HTTP 500" if mode == "http" else "error event") in p.stderr
    assert r["total_output_tokens"] == 6 * NUM_CHUNKS


def test_all_failed_is_an_error(server_factory, tmp_path):
    s = server_factory(api_key="right")
    p, r = bench(s, tmp_path, "--workload", "random", "--num-prompts", "2", "--api-key", "wrong")
    assert p.returncode == 1 and "all 2 requests failed" in p.stderr and "HTTP 401" in p.stderr
    assert r["completed"] == 0 and r["failed"] == 2


def test_balanced_workload_sends_the_bench_prompts(server_factory, tmp_path):
    s = server_factory()
    p, r = bench(s, tmp_path, "--workload", "balanced", "--balanced-file", os.path.join(ROOT, "bench", "balanced.json"),
                 "--max-concurrency", "64")
    assert p.returncode == 0, p.stderr
    ref = json.load(open(os.path.join(ROOT, "bench", "balanced.json")))
    assert r["completed"] == len(ref["prompt_token_ids"]) == len(s.bodies)
    sent = sorted((b["prompt"], b["max_tokens"]) for _, _, b in s.bodies)
    assert sent == sorted(zip(ref["prompt_token_ids"], ref["max_tokens"]))
    assert all(b["temperature"] == 0.6 for _, _, b in s.bodies)
    assert r["total_input_tokens"] == sum(map(len, ref["prompt_token_ids"]))


def test_poisson_arrivals_spread_requests_out(server_factory, tmp_path):
    s = server_factory()
    p, r = bench(s, tmp_path, "--workload", "random", "--num-prompts", "20", "--input-len", "1",
                 "--output-len", "1", "--request-rate", "50")
    assert p.returncode == 0, p.stderr
    assert r["completed"] == 20 and r["request_rate"] == 50
    # 19 exponential gaps of mean 20 ms: far from all at once, yet nowhere near 20 × 1 s.
    assert s.peak < 20 and 0.1 < r["duration"] < 10


def test_bad_options(server_factory, tmp_path):
    s = server_factory()
    p, _ = bench(s, tmp_path, "--workload", "nope")
    assert p.returncode == 1 and "unknown workload 'nope'" in p.stderr
    p, _ = bench(s, tmp_path, "--workload", "random", "--request-rate", "0")
    assert p.returncode == 1 and "--request-rate" in p.stderr
    p, _ = bench(s, tmp_path, "--workload", "random", "--input-len", "0")
    assert p.returncode == 1 and "--input-len" in p.stderr
    assert s.bodies == []
    p = subprocess.run([BIN, "bench-serve", "--port", "1", "--workload", "random", "--num-prompts", "1"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "nothing answers at 127.0.0.1:1 (is the server running?)" in p.stderr, p.stderr
    assert "connection to 127.0.0.1:1 failed" in p.stderr, p.stderr
    p = subprocess.run([BIN, "bench-serve", "--port", str(s.server_address[1]), "--workload", "random",
                        "--num-prompts", "1", "--json", str(tmp_path / "no" / "such" / "dir.json")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "cannot write" in p.stderr, p.stderr
    assert s.bodies == []  # nothing was sent
