"""A few thousand mutated requests against a live server (both modes): wrong types, deep
nesting, huge and odd values, invalid UTF-8, truncated bodies, lying Content-Length headers,
random bytes. Every answer must be 2xx, or 4xx with OpenAI's error JSON; the server must
answer /health and a normal request afterwards. Seeded: a failure names the seed and the
request to replay."""
import copy
import json
import random
import socket
import threading

SEEDS = [
    ("/v1/completions", {"prompt": "Hello", "max_tokens": 3}),
    ("/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 2, "n": 2, "temperature": 0.8, "seed": 1,
                         "stop": ["a"], "logprobs": 2}),
    ("/v1/completions", {"prompt": "x", "max_tokens": 2, "stream": True,
                         "stream_options": {"include_usage": True}}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}),
    ("/v1/chat/completions", {"messages": [{"role": "system", "content": "S"},
                                           {"role": "user", "content": [{"type": "text", "text": "Q"}]}],
                              "max_tokens": 2, "stream": True, "logprobs": True, "top_logprobs": 2,
                              "chat_template_kwargs": {"enable_thinking": False}}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "w?"},
                                           {"role": "assistant", "content": "", "tool_calls": [
                                               {"type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]},
                                           {"role": "tool", "content": "ok"}],
                              "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
                              "max_tokens": 2}),
    ("/tokenize", {"prompt": "Hello"}),
    ("/tokenize", {"messages": [{"role": "user", "content": "Hi"}]}),
    ("/detokenize", {"tokens": [1, 2, 3]}),
]

ODD_VALUES = [None, True, False, 0, -1, 1, 2**63, -2**63 - 1, 1e308, -0.0, 0.5, "", "x" * 10000, "\u0000",
              "\ud800", "é€😀", [], {}, [[[]]], {"a": {"b": {}}}, [1, "a", None], 151936, 2**31]


def deep(depth):
    return "[" * depth + "]" * depth


def mutate_value(rng, v):
    choice = rng.random()
    if choice < 0.5:
        return copy.deepcopy(rng.choice(ODD_VALUES))
    if choice < 0.6:
        return json.loads(deep(rng.choice([1, 10, 63])))
    if isinstance(v, list) and v:
        v = list(v)
        i = rng.randrange(len(v))
        v[i] = mutate_value(rng, v[i])
        return v
    if isinstance(v, dict) and v:
        v = dict(v)
        k = rng.choice(list(v))
        v[k] = mutate_value(rng, v[k])
        return v
    return copy.deepcopy(rng.choice(ODD_VALUES))


def mutate(rng, path, body):
    """(path, headers, raw bytes) of a mutated request."""
    body = copy.deepcopy(body)
    for _ in range(rng.randint(1, 3)):
        keys = list(body) + ["n", "max_tokens", "stop", "seed", "logprobs", "model", "stream", "role", "tools"]
        k = rng.choice(keys)
        body[k] = mutate_value(rng, body.get(k))
    if body.get("n", 1) not in (1, 2) or not isinstance(body.get("n", 1), int):
        body.pop("n", None) if rng.random() < 0.5 else None
    if body.get("max_tokens") is None or not isinstance(body.get("max_tokens"), int) or body["max_tokens"] > 4:
        if rng.random() < 0.7:
            body["max_tokens"] = rng.randint(1, 4)  # keep the engine's work small
    raw = json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    kind = rng.random()
    if kind < 0.08:
        raw = raw[: rng.randrange(len(raw))]  # truncated JSON
    elif kind < 0.14:
        raw = raw.replace(b'"', b"\xff", 1)  # invalid UTF-8
    elif kind < 0.18:
        field = rng.choice(["prompt", "stop", "model", "n", "max_tokens", "messages", "tools", "seed"])
        raw = b'{"prompt": "x", "%s": %s}' % (field.encode(), deep(rng.choice([65, 1000, 100000])).encode())
    elif kind < 0.22:
        raw = bytes(rng.randrange(256) for _ in range(rng.randint(0, 300)))
    elif kind < 0.25:
        headers["Content-Type"] = "text/plain"
    elif kind < 0.28:
        path = rng.choice(["/v1/nothing", "/v1/completions/", "/health", "/V1/completions", "/" + "a" * 5000])
    return path, headers, raw


def request(port, path, headers, raw, truncate_body=False):
    """Sends one request on a fresh connection; returns (status, content type, body bytes)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    try:
        length = len(raw) + (10 if truncate_body else 0)  # a Content-Length that lies
        head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\nConnection: close\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        s.sendall(head.encode() + raw)
        if truncate_body:
            s.shutdown(socket.SHUT_WR)
        data = b""
        while True:
            more = s.recv(65536)
            if not more:
                break
            data += more
    finally:
        s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1]) if lines and lines[0].startswith("HTTP/1.1") else None
    fields = {l.split(":", 1)[0].lower(): l.split(":", 1)[1].strip() for l in lines[1:] if ":" in l}
    if fields.get("transfer-encoding") == "chunked":
        out, rest = b"", body
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line or b"0", 16)
            if size == 0:
                break
            out, rest = out + rest[:size], rest[size + 2:]
        body = out
    return status, fields.get("content-type", ""), body


def check(status, ctype, body, what):
    assert status is not None, f"no HTTP answer: {what}"
    assert 200 <= status < 300 or 400 <= status < 500, f"status {status}: {what}: {body[:300]!r}"
    if status >= 400:
        err = json.loads(body)
        assert err["error"]["code"] == status and err["error"]["message"], what
    elif "event-stream" in ctype:
        assert body.rstrip().endswith(b"data: [DONE]"), f"stream without [DONE]: {what}"
    elif "json" in ctype:
        json.loads(body)


def test_mutated_requests(server):
    port = server.port
    failures = []

    def worker(seed):
        rng = random.Random(seed)
        for i in range(250):
            path, body = rng.choice(SEEDS)
            mpath, headers, raw = mutate(rng, path, body)
            truncate = rng.random() < 0.03
            what = f"seed {seed} #{i}: POST {mpath[:80]} {raw[:300]!r} truncated={truncate}"
            try:
                status, ctype, resp = request(port, mpath, headers, raw, truncate)
                if truncate and status is None:
                    continue  # a body cut short may be answered by closing
                check(status, ctype, resp, what)
            except Exception as e:  # noqa: BLE001 - collected and reported
                failures.append(f"{what}: {e!r}")

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, f"{len(failures)} bad answers, e.g.:\n" + "\n".join(failures[:5])
    assert server.proc.poll() is None, "the server died"
    status, _, _ = request(port, "/v1/completions", {"Content-Type": "application/json"},
                           json.dumps({"prompt": "Hi", "max_tokens": 2}).encode())
    assert status == 200
