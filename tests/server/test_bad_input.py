"""Every bad request gets OpenAI's error JSON and the right status; a good request still works."""
import concurrent.futures
import json
import socket
import time
import urllib.error
import urllib.request

import pytest


def post(url, body, headers=None, raw=None):
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def good(server):
    status, body = post(server.url + "/v1/completions", {"prompt": "Hi", "max_tokens": 2})
    assert status == 200 and len(body["choices"][0]["text"]) > 0


CASES = [
    ("malformed JSON", None, b"{not json", 400, "not valid JSON"),
    ("wrong type", {"prompt": "x", "max_tokens": "five"}, None, 400, "max_tokens"),
    ("missing prompt", {"max_tokens": 3}, None, 400, "prompt"),
    ("unknown model", {"prompt": "x", "model": "gpt-9"}, None, 404, "gpt-9"),
    ("empty prompt", {"prompt": ""}, None, 400, "empty"),
    ("too long", {"prompt": "x", "max_tokens": 1000}, None, 400, "maximum context length is 256"),
    ("negative temperature", {"prompt": "x", "temperature": -1}, None, 400, "temperature"),
    ("NaN top_p", None, b'{"prompt": "x", "top_p": NaN}', 400, "not valid JSON"),
    ("top_p out of range", {"prompt": "x", "top_p": 1.5}, None, 400, "top_p"),
    ("ids out of vocabulary", {"prompt": [1, 2, 999999]}, None, 400, "999999"),
    ("invalid UTF-8", None, b'{"prompt": "\xff\xfe"}', 400, "not valid JSON"),
]


@pytest.mark.parametrize("name,body,raw,status,needle", CASES, ids=[c[0] for c in CASES])
def test_bad_request_then_good(server, name, body, raw, status, needle):
    got, err = post(server.url + "/v1/completions", body, raw=raw)
    assert got == status, err
    assert err["error"]["code"] == status and needle in err["error"]["message"], err
    good(server)


def test_chat_errors(server):
    got, err = post(server.url + "/v1/chat/completions", {"messages": []})
    assert got == 400 and "messages" in err["error"]["message"]
    got, err = post(server.url + "/v1/chat/completions", {"messages": [{"content": "no role"}]})
    assert got == 400
    good(server)


def test_body_too_large(start_server):
    s = start_server("--max-body-bytes", "1000")
    got, err = post(s.url + "/v1/completions", {"prompt": "x" * 5000})
    assert got == 413 and "too large" in err["error"]["message"]
    good(s)


def test_api_key(start_server):
    s = start_server("--api-key", "sekret")
    assert urllib.request.urlopen(s.url + "/health").status == 200  # /health is open
    got, err = post(s.url + "/v1/completions", {"prompt": "x"})
    assert got == 401 and err["error"]["type"] == "authentication_error"
    got, _ = post(s.url + "/v1/completions", {"prompt": "x"}, {"Authorization": "Bearer wrong"})
    assert got == 401
    try:
        urllib.request.urlopen(s.url + "/metrics")
        assert False, "/metrics must be guarded"
    except urllib.error.HTTPError as e:
        assert e.code == 401
    got, body = post(s.url + "/v1/completions", {"prompt": "Hi", "max_tokens": 2}, {"Authorization": "Bearer sekret"})
    assert got == 200


@pytest.mark.parametrize("mode", ["single", "multiprocess"])
def test_too_many_queued(start_server, mode):
    from conftest import MODES
    s = start_server("--max-queued-requests", "2", "--max-num-seqs", "1", *MODES[mode])
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda _: post(s.url + "/v1/completions", {"prompt": "Hi", "max_tokens": 200,
                                                                            "ignore_eos": True}),
                                range(16)))
    statuses = [r[0] for r in results]
    assert 429 in statuses and 200 in statuses, statuses
    assert all(r[1]["error"]["type"] == "rate_limit_error" for r in results if r[0] == 429)
    good(s)
