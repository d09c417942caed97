"""Models by Hugging Face name: `miniinfer ... --model org/name` against a local fake hub
(fake_hub.py, 127.0.0.1 only) and a temporary cache, and the real huggingface_hub package reading
what we wrote and writing what we read."""
import hashlib
import json
import os
import resource
import signal
import subprocess
import sys

import huggingface_hub
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from fake_hub import FakeHub  # noqa: E402

BIN = os.environ["MINIINFER_BIN"]
FIXTURES = os.environ["MINIINFER_FIXTURES"]
DEMO = os.path.join(FIXTURES, "qwen3-demo")  # one model.safetensors, tokenizer
SHARDED = os.path.join(FIXTURES, "qwen2-tiny")  # 14 shards + index, no tokenizer


@pytest.fixture
def hub():
    h = FakeHub()
    h.add("test-org/qwen3-demo", DEMO)
    h.add("test-org/qwen2-tiny", SHARDED)
    h.add("test-org/gated", os.path.join(FIXTURES, "qwen3-tiny"), token="hf_secret")
    yield h
    h.close()


@pytest.fixture
def cache(tmp_path):
    return tmp_path / "hub-cache"


def run(hub, cache, *args, env=None, preexec_fn=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    e.update({"HF_HUB_CACHE": str(cache), "HF_HOME": str(cache.parent / "hf-home"),
              "HF_ENDPOINT": hub.url if hub else "http://127.0.0.1:9"})
    e.update(env or {})
    p = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=300, env=e,
                       preexec_fn=preexec_fn)
    return p.returncode, p.stdout, p.stderr


def one_error_line(code, err, *needles):
    assert code > 0, f"expected a non-zero exit, got {code}: {err}"
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for n in needles:
        assert n in lines[0], f"{n!r} not in {lines[0]!r}"


def inspect_json(hub, cache, model, *args, env=None):
    code, out, err = run(hub, cache, "inspect", "--model", model, "--json", *args, env=env)
    assert code == 0, err
    return json.loads(out)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_download_lays_out_the_cache_as_huggingface_hub(hub, cache):
    info = inspect_json(hub, cache, "test-org/qwen2-tiny")
    assert info["num_files"] == 14 and info["num_tensors"] == 27
    repo = hub.repos["test-org/qwen2-tiny"]
    repo_dir = cache / "models--test-org--qwen2-tiny"
    snapshot = repo_dir / "snapshots" / repo.sha
    assert info["model_dir"] == str(snapshot)
    assert (repo_dir / "refs" / "main").read_text() == repo.sha
    names = sorted(os.listdir(snapshot))
    # Only what MiniInfer reads: not reference.json / reference.safetensors (no index entry).
    assert names == sorted(["config.json", "generation_config.json", "model.safetensors.index.json"]
                           + [f"model-{i:05d}-of-00014.safetensors" for i in range(1, 15)])
    for name in names:
        link = snapshot / name
        assert link.is_symlink()
        target = os.readlink(link)
        assert target.startswith("../../blobs/")
        assert (link.parent / target).resolve().read_bytes() == open(os.path.join(SHARDED, name), "rb").read()
        if name.endswith(".safetensors"):
            assert os.path.basename(target) == sha256(os.path.join(SHARDED, name))
    assert not [b for b in os.listdir(repo_dir / "blobs") if b.endswith(".incomplete")]
    # LFS files came through the redirect to the "CDN".
    assert sum(1 for m, p, _, _ in hub.requests if m == "GET" and p.startswith("/cdn/")) == 14


def test_generate_by_name_then_offline_and_no_network_when_cached(hub, cache):
    code, out, err = run(hub, cache, "generate", "--model", "test-org/qwen3-demo", "--prompt", "Hello",
                         "--temperature", "0", "--max-tokens", "4", "--ignore-eos")
    assert code == 0, err
    ref = json.load(open(os.path.join(DEMO, "reference.json")))
    assert json.loads(out.splitlines()[0])["token_ids"] == ref["prompts"][0]["greedy"][:4]
    snapshot = cache / "models--test-org--qwen3-demo" / "snapshots" / hub.repos["test-org/qwen3-demo"].sha
    assert (snapshot / "tokenizer.json").is_symlink() and (snapshot / "tokenizer_config.json").is_symlink()
    # A complete snapshot is used as it is, online or offline: no request at all.
    before = len(hub.requests)
    assert inspect_json(hub, cache, "test-org/qwen3-demo")["model_type"] == "qwen3"
    assert inspect_json(None, cache, "test-org/qwen3-demo", env={"HF_HUB_OFFLINE": "1"})["model_type"] == "qwen3"
    assert len(hub.requests) == before


def test_revision_as_commit_hash_and_unknown_revision(hub, cache):
    sha = hub.repos["test-org/qwen3-demo"].sha
    info = inspect_json(hub, cache, "test-org/qwen3-demo", "--revision", sha)
    assert info["model_dir"].endswith(sha)
    refs = cache / "models--test-org--qwen3-demo" / "refs"
    assert not refs.exists() or not os.listdir(refs)  # a hash needs no ref
    code, _, err = run(hub, cache, "inspect", "--model", "test-org/qwen3-demo", "--revision", "v9")
    one_error_line(code, err, "revision 'v9' not found")


def test_unknown_repo_and_unreachable_hub(hub, cache):
    code, _, err = run(hub, cache, "inspect", "--model", "test-org/nope")
    one_error_line(code, err, "test-org/nope", "repository not found")
    code, _, err = run(None, cache, "inspect", "--model", "test-org/nope")
    one_error_line(code, err, "cannot download from http://127.0.0.1:9", "HF_HUB_OFFLINE")


def test_offline_and_not_cached_touches_no_network(hub, cache):
    code, _, err = run(hub, cache, "inspect", "--model", "test-org/qwen3-demo", env={"HF_HUB_OFFLINE": "1"})
    one_error_line(code, err, "HF_HUB_OFFLINE", "not in the Hugging Face cache")
    assert hub.requests == []


def test_gated_repo_needs_the_token(hub, cache):
    code, _, err = run(hub, cache, "inspect", "--model", "test-org/gated")
    one_error_line(code, err, "gated", "401", "HF_TOKEN")
    code, _, err = run(hub, cache, "inspect", "--model", "test-org/gated", env={"HF_TOKEN": "hf_wrong"})
    one_error_line(code, err, "gated", "403", "HF_TOKEN")
    info = inspect_json(hub, cache, "test-org/gated", env={"HF_TOKEN": "hf_secret"})
    assert info["model_type"] == "qwen3"
    assert all(auth == "Bearer hf_secret" for _, p, _, auth in hub.requests[-4:] if not p.startswith("/cdn/"))
    # The token goes to the hub only, never to the host it redirects to.
    assert all(auth is None for _, p, _, auth in hub.requests if p.startswith("/cdn/"))


def test_token_file_from_hf_home(hub, cache):
    home = cache.parent / "hf-home"
    home.mkdir(parents=True)
    (home / "token").write_text("hf_secret\n")
    assert inspect_json(hub, cache, "test-org/gated")["model_type"] == "qwen3"


def test_connection_dropped_mid_file_resumes_with_range(hub, cache):
    sha = sha256(os.path.join(DEMO, "model.safetensors"))
    hub.drop_once.add(sha)
    assert inspect_json(hub, cache, "test-org/qwen3-demo")["model_type"] == "qwen3"
    cdn = [(r, p) for m, p, r, _ in hub.requests if p == f"/cdn/{sha}"]
    assert len(cdn) == 2 and cdn[0][0] is None and cdn[1][0].startswith("bytes=")
    assert int(cdn[1][0][len("bytes="):].rstrip("-")) > 0
    assert sha256(cache / "models--test-org--qwen3-demo" / "blobs" / sha) == sha


def test_incomplete_file_from_an_earlier_run_is_continued(hub, cache):
    src = os.path.join(DEMO, "model.safetensors")
    sha = sha256(src)
    blobs = cache / "models--test-org--qwen3-demo" / "blobs"
    blobs.mkdir(parents=True)
    data = open(src, "rb").read()
    (blobs / f"{sha}.incomplete").write_bytes(data[:1000000])
    assert inspect_json(hub, cache, "test-org/qwen3-demo")["model_type"] == "qwen3"
    assert [r for m, p, r, _ in hub.requests if p == f"/cdn/{sha}"] == ["bytes=1000000-"]
    assert (blobs / sha).read_bytes() == data and not (blobs / f"{sha}.incomplete").exists()


def test_corrupt_download_is_refused_and_leaves_nothing(hub, cache):
    sha = sha256(os.path.join(DEMO, "model.safetensors"))
    hub.corrupt.add(sha)
    code, _, err = run(hub, cache, "inspect", "--model", "test-org/qwen3-demo")
    one_error_line(code, err, "sha256", sha)
    repo_dir = cache / "models--test-org--qwen3-demo"
    assert not (repo_dir / "blobs" / sha).exists() and not (repo_dir / "blobs" / f"{sha}.incomplete").exists()
    snapshot = repo_dir / "snapshots" / hub.repos["test-org/qwen3-demo"].sha
    assert not os.path.lexists(snapshot / "model.safetensors")
    assert not (repo_dir / "refs" / "main").exists()


def test_write_error_is_reported_and_no_partial_blob_is_left(hub, cache):
    def small_file_limit():  # writes past 2 MB fail with EFBIG, as a full disk fails with ENOSPC
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (2 << 20, 2 << 20))
    code, _, err = run(hub, cache, "inspect", "--model", "test-org/qwen3-demo", preexec_fn=small_file_limit)
    one_error_line(code, err, "writing", ".incomplete", "File too large")
    sha = sha256(os.path.join(DEMO, "model.safetensors"))
    blobs = cache / "models--test-org--qwen3-demo" / "blobs"
    assert not (blobs / sha).exists()
    # The next run (no limit) continues the partial file and completes.
    assert inspect_json(hub, cache, "test-org/qwen3-demo")["model_type"] == "qwen3"


def test_serve_names_the_model_as_given(hub, cache):
    import socket
    import time
    import urllib.request
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    e = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    e.update({"HF_HUB_CACHE": str(cache), "HF_ENDPOINT": hub.url, "HF_HOME": str(cache.parent / "hf-home")})
    proc = subprocess.Popen([BIN, "serve", "test-org/qwen3-demo", "--port", str(port), "--max-model-len", "256",
                             "--kv-cache-mb", "64"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=e)
    try:
        deadline = time.time() + 120
        models = None
        while time.time() < deadline and proc.poll() is None:
            try:
                models = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2))
                break
            except Exception:
                time.sleep(0.1)
        assert models is not None, proc.stderr.read().decode() if proc.poll() is not None else "no answer"
        assert [m["id"] for m in models["data"]] == ["test-org/qwen3-demo"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# --- the real huggingface_hub package ---

def test_huggingface_hub_finds_our_files(hub, cache):
    inspect_json(hub, cache, "test-org/qwen2-tiny")
    repo = hub.repos["test-org/qwen2-tiny"]
    info = huggingface_hub.scan_cache_dir(cache)
    assert not info.warnings, info.warnings
    [cached] = [r for r in info.repos if r.repo_id == "test-org/qwen2-tiny"]
    [revision] = list(cached.revisions)
    assert revision.commit_hash == repo.sha and set(revision.refs) == {"main"}
    assert {f.file_name for f in revision.files} >= {"config.json", "model-00001-of-00014.safetensors"}
    path = huggingface_hub.hf_hub_download("test-org/qwen2-tiny", "model-00003-of-00014.safetensors",
                                           cache_dir=cache, local_files_only=True)
    assert path == str(cache / "models--test-org--qwen2-tiny" / "snapshots" / repo.sha /
                       "model-00003-of-00014.safetensors")


def test_we_find_files_huggingface_hub_downloaded(hub, cache):
    repo = hub.repos["test-org/qwen2-tiny"]
    for name in repo.files:
        if name.startswith("model") or name.endswith("config.json"):
            huggingface_hub.hf_hub_download("test-org/qwen2-tiny", name, cache_dir=cache,
                                            endpoint=hub.url, token=False)
    assert (cache / "models--test-org--qwen2-tiny" / "refs" / "main").read_text() == repo.sha
    before = len(hub.requests)
    info = inspect_json(None, cache, "test-org/qwen2-tiny", env={"HF_HUB_OFFLINE": "1"})
    assert info["num_files"] == 14 and info["model_dir"].endswith(repo.sha)
    assert len(hub.requests) == before
