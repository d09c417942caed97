"""The server under hostile input and shutdown (issue 10): deep JSON, chunked bodies past the
limit, slow clients, connection caps, unknown roles, and SIGTERM with streams in flight.
Each test here failed on the server before these defences existed."""
import http.client
import json
import os
import re
import resource
import signal
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import MODES


def post(url, body=None, raw=None, timeout=30):
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def good(url):
    status, body = post(url + "/v1/completions", {"prompt": "Hi", "max_tokens": 2})
    assert status == 200 and body["choices"][0]["text"], body


def nested(depth, leaf="1"):
    return "[" * depth + leaf + "]" * depth


# 1. Deep nesting: a field of the wrong type holding 65,000 levels crashed the server (a
# recursive dump while the error message was built). Now: 400 before anything walks it.
@pytest.mark.parametrize("field", ["stop", "model", "max_tokens", "stop_token_ids", "prompt"])
def test_deeply_nested_field_is_400(server, field):
    raw = ('{"prompt": "x", "%s": %s}' % (field, nested(65000))).encode()
    if field == "prompt":
        raw = ('{"prompt": %s}' % nested(65000)).encode()
    status, err = post(server.url + "/v1/completions", raw=raw)
    assert status == 400, err
    assert "deeper than 64" in err["error"]["message"]
    good(server.url)


def test_deep_nesting_everywhere(server):
    deep_obj = '{"a":' * 65000 + "1" + "}" * 65000
    for path, raw in [
        ("/v1/chat/completions", '{"messages": [{"role": "user", "content": %s}]}' % nested(65000)),
        ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "x"}], "tools": %s}' % deep_obj),
        ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": %s}' % deep_obj),
        ("/tokenize", '{"messages": %s}' % nested(65000)),
        ("/detokenize", '{"tokens": %s}' % nested(65000)),
    ]:
        status, err = post(server.url + path, raw=raw.encode())
        assert status == 400 and "deeper than 64" in err["error"]["message"], (path, err)
    # 64 levels is still fine as JSON (the field is then simply of the wrong type).
    status, err = post(server.url + "/v1/completions", raw=('{"prompt": "x", "stop": %s}' % nested(63, '"s"')).encode())
    assert status == 400 and "'stop' must be a string or a list of strings, got array" in err["error"]["message"]
    good(server.url)


def test_error_messages_never_echo_the_value(server):
    secret = "SECRET" * 1000
    status, err = post(server.url + "/v1/completions", {"prompt": "x", "max_tokens": [secret]})
    assert status == 400 and "max_tokens" in err["error"]["message"] and "SECRET" not in err["error"]["message"]
    status, err = post(server.url + "/v1/completions", {"prompt": "x", "model": {"k": secret}})
    assert status == 400 and "model" in err["error"]["message"] and "SECRET" not in err["error"]["message"]


# 2. The body limit holds for chunked uploads too, without reading the rest.
def send_chunked(port, path, total_bytes, chunk=64 << 10):
    """Sends a chunked POST of up to total_bytes; returns (status, bytes sent before the answer)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              "Transfer-Encoding: chunked\r\n\r\n".encode())
    piece = f"{chunk:x}\r\n".encode() + b"a" * chunk + b"\r\n"
    sent = 0
    s.setblocking(False)
    answer = b""
    try:
        while sent < total_bytes:
            try:
                answer += s.recv(65536)
                if answer:
                    break
            except BlockingIOError:
                pass
            try:
                s.send(piece)  # may send part of it; the count is approximate, which is enough
                sent += chunk
            except BlockingIOError:
                time.sleep(0.01)
            except (BrokenPipeError, ConnectionResetError):
                break
        s.setblocking(True)
        s.settimeout(10)
        while b"\r\n\r\n" not in answer:
            more = s.recv(65536)
            if not more:
                break
            answer += more
    except (ConnectionResetError, BrokenPipeError):
        pass
    finally:
        s.close()
    m = re.match(rb"HTTP/1.1 (\d+)", answer)
    return (int(m.group(1)) if m else None), sent


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions", "/tokenize", "/no/such/route"])
def test_chunked_body_over_the_limit_is_413(start_server, path):
    s = start_server("--max-body-bytes", "100000")
    status, sent = send_chunked(s.port, path, 200 << 20)
    expected = 404 if path == "/no/such/route" else 413
    assert status == expected
    assert sent < 32 << 20, f"the server kept reading: {sent} bytes sent"
    good(s.url)


def test_gzip_body_is_limited_after_decompression(start_server):
    import gzip
    s = start_server("--max-body-bytes", "100000")
    body = gzip.compress(b'{"prompt": "' + b"a" * 5_000_000 + b'"}')
    req = urllib.request.Request(s.url + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == 413
    good(s.url)


# 4. Slow clients: each holds a thread of its own, so 1,000 of them starve nobody; a request
# that is not received within --request-read-timeout is cut off; beyond --max-connections a
# new connection gets 503 at once.
def raise_fd_limit(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(n, hard), hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= n


class Tricklers:
    """n connections that each send one byte of a request per second, from one thread."""

    def __init__(self, port, n):
        self.socks = []
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
            self.socks.append(s)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.wait(1.0):
            for s in self.socks:
                try:
                    s.send(b"X")
                except OSError:
                    pass

    def close(self):
        self.stop.set()
        self.thread.join()
        for s in self.socks:
            s.close()


def timed(fn):
    t = time.monotonic()
    fn()
    return time.monotonic() - t


def test_thousand_slow_clients_starve_nobody(start_server):
    assert raise_fd_limit(1300), "the test needs 1,300 open files (the hard limit is lower)"
    s = start_server()
    trickle = Tricklers(s.port, 1000)
    try:
        time.sleep(2)  # every connection is in, sending its second and third byte
        health = timed(lambda: urllib.request.urlopen(s.url + "/health", timeout=10).read())
        completion = timed(lambda: good(s.url))
        assert health < 1.0 and completion < 1.0, (health, completion)
    finally:
        trickle.close()


def test_request_read_deadline(start_server):
    s = start_server("--request-read-timeout", "2")
    trickle = Tricklers(s.port, 3)
    try:
        t = time.monotonic()
        sock = trickle.socks[0]
        sock.settimeout(10)
        answer = b""
        while True:  # the server answers 408 and closes after ~2 s, though bytes keep coming
            more = sock.recv(4096)
            if not more:
                break
            answer += more
        elapsed = time.monotonic() - t
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert elapsed < 5, elapsed
    finally:
        trickle.close()
    good(s.url)


def test_connections_over_the_cap_are_refused_at_once(start_server):
    s = start_server("--max-connections", "20")
    trickle = Tricklers(s.port, 20)
    try:
        deadline = time.monotonic() + 30
        while True:  # until the server has accepted all 20 (the accept loop may lag under load:
            # 10 s once ran out on a 2-core machine running the CLI tests beside it)
            t = time.monotonic()
            c = socket.create_connection(("127.0.0.1", s.port), timeout=5)
            c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = c.recv(4096)
            c.close()
            if answer.startswith(b"HTTP/1.1 503") or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert answer.startswith(b"HTTP/1.1 503") and b"too many open connections" in answer, \
            (answer, s.log()[-2000:])
        # At once: well before the 30 s read deadline a queued connection would wait for (the
        # bound is loose for busy CI machines, where a one-second bound failed once).
        assert time.monotonic() - t < 5
    finally:
        trickle.close()
    time.sleep(0.5)  # the tricklers' threads end as their sockets close
    good(s.url)


# 5. Unknown roles: 400 naming the allowed ones (a custom --chat-template decides for itself).
def test_unknown_role_is_400(server):
    status, err = post(server.url + "/v1/chat/completions",
                       {"messages": [{"role": "wizard", "content": "Hi"}], "max_tokens": 2})
    assert status == 400, err
    assert "system, user, assistant, tool" in err["error"]["message"]
    for role in ["system", "user", "assistant", "tool"]:
        status, err = post(server.url + "/v1/chat/completions",
                           {"messages": [{"role": role, "content": "Hi"}, {"role": "user", "content": "Hi"}],
                            "max_tokens": 2})
        assert status == 200, (role, err)


def test_custom_template_takes_any_role(start_server, tmp_path):
    template = tmp_path / "t.jinja"
    template.write_text("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}")
    s = start_server("--chat-template", str(template))
    status, body = post(s.url + "/v1/chat/completions", {"messages": [{"role": "wizard", "content": "Hi"}],
                                                           "max_tokens": 2})
    assert status == 200, body


# 3. SIGTERM aborts what is in flight and exits within seconds; a second signal exits at once.
def open_streams(url, n):
    """n streaming chats without max_tokens (each would run to the context length)."""
    results = [None] * n
    started = threading.Barrier(n + 1)

    def one(i):
        host, port = url.split("//")[1].split(":")
        c = http.client.HTTPConnection(host, int(port), timeout=60)
        body = json.dumps({"messages": [{"role": "user", "content": "Hi"}], "stream": True, "ignore_eos": True})
        c.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        events = []
        first = True
        try:
            for line in r:
                if first:
                    first = False
                    started.wait()
                line = line.decode().strip()
                if line.startswith("data: "):
                    events.append(line[6:])
        except Exception as e:  # noqa: BLE001 - recorded for the assertion
            events.append(f"exception {e!r}")
        results[i] = events

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    started.wait(timeout=60)
    return threads, results


def children_of(pid):
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid and fields[0] != "Z":
                    kids.append(int(entry))
            except (OSError, IndexError):
                pass
    return kids


def socket_dir(server):
    m = re.search(r"sockets in (\S+)\)", server.log())
    return m.group(1) if m else None


@pytest.mark.parametrize("mode", list(MODES))
def test_sigterm_drains_thirty_streams(start_server, mode):
    s = start_server("--max-model-len", "4096", "--kv-cache-mb", "256", *MODES[mode])
    ipc_dir = socket_dir(s)
    threads, results = open_streams(s.url, 30)
    time.sleep(0.5)
    t = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    rc = s.proc.wait(timeout=10)
    elapsed = time.monotonic() - t
    for th in threads:
        th.join(timeout=10)
    assert rc == 0, s.log()[-2000:]
    assert elapsed < 5, f"drained in {elapsed:.1f} s"
    for events in results:
        assert events and events[-1] == "[DONE]", events[-3:]
        err = json.loads(events[-2])
        assert err["error"]["code"] == 503 and "shutting down" in err["error"]["message"], events[-3:]
    assert not children_of(s.proc.pid)
    if mode == "multiprocess":
        assert ipc_dir and not os.path.exists(ipc_dir)


def assert_second_signal_exits_at_once(server, sig):
    assert server.proc.poll() is None, "the first signal should still be waiting"
    t = time.monotonic()
    server.proc.send_signal(sig)
    server.proc.wait(timeout=5)
    assert time.monotonic() - t < 1.0


def test_second_signal_exits_at_once_multiprocess(start_server):
    s = start_server("--use-multiprocess")
    ipc_dir = socket_dir(s)
    kids = children_of(s.proc.pid)
    assert len(kids) == 3
    for k in kids:  # stopped children ignore SIGTERM: the orderly shutdown would wait 5 s
        os.kill(k, signal.SIGSTOP)
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    assert s.proc.poll() is None, "the first signal should still be waiting for the children"
    assert_second_signal_exits_at_once(s, signal.SIGTERM)
    for k in kids:
        assert not os.path.exists(f"/proc/{k}") or open(f"/proc/{k}/stat").read().split()[2] == "Z"
    assert ipc_dir and not os.path.exists(ipc_dir)


def test_second_signal_exits_at_once_single(start_server):
    s = start_server("--drain-timeout", "60")
    # A client that asks for a lot and reads none of it: once the socket buffers are full the
    # server's writes to it block, so the drain waits (up to the write timeout, 5 s).
    c = socket.socket()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    c.connect(("127.0.0.1", s.port))
    body = json.dumps({"prompt": "Hi", "stream": True, "n": 64, "logprobs": 20, "max_tokens": 200,
                       "ignore_eos": True}).encode()
    c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    time.sleep(2)
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    assert s.proc.poll() is None, "the drain should be waiting for the blocked client"
    assert_second_signal_exits_at_once(s, signal.SIGINT)
    c.close()
