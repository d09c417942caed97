"""Starts `miniinfer serve` on the bundled demo model for the server tests."""
import os
import socket
import subprocess
import tempfile
import time

import pytest
import urllib.request

BIN = os.environ["MINIINFER_BIN"]
DEMO = os.path.join(os.environ["MINIINFER_FIXTURES"], "qwen3-demo")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`miniinfer serve` on the demo model (or `model`); its log (stdout and stderr) goes to a file."""

    def __init__(self, *args, model=DEMO):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_file = tempfile.NamedTemporaryFile("w+", prefix="miniinfer-serve-", suffix=".log")
        defaults = [flag_value for flag, value in [("--max-model-len", "256"), ("--kv-cache-mb", "64")]
                    if flag not in args for flag_value in (flag, value)]
        self.proc = subprocess.Popen([BIN, "serve", model, "--port", str(self.port), *defaults, *args],
                                     stdout=self.log_file, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 120
        while time.time() < deadline and self.proc.poll() is None:
            try:
                if urllib.request.urlopen(self.url + "/health", timeout=2).status == 200:
                    return
            except Exception:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("server did not start: " + self.log())

    def log(self):
        with open(self.log_file.name, errors="replace") as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise
        return self.proc.returncode


# Every test that takes `server` runs against both modes: the engine on a thread of the server
# (single) and the tokenizer / engine core / detokenizer processes (--use-multiprocess).
MODES = {"single": [], "multiprocess": ["--use-multiprocess"]}


@pytest.fixture(scope="module", params=list(MODES))
def server(request):
    s = Server("--max-num-seqs", "256", *MODES[request.param])
    yield s
    assert s.stop() == 0, "the server did not exit cleanly on SIGTERM:\n" + s.log()[-3000:]


@pytest.fixture
def start_server():
    started = []

    def start(*args):
        s = Server(*args)
        started.append(s)
        return s
    yield start
    for s in started:
        s.stop()
