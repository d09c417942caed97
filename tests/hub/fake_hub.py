"""A local stand-in for the Hugging Face hub on 127.0.0.1, serving fixture models in the hub's URL
layout, so the download path is tested without the internet:

  GET  /api/models/{repo}/revision/{rev}   {"id", "sha", "siblings": [{"rfilename"}]}
  HEAD|GET /{repo}/resolve/{rev}/{file}    small files: 200, ETag = git blob sha1
                                           *.safetensors (LFS): 302 to /cdn/{sha256}, with
                                           X-Linked-Etag (the sha256) and X-Linked-Size
  GET  /cdn/{sha256}                       the bytes, with Range support (206)

Every resolve answer carries X-Repo-Commit. Errors as the hub sends them: 404 with X-Error-Code
RepositoryNotFound / RevisionNotFound / EntryNotFound; a gated repo answers 401 without a token and
403 with a wrong one (X-Error-Code GatedRepo). Knobs for tests: `drop_once` (sha256s whose next
download is cut off halfway), `corrupt` (sha256s served with one byte flipped). `requests` logs
(method, path, Range, Authorization) of every request.
"""
import hashlib
import http.server
import json
import os
import threading


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Repo:
    def __init__(self, repo_id, folder, files=None, token=None):
        self.repo_id = repo_id
        self.folder = folder
        self.files = sorted(files or os.listdir(folder))
        self.sha = hashlib.sha1(repo_id.encode()).hexdigest()  # a stable fake commit
        self.token = token  # gated: requests must bring "Bearer {token}"

    def path(self, name):
        return os.path.join(self.folder, name)


class FakeHub:
    def __init__(self):
        self.repos = {}
        self.blobs = {}  # sha256 -> file path (what /cdn serves)
        self.drop_once = set()
        self.corrupt = set()
        self.requests = []
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                hub.handle(self, head=True)

            def do_GET(self):
                hub.handle(self, head=False)

        # The hub and its "CDN" listen on two ports: a redirect to the CDN goes to another
        # host, as the hub's does (clients follow it; huggingface_hub's HEAD does not).
        self.servers = []
        for _ in range(2):
            server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self.servers.append(server)
        self.url = f"http://127.0.0.1:{self.servers[0].server_address[1]}"
        self.cdn_url = f"http://127.0.0.1:{self.servers[1].server_address[1]}"

    def add(self, repo_id, folder, files=None, token=None):
        repo = Repo(repo_id, folder, files, token)
        self.repos[repo_id] = repo
        for name in repo.files:
            if name.endswith(".safetensors"):
                self.blobs[self.sha256(repo.path(name))] = repo.path(name)
        return repo

    @staticmethod
    def sha256(path):
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()

    def close(self):
        for server in self.servers:
            server.shutdown()
            server.server_close()

    # --- answers ---

    def reply(self, h, status, headers=None, body=b"", head=False):
        h.send_response(status)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if not head:
            h.wfile.write(body)

    def error(self, h, status, code, head, message):
        body = json.dumps({"error": message}).encode()
        self.reply(h, status, {"X-Error-Code": code, "Content-Type": "application/json"}, body, head)

    def handle(self, h, head):
        path = h.path.split("?")[0]
        self.requests.append((h.command, path, h.headers.get("Range"), h.headers.get("Authorization")))
        if path.startswith("/cdn/"):
            return self.serve_blob(h, path[len("/cdn/"):], head)
        if path.startswith("/api/models/"):
            parts = path[len("/api/models/"):].split("/")
            if len(parts) != 4 or parts[2] != "revision":
                return self.error(h, 404, "RepositoryNotFound", head, "not found")
            repo = self.check_repo(h, "/".join(parts[:2]), head)
            if repo and self.check_revision(h, repo, parts[3], head):
                body = json.dumps({"id": repo.repo_id, "sha": repo.sha,
                                   "siblings": [{"rfilename": f} for f in repo.files]}).encode()
                self.reply(h, 200, {"Content-Type": "application/json"}, body, head)
            return
        parts = path.lstrip("/").split("/")
        if len(parts) < 5 or parts[2] != "resolve":
            return self.error(h, 404, "RepositoryNotFound", head, "not found")
        repo = self.check_repo(h, "/".join(parts[:2]), head)
        if not repo or not self.check_revision(h, repo, parts[3], head):
            return
        name = "/".join(parts[4:])
        if name not in repo.files:
            return self.error(h, 404, "EntryNotFound", head, f"{name} does not exist")
        common = {"X-Repo-Commit": repo.sha}
        if name.endswith(".safetensors"):  # LFS: the hub redirects to its CDN
            sha = self.sha256(repo.path(name))
            common.update({"X-Linked-Etag": f'"{sha}"', "ETag": f'"{sha}"',
                           "X-Linked-Size": str(os.path.getsize(repo.path(name))),
                           "Location": f"{self.cdn_url}/cdn/{sha}"})
            return self.reply(h, 302, common, b"", head)
        with open(repo.path(name), "rb") as f:
            data = f.read()
        common["ETag"] = f'"{git_blob_sha1(data)}"'
        self.reply(h, 200, common, data, head)

    def check_repo(self, h, repo_id, head):
        repo = self.repos.get(repo_id)
        if repo is None:
            self.error(h, 404, "RepositoryNotFound", head, f"Repository {repo_id} not found")
            return None
        if repo.token is not None:
            auth = h.headers.get("Authorization")
            if auth is None:
                self.error(h, 401, "GatedRepo", head, "Access to this model is restricted")
                return None
            if auth != f"Bearer {repo.token}":
                self.error(h, 403, "GatedRepo", head, "Access to this model is restricted")
                return None
        return repo

    def check_revision(self, h, repo, revision, head):
        if revision in ("main", repo.sha):
            return True
        self.error(h, 404, "RevisionNotFound", head, f"Invalid rev id: {revision}")
        return False

    def serve_blob(self, h, sha, head):
        if sha not in self.blobs:
            return self.error(h, 404, "EntryNotFound", head, "no such blob")
        with open(self.blobs[sha], "rb") as f:
            data = f.read()
        if sha in self.corrupt:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        start, status, headers = 0, 200, {"ETag": f'"{sha}"', "Accept-Ranges": "bytes"}
        rng = h.headers.get("Range")
        if rng and rng.startswith("bytes="):
            start = int(rng[len("bytes="):].split("-")[0])
            if start >= len(data):
                return self.reply(h, 416, {"Content-Range": f"bytes */{len(data)}"}, b"", head)
            status = 206
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        body = data[start:]
        if sha in self.drop_once and not head:  # promise everything, send half, hang up
            self.drop_once.discard(sha)
            h.send_response(status)
            for k, v in headers.items():
                h.send_header(k, v)
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body[: len(body) // 2])
            h.wfile.flush()
            h.close_connection = True
            h.connection.shutdown(2)
            return
        self.reply(h, status, headers, body, head)
