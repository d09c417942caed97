"""Starts `miniinfer serve` on the bundled demo model for the server tests."""
import os
import socket
import subprocess
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
    def __init__(self, *args):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([BIN, "serve", DEMO, "--port", str(self.port), "--max-model-len", "256",
                                      "--kv-cache-mb", "64", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if urllib.request.urlopen(self.url + "/health", timeout=2).status == 200:
                    return
            except Exception:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("server did not start: " + self.proc.stdout.read())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise
        return self.proc.returncode


@pytest.fixture(scope="module")
def server():
    s = Server("--max-num-seqs", "256")
    yield s
    assert s.stop() == 0, "the server did not exit cleanly on SIGTERM"


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
