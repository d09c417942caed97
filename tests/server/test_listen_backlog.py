"""The listening socket's backlog is large enough for a burst of clients. cpp-httplib 0.11
listens with a backlog of 5; with it, 256 clients connecting at once (bench-serve's balanced
run) lost some connections. `ss` shows a listening socket's backlog as its Send-Q."""
import shutil
import subprocess

import pytest


def test_listen_backlog_takes_a_burst(server):
    if shutil.which("ss") is None:
        pytest.fail("ss (iproute2) is missing: scripts/setup.sh installs it")
    out = subprocess.run(["ss", "-ltnH", f"sport = :{server.port}"], capture_output=True, text=True, check=True).stdout
    lines = [l.split() for l in out.splitlines() if l.strip()]
    assert lines, f"no listening socket on port {server.port}: {out!r}"
    backlog = int(lines[0][2])
    with open("/proc/sys/net/core/somaxconn") as f:
        expected = min(4096, int(f.read()))  # serve asks for SOMAXCONN; the kernel caps it
    assert backlog == expected > 5, f"listen backlog {backlog}, expected {expected}"
