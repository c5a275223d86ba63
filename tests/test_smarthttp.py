"""Smart HTTP end to end: a real ``git`` client against ``GitHttp`` mounted at /git in a FastAPI app served by
uvicorn on a loopback port (in a background thread). No PostgreSQL: tokens are a dict.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from mergebot.git.smarthttp import GitHttp
from mergebot.models import Agent

AGENTS = {
    "tok-alice": Agent(id=1, name="alice", role="agent"),
    "tok-lena": Agent(id=2, name="lena", role="lead"),
    "tok-rita": Agent(id=3, name="rita", role="reviewer"),
}
PUSHERS = {"agent", "lead", "admin"}


class Recorder:
    """Raw ASGI middleware remembering each request's method, path and headers."""

    def __init__(self, app: ASGIApp, log: list[tuple[str, str, dict[str, str]]]) -> None:
        self.app = app
        self.log = log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
            self.log.append((scope["method"], scope["path"], headers))
        await self.app(scope, receive, send)


@dataclass
class Srv:
    root: Path
    home: Path
    work: Path
    port: int
    git: GitHttp
    small: GitHttp
    one: GitHttp
    managed: set[str]
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)

    def url(self, name: str = "demo", token: str | None = "tok-alice", mount: str = "git") -> str:
        auth = f"x:{token}@" if token is not None else ""
        return f"http://{auth}127.0.0.1:{self.port}/{mount}/{name}.git"

    def run(self, *args: str, cwd: Path | None = None, check: bool = True,
            extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower() and "askpass" not in k.lower()}
        env.update(GIT_TERMINAL_PROMPT="0", HOME=str(self.home), GIT_CONFIG_GLOBAL=str(self.home / "gitconfig"),
                   GIT_CONFIG_NOSYSTEM="1", **(extra_env or {}))
        cmd = ["git", "-c", "user.name=Test", "-c", "user.email=test@example.com",
               "-c", "init.defaultBranch=main", *args]
        out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=180)
        if check and out.returncode != 0:
            raise AssertionError(f"{cmd} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
        return out

    def make_repo(self, name: str) -> Path:
        bare = self.root / f"{name}.git"
        self.run("init", "--bare", "-b", "main", str(bare))
        seed = self.work / f"seed-{name}"
        self.run("init", "-b", "main", str(seed))
        (seed / "README").write_text(f"hello from {name}\n")
        self.run("add", "README", cwd=seed)
        self.run("commit", "-m", "initial", cwd=seed)
        self.run("push", str(bare), "main", cwd=seed)
        self.managed.add(name)
        return bare

    def clone(self, dest: str, name: str = "demo", token: str = "tok-alice") -> Path:
        path = self.work / dest
        self.run("clone", "--single-branch", self.url(name, token), str(path))
        return path

    def rev(self, repo: Path, ref: str) -> str:
        return self.run("--git-dir", str(repo), "rev-parse", "--verify", "-q", ref, check=False).stdout.strip()

    def basic(self, token: str) -> str:
        return "Basic " + base64.b64encode(f"x:{token}".encode()).decode()


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Srv]:
    root = tmp_path_factory.mktemp("repos")
    home = tmp_path_factory.mktemp("githome")
    work = tmp_path_factory.mktemp("work")
    managed: set[str] = set()
    port_box: list[int] = []

    async def authenticate(token: str) -> Agent | None:
        return AGENTS.get(token)

    def hook_url() -> str:
        return f"http://127.0.0.1:{port_box[0]}/internal/hooks"

    common: dict[str, Any] = {"authenticate": authenticate, "may_push": lambda a: a.role in PUSHERS,
                              "repo_exists": lambda name: name in managed, "hook_url": hook_url}
    git_app = GitHttp(root, **common)
    small = GitHttp(root, max_body_bytes=64 * 1024, timeout=2.0, **common)
    one = GitHttp(root, concurrency=1, queue_timeout=1.0, **common)  # one git process at a time
    requests: list[tuple[str, str, dict[str, str]]] = []

    app = FastAPI()
    app.mount("/git", git_app)
    app.mount("/small", small)
    app.mount("/one", one)
    app.add_middleware(Recorder, log=requests)

    @app.get("/internal/hooks/{push_id}")
    async def hook(push_id: str) -> dict[str, Any]:
        session = git_app.sessions.get(push_id)
        if session is None:
            return {"registered": False}
        return {"registered": True, "agent": session.agent.name, "repo": session.repo}

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    port_box.append(server.servers[0].sockets[0].getsockname()[1])
    s = Srv(root=root, home=home, work=work, port=port_box[0], git=git_app, small=small, one=one, managed=managed,
            requests=requests)
    s.make_repo("demo")
    try:
        yield s
    finally:
        server.should_exit = True
        thread.join(10)


def commit_file(s: Srv, clone: Path, name: str, data: bytes, message: str) -> str:
    (clone / name).write_bytes(data)
    s.run("add", name, cwd=clone)
    s.run("commit", "-q", "-m", message, cwd=clone)
    return s.run("rev-parse", "HEAD", cwd=clone).stdout.strip()


# -- clone, fetch, push ------------------------------------------------------------------------------------


def test_clone_and_fetch(srv: Srv) -> None:
    clone = srv.clone("clone-fetch")
    assert (clone / "README").read_text() == "hello from demo\n"
    # 200 local commits the server never saw, dated after main so they are offered first: fetch negotiation
    # sends rounds of "have" lines big enough for git to gzip the request body (Content-Encoding: gzip must
    # reach http-backend as HTTP_CONTENT_ENCODING).
    base = srv.run("rev-parse", "HEAD", cwd=clone).stdout.strip()
    stream = "".join(f"commit refs/heads/local\nmark :{i}\ncommitter T <t@e> {2000000000 + i} +0000\n"
                     f"data 2\n{i % 10}\n" + (f"from {base}\n" if i == 1 else "") + "\n" for i in range(1, 201))
    subprocess.run(["git", "fast-import", "--quiet"], cwd=clone, input=stream, text=True, check=True)
    # Someone else moves main (directly, by file path); fetch over HTTP sees it.
    other = srv.work / "other-writer"
    srv.run("clone", str(srv.root / "demo.git"), str(other))
    sha = commit_file(srv, other, "more.txt", b"more\n", "more")
    srv.run("push", "origin", "main", cwd=other)
    before = len(srv.requests)
    srv.run("fetch", "origin", cwd=clone)
    assert srv.run("rev-parse", "origin/main", cwd=clone).stdout.strip() == sha
    posts = [h for m, p, h in srv.requests[before:] if m == "POST" and p.endswith("/git-upload-pack")]
    assert any(h.get("content-encoding") == "gzip" for h in posts), posts


def test_push_new_branch(srv: Srv) -> None:
    clone = srv.clone("clone-push")
    sha = commit_file(srv, clone, "feature.txt", b"feature\n", "feature")
    srv.run("push", "origin", "HEAD:refs/heads/feature-push", cwd=clone)
    assert srv.rev(srv.root / "demo.git", "refs/heads/feature-push") == sha
    assert srv.git.sessions == {}


def test_large_chunked_push(srv: Srv) -> None:
    clone = srv.clone("clone-large")
    sha = commit_file(srv, clone, "blob.bin", os.urandom(30 * 1024 * 1024), "30 MB of noise")
    before = len(srv.requests)
    srv.run("push", "origin", "HEAD:refs/heads/large", cwd=clone)
    assert srv.rev(srv.root / "demo.git", "refs/heads/large") == sha
    posts = [h for m, p, h in srv.requests[before:] if m == "POST" and p.endswith("/git-receive-pack")]
    # git probes with a tiny sized request, then streams the pack chunked without Content-Length.
    assert any("content-length" not in h and h.get("transfer-encoding") == "chunked" for h in posts), posts
    assert srv.git.sessions == {}


def test_lead_may_push_reviewer_may_not(srv: Srv) -> None:
    lead = srv.clone("clone-lead", token="tok-lena")
    commit_file(srv, lead, "lead.txt", b"lead\n", "lead")
    srv.run("push", "origin", "HEAD:refs/heads/by-lead", cwd=lead)
    assert srv.rev(srv.root / "demo.git", "refs/heads/by-lead")

    clone = srv.clone("clone-reviewer", token="tok-rita")  # every role may clone
    commit_file(srv, clone, "review.txt", b"review\n", "review")
    out = srv.run("push", "origin", "HEAD:refs/heads/by-reviewer", cwd=clone, check=False)
    assert out.returncode != 0
    assert "role reviewer may not push" in out.stderr, out.stderr
    assert srv.rev(srv.root / "demo.git", "refs/heads/by-reviewer") == ""


# -- refusals ------------------------------------------------------------------------------------------------


def test_wrong_or_missing_token(srv: Srv) -> None:
    out = srv.run("ls-remote", srv.url(token="wrong"), check=False)
    assert out.returncode != 0
    assert "Authentication failed" in out.stderr, out.stderr
    out = srv.run("ls-remote", srv.url(token=None), check=False)
    assert out.returncode != 0
    assert "terminal prompts disabled" in out.stderr or "Authentication failed" in out.stderr, out.stderr

    r = httpx.get(f"http://127.0.0.1:{srv.port}/git/demo.git/info/refs?service=git-upload-pack")
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == 'Basic realm="mergebot"'
    r = httpx.get(f"http://127.0.0.1:{srv.port}/git/demo.git/info/refs?service=git-upload-pack",
                  headers={"Authorization": "Bearer tok-alice"})
    assert r.status_code == 401


def test_unknown_repo(srv: Srv) -> None:
    out = srv.run("ls-remote", srv.url("nope"), check=False)
    assert out.returncode != 0
    assert "not found" in out.stderr, out.stderr
    # A bare repo on disk that is not managed is not served either.
    srv.run("init", "--bare", str(srv.root / "stray.git"))
    out = srv.run("ls-remote", srv.url("stray"), check=False)
    assert out.returncode != 0
    assert "not found" in out.stderr, out.stderr


NOT_SERVED = [  # a GET of any of these is a 404: a name that escapes or is no repository's, or not smart HTTP
    "/git/../demo.git/info/refs?service=git-upload-pack",
    "/git/%2e%2e/demo.git/info/refs?service=git-upload-pack",
    "/git/demo.git/../demo.git/info/refs?service=git-upload-pack",
    "/git/de..mo.git/info/refs?service=git-upload-pack",
    "/git/-demo.git/info/refs?service=git-upload-pack",
    "/git/.demo.git/info/refs?service=git-upload-pack",
    "/git/" + "d" * 65 + ".git/info/refs?service=git-upload-pack",
    "/git/demo/info/refs?service=git-upload-pack",
    "/git/demo.git/info/refs",  # dumb protocol
    "/git/demo.git/info/refs?service=git-upload-archive",
    "/git/demo.git/HEAD",
    "/git/demo.git/objects/info/packs",
    "/git/demo.git/config",
    "/git/demo.git",
    "/git/",
]


@pytest.mark.parametrize(("method", "target", "status"), [
    *(("GET", target, 404) for target in NOT_SERVED),
    ("HEAD", "/git/demo.git/info/refs?service=git-upload-pack", 405),
    ("GET", "/git/demo.git/git-upload-pack", 405),
    ("PUT", "/git/demo.git/git-receive-pack", 405),
    ("GET", "/git/demo.git/info/refs?service=git-upload-pack", 200),
])
def test_paths(srv: Srv, method: str, target: str, status: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    try:
        conn.request(method, target, headers={"Authorization": srv.basic("tok-alice")})  # sent verbatim
        response = conn.getresponse()
        response.read()
        assert response.status == status
    finally:
        conn.close()


def test_reviewer_receive_pack_refused_over_raw_http(srv: Srv) -> None:
    base = f"http://127.0.0.1:{srv.port}/git/demo.git"
    r = httpx.get(f"{base}/info/refs?service=git-receive-pack", headers={"Authorization": srv.basic("tok-rita")})
    assert r.status_code == 403
    assert r.text.strip() == "role reviewer may not push"
    r = httpx.post(f"{base}/git-receive-pack", content=b"0000", headers={"Authorization": srv.basic("tok-rita")})
    assert r.status_code == 403
    r = httpx.get(f"{base}/info/refs?service=git-upload-pack", headers={"Authorization": srv.basic("tok-rita")})
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/x-git-upload-pack-advertisement"


# -- protocol v2 ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["0", "2"])
def test_protocol_versions(srv: Srv, version: str) -> None:
    before = len(srv.requests)
    out = srv.run("-c", f"protocol.version={version}", "ls-remote", srv.url(),
                  extra_env={"GIT_TRACE_PACKET": "1"})
    assert "refs/heads/main" in out.stdout
    sent = [h.get("git-protocol") for _, _, h in srv.requests[before:]]
    if version == "2":
        assert "git< version 2" in out.stderr
        assert "version=2" in sent
    else:
        assert "git< version 2" not in out.stderr
        assert "version=2" not in sent


# -- hooks and push sessions ---------------------------------------------------------------------------------


HOOK = """#!{python}
import json, os, sys, urllib.request
sys.stdin.read()
seen = {{k: os.environ.get(k) for k in ("MERGEBOT_PUSH_ID", "MERGEBOT_REPO", "MERGEBOT_HOOK_URL", "REMOTE_USER")}}
seen["keys"] = sorted(os.environ)
url = os.environ["MERGEBOT_HOOK_URL"] + "/" + os.environ["MERGEBOT_PUSH_ID"]
with urllib.request.urlopen(url, timeout=20) as r:
    seen["callback"] = json.load(r)
with open({out!r}, "w") as f:
    json.dump(seen, f)
"""


def test_hook_sees_push_session(srv: Srv, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MERGEBOT_DATABASE_URL", "postgresql://secret@db/prod")  # must not reach hooks
    bare = srv.make_repo("hooked")
    out_file = srv.work / "hook-env.json"
    hook = bare / "hooks" / "pre-receive"
    hook.write_text(HOOK.format(python=sys.executable, out=str(out_file)))
    hook.chmod(0o755)
    registered: list[str] = []

    class Recording(dict[str, Any]):
        def __setitem__(self, key: str, value: Any) -> None:
            registered.append(key)
            super().__setitem__(key, value)

    monkeypatch.setattr(srv.git, "sessions", Recording())
    clone = srv.clone("clone-hooked", name="hooked")
    sha = commit_file(srv, clone, "hooked.txt", b"hooked\n", "hooked")
    srv.run("push", "origin", "HEAD:refs/heads/hooked", cwd=clone)
    assert srv.rev(bare, "refs/heads/hooked") == sha

    seen = json.loads(out_file.read_text())
    push_id = seen["MERGEBOT_PUSH_ID"]
    assert push_id and push_id in registered
    assert seen["MERGEBOT_REPO"] == "hooked"
    assert seen["REMOTE_USER"] == "alice"
    assert seen["MERGEBOT_HOOK_URL"] == f"http://127.0.0.1:{srv.port}/internal/hooks"
    assert seen["callback"] == {"registered": True, "agent": "alice", "repo": "hooked"}  # alive while hook ran
    assert push_id not in srv.git.sessions and len(srv.git.sessions) == 0  # gone afterwards
    assert "MERGEBOT_DATABASE_URL" not in seen["keys"]
    assert "HTTP_AUTHORIZATION" not in seen["keys"]
    assert not any("PROXY" in k.upper() for k in seen["keys"])


# -- limits, timeouts, disconnects ---------------------------------------------------------------------------


def _raw(srv: Srv, head: str, body: bytes = b"") -> tuple[int, bytes]:
    """Send a request verbatim; read one response."""
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    try:
        sock.sendall(head.encode() + body)
        response = http.client.HTTPResponse(sock)
        response.begin()
        return response.status, response.read()
    finally:
        sock.close()


def test_body_limit(srv: Srv) -> None:
    # Raw sockets, and never more body than the server reads before answering: a server that closes with
    # unread data in its socket sends RST, which can destroy the 413 before the client reads it.
    head = ("POST /small/demo.git/{service} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: {srv.basic('tok-alice')}\r\n"
            "Content-Type: application/x-{service}-request\r\n{length}\r\n")
    # A declared length over the limit is refused before anything is read.
    status, body = _raw(srv, head.format(service="git-upload-pack", length="Content-Length: 100000\r\n"))
    assert (status, body) == (413, b"request body over 65536 bytes\n")
    # A chunked body (no Content-Length) is counted as it streams in.
    size = 64 * 1024 + 100
    status, body = _raw(srv, head.format(service="git-receive-pack", length="Transfer-Encoding: chunked\r\n"),
                        f"{size:x}\r\n".encode() + b"0" * size + b"\r\n")
    assert (status, body) == (413, b"request body over 65536 bytes\n")
    assert srv.small.sessions == {}


def _partial_post(srv: Srv, mount: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    sock.sendall((f"POST /{mount}/demo.git/git-receive-pack HTTP/1.1\r\n"
                  f"Host: 127.0.0.1\r\nAuthorization: {srv.basic('tok-alice')}\r\n"
                  "Content-Type: application/x-git-receive-pack-request\r\n"
                  "Content-Length: 1000\r\n\r\n0000000000").encode())
    return sock


def test_timeout_kills_cgi(srv: Srv) -> None:
    started = time.monotonic()
    sock = _partial_post(srv, "small")  # timeout=2.0 there; the CGI waits for 990 more bytes
    try:
        response = http.client.HTTPResponse(sock)
        response.begin()
        status, body = response.status, response.read()
    finally:
        sock.close()
    elapsed = time.monotonic() - started
    # http-backend prints its headers before reading the body; GitHttp holds them until the body is in, so a
    # timeout while the body streams in is still a proper 504.
    assert (status, body) == (504, b"git took longer than 2 s\n")
    assert 1.5 < elapsed < 8, elapsed
    assert srv.small.sessions == {}


def test_disconnect_kills_cgi(srv: Srv) -> None:
    sock = _partial_post(srv, "git")  # timeout=600 there: only the disconnect can end it quickly
    deadline = time.monotonic() + 5
    while not srv.git.sessions:
        assert time.monotonic() < deadline, "no push session appeared"
        time.sleep(0.01)
    sock.close()
    deadline = time.monotonic() + 5
    while srv.git.sessions:
        assert time.monotonic() < deadline, "the CGI outlived its client"
        time.sleep(0.01)


def test_busy_gate_answers_503_then_serves(srv: Srv) -> None:
    """With every git slot taken, a request waits its turn, and past the wait limit it is told why."""
    sock = _partial_post(srv, "one")  # holds the only slot: its CGI waits for the rest of the body
    try:
        deadline = time.monotonic() + 5
        while srv.one.gate.running < 1:
            assert time.monotonic() < deadline, "the partial push never took the slot"
            time.sleep(0.01)
        started = time.monotonic()
        out = srv.run("ls-remote", srv.url(mount="one"), check=False)
        assert out.returncode != 0
        assert "503" in out.stderr or "server busy" in out.stderr, out.stderr
        assert 0.9 < time.monotonic() - started < 8
        assert srv.one.gate.waiting == 0
    finally:
        sock.close()
    deadline = time.monotonic() + 5
    while srv.one.gate.running:
        assert time.monotonic() < deadline, "the slot was not given back when the client left"
        time.sleep(0.01)
    out = srv.run("ls-remote", srv.url(mount="one"))
    assert "refs/heads/main" in out.stdout
