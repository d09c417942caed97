"""Many concurrent streams, and clients that hang up mid-stream."""
import concurrent.futures
import http.client
import json
import re
import socket
import time
import urllib.request

import openai

from conftest import DEMO


def metric(server, name):
    text = urllib.request.urlopen(server.url + "/metrics").read().decode()
    m = re.search(r"^" + re.escape(name) + r"\{[^}]*\} (\S+)$", text, re.M)
    return float(m.group(1))


def test_200_concurrent_streams_get_every_token_in_order(server):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=300)
    prompts = [f"Story number {i}:" for i in range(200)]
    expected = {p: c.completions.create(model=DEMO, prompt=p, max_tokens=16, temperature=0).choices[0].text
                for p in prompts[:5]}

    def stream(p):
        s = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=300)
        chunks = list(s.completions.create(model=DEMO, prompt=p, max_tokens=16, temperature=0, stream=True,
                                           stream_options={"include_usage": True}))
        return p, "".join(ch.choices[0].text for ch in chunks if ch.choices), chunks[-1].usage.completion_tokens

    with concurrent.futures.ThreadPoolExecutor(200) as pool:
        results = list(pool.map(stream, prompts))
    assert len(results) == 200
    assert all(n == 16 for _, _, n in results)
    for p, text, _ in results:
        if p in expected:
            assert text == expected[p]  # every token once, in order (greedy: the same text)


def test_disconnects_free_everything(server):
    body = json.dumps({"prompt": "Tell me everything", "max_tokens": 200, "stream": True, "ignore_eos": True})
    conns = []
    for _ in range(8):
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read(200)  # some of the stream, then hang up
        conns.append((conn, resp))
    for conn, resp in conns:
        resp.close()
        conn.sock.close() if conn.sock else None
        conn.close()
    deadline = time.time() + 60
    while time.time() < deadline:
        if metric(server, "vllm:num_requests_running") == 0 and metric(server, "vllm:kv_cache_usage_perc") == 0:
            break
        time.sleep(0.2)
    assert metric(server, "vllm:num_requests_running") == 0
    assert metric(server, "vllm:num_requests_waiting") == 0
    assert metric(server, "vllm:kv_cache_usage_perc") == 0
    text = urllib.request.urlopen(server.url + "/metrics").read().decode()
    assert re.search(r'vllm:request_success_total\{[^}]*finished_reason="abort"[^}]*\} [1-9]', text), text[:2000]


def test_non_streaming_disconnect_aborts(server):
    before = re.search(r'vllm:request_success_total\{[^}]*finished_reason="abort"[^}]*\} (\S+)',
                       urllib.request.urlopen(server.url + "/metrics").read().decode())
    aborted_before = float(before.group(1))
    # n=16 x 240 tokens keeps the engine busy for seconds after the clients are gone.
    body = json.dumps({"prompt": "Tell me everything", "max_tokens": 240, "n": 16, "ignore_eos": True})
    for _ in range(3):
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
        time.sleep(0.05)
        sock.close()  # gone before the answer
    def aborted():
        text = urllib.request.urlopen(server.url + "/metrics").read().decode()
        return float(re.search(r'vllm:request_success_total\{[^}]*finished_reason="abort"[^}]*\} (\S+)', text).group(1))

    deadline = time.time() + 60
    while time.time() < deadline and (aborted() < aborted_before + 3 * 16 or
                                      metric(server, "vllm:num_requests_running") > 0 or
                                      metric(server, "vllm:num_requests_waiting") > 0):
        time.sleep(0.2)
    after = aborted()
    assert after >= aborted_before + 3 * 16
    assert metric(server, "vllm:num_requests_running") == 0 and metric(server, "vllm:kv_cache_usage_perc") == 0
