"""The small git and HTTP moves every drill makes, and the slow link of the lease race.

Git runs as the real ``git`` binary with a fixed identity and no terminal prompt; a server is reached over HTTP
with the token as the Basic password (``basic_header``). ``retry`` waits out a server that gives no answer
(restarting, unreachable, or 503 while its database is away) and raises any other refusal. ``push_head`` tells
apart a push git accepted, one a hook or git refused, and one that got no answer. ``HoldingProxy`` holds every
``git-receive-pack`` POST until released: a push under way while its pusher's lease runs out.
"""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx

from mergebot.client import ApiError

T = TypeVar("T")


def basic_header(token: str) -> str:
    return "Authorization: Basic " + base64.b64encode(f"drill:{token}".encode()).decode()


def _git(args: Sequence[str], cwd: Path | None = None, *, check: bool = True, timeout: float = 300,
         env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "GIT_TERMINAL_PROMPT": "0", **(env or {})}
    out = subprocess.run(["git", "-c", "user.name=Mergebot Drill", "-c", "user.email=drill@mergebot.invalid", *args],
                         cwd=cwd, capture_output=True, text=True, env=full, check=False, timeout=timeout)
    if check and out.returncode != 0:
        raise RuntimeError(f"git {' '.join(args[:3])} failed: {out.stderr.strip()[-2000:]}")
    return out


def retry(fn: Callable[[], T], *, until: float, pause: float = 0.3) -> T:
    """Call ``fn`` until it answers: a server that is restarting or whose database is away (503) is waited for, and
    a claim held back for a full queue (429 ``capacity``) is made again after the ``retry_after`` it names; any
    other refusal is raised."""
    while True:
        try:
            return fn()
        except (httpx.HTTPError, ApiError) as e:
            if isinstance(e, ApiError) and e.status == 429 and e.code == "capacity" and time.monotonic() < until:
                time.sleep(min(5.0, float((e.body.get("error") or {}).get("retry_after") or 1)))
                continue
            if isinstance(e, ApiError) and e.status < 500:
                raise
            if time.monotonic() > until:
                raise
            time.sleep(pause)


def push_head(wt: Path, branch: str, *, remote: str = "origin", timeout: float = 300) -> tuple[str, str]:
    """``git push`` HEAD to ``branch``: ("accepted" | "refused" | "failed", what git and the bot said)."""
    try:
        out = _git(["push", "--porcelain", "--force", remote, f"HEAD:refs/heads/{branch}"], wt, check=False,
                   timeout=timeout)
    except subprocess.TimeoutExpired:
        return "failed", f"git push took longer than {timeout:g} s"
    said = "\n".join(line for line in (out.stdout + out.stderr).splitlines() if line.strip())
    if out.returncode == 0:
        return "accepted", said
    if "[remote rejected]" in out.stdout or "[rejected]" in out.stdout:
        return "refused", said
    return "failed", said


def commit_file(wt: Path, path: str, text: str, message: str) -> str:
    (wt / path).parent.mkdir(parents=True, exist_ok=True)
    (wt / path).write_text(text)
    _git(["add", "--", path], wt)
    _git(["commit", "-q", "-m", message], wt)
    return _git(["rev-parse", "HEAD"], wt).stdout.strip()


class HoldingProxy:
    """A loopback TCP proxy in front of the bot that holds every ``git-receive-pack`` POST until ``release()``:
    a push that is under way (its pack on a slow link) while the pusher's lease runs out."""

    def __init__(self, target: str) -> None:
        parts = urlsplit(target)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 80)
        self._listen = socket.create_server(("127.0.0.1", 0))
        self.port = self._listen.getsockname()[1]
        self.url = urlunsplit((parts.scheme, f"127.0.0.1:{self.port}", "", "", ""))
        self.held = threading.Event()
        self.released = threading.Event()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="drill-proxy").start()

    def release(self) -> None:
        self.released.set()

    def close(self) -> None:
        self._closed = True
        self.released.set()
        with contextlib.suppress(OSError):
            self._listen.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listen.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=30)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, outbound: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if outbound and not self.released.is_set() and b"POST " in data and b"git-receive-pack" in data:
                    self.held.set()
                    self.released.wait(600)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
