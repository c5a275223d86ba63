"""Git's smart HTTP protocol, served by ``git http-backend`` run as a CGI under a raw ASGI app.

Mount it with ``app.mount("/git", GitHttp(...))``; clients then use ``http://host/git/<name>.git``.

Why raw ASGI and not a Starlette response class: ``StreamingResponse`` listens for disconnects by consuming
``receive()`` itself, which steals request-body chunks (large pushes then fail with "inflate: data stream
error"). Here one task owns ``receive()``: it feeds the body to the CGI's stdin chunk by chunk, then keeps
listening for a disconnect.

Rules:
  * Only the smart-protocol endpoints exist: ``GET info/refs?service=git-upload-pack|git-receive-pack``,
    ``POST git-upload-pack`` and ``POST git-receive-pack``. Dumb HTTP (``objects/...``, ``HEAD``, plain
    ``info/refs``) is 404; a wrong method on a smart endpoint is 405.
  * Authentication is HTTP Basic; the password is the agent token, the username is ignored. git sends its first
    request without credentials, so a missing or bad token is an ordinary 401 with ``WWW-Authenticate: Basic``.
    Every role may clone and fetch; pushing needs ``may_push(agent)``, else 403 with a plain-text reason that
    git prints as ``remote: ...``.
  * The CGI gets a built environment, never the server's own (which holds tokens and the database URL):
    the CGI variables, the request headers as ``HTTP_*`` (except credentials and ``Proxy``), ``PATH``, a
    neutral ``HOME``, no system config, ``http.receivepack``/``http.uploadpack`` set through
    ``GIT_CONFIG_COUNT``, and for a push the ``MERGEBOT_PUSH_ID``/``MERGEBOT_HOOK_URL``/``MERGEBOT_REPO``
    its hooks use to call back. Nothing goes through a shell.
  * A chunked request (no ``Content-Length``, as git sends large pushes) reaches the CGI without
    ``CONTENT_LENGTH``; stdin is closed at the end of the body. The body is counted: over ``max_body_bytes``
    is 413.
  * The CGI runs in its own process group; on client disconnect, timeout, or an oversized body the whole
    group is killed (``http-backend`` can spin at 100% CPU on an early end of input); if the server itself is
    killed, the kernel kills the backend (``backend_command``).
  * At most ``concurrency`` CGIs run at once; the others wait in ``gate`` (in arrival order, with pushes and
    verifiers' fetches given a 10 s head start over the agents' fetches), and one that waits longer than
    ``queue_timeout`` is answered 503 with ``Retry-After``.
  * A ``PushSession`` exists in ``sessions`` from just before a ``git-receive-pack`` POST's CGI starts until
    it has exited, whatever happens.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import binascii
import contextlib
import logging
import os
import re
import secrets
import shutil
import signal
import stat
import subprocess
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs

from starlette.types import Receive, Scope, Send

from mergebot.git.gate import Busy, Gate, default_limit
from mergebot.models import Agent

log = logging.getLogger(__name__)

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
SERVICES = ("git-upload-pack", "git-receive-pack")
REALM = "mergebot"
# Request headers never handed to the CGI: credentials would reach every hook's environment, and an
# ``HTTP_PROXY`` variable made from a client's ``Proxy`` header would redirect a hook's outbound calls.
_WITHHELD = frozenset({"authorization", "proxy-authorization", "proxy", "content-type", "content-length"})
_HEADER_NAME_RE = re.compile(r"^[A-Za-z0-9-]+$")
_MAX_CGI_HEADER_BYTES = 64 * 1024
_CHUNK = 64 * 1024


@dataclass
class PushSession:
    """Created for each ``git-receive-pack`` POST; alive while that CGI runs."""

    push_id: str
    repo: str
    agent: Agent


@dataclass
class _Route:
    name: str
    rest: str  # "info/refs", "git-upload-pack" or "git-receive-pack"
    push: bool  # the request is part of a push (receive-pack)


class _Abort(Exception):
    """The request ended early: ``status`` is what to answer when nothing has been sent yet (0: nothing)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class GitHttp:
    """Raw ASGI app serving the bare repositories under ``root`` (``<root>/<name>.git``)."""

    def __init__(self, root: Path, *,
                 authenticate: Callable[[str], Awaitable[Agent | None]],
                 may_push: Callable[[Agent], bool],
                 repo_exists: Callable[[str], bool],
                 hook_url: Callable[[], str],
                 max_body_bytes: int = 2 << 30,
                 timeout: float = 600.0,
                 concurrency: int = 0,
                 queue_timeout: float | None = None) -> None:
        self.root = Path(root)
        self.authenticate = authenticate
        self.may_push = may_push
        self.repo_exists = repo_exists
        self.hook_url = hook_url
        self.max_body_bytes = max_body_bytes
        self.timeout = timeout
        # At most this many git processes at once (0: a default for this machine); the rest wait in order,
        # pushes first (see gate.py).
        self.gate = Gate(concurrency or default_limit())
        self.queue_timeout = timeout if queue_timeout is None else queue_timeout
        self.sessions: dict[str, PushSession] = {}
        # An empty HOME: no user config or credentials of the server's account reach the CGI or its hooks.
        self._home = _neutral_home()
        self._backend = backend_command()

    # -- ASGI entry ---------------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":  # only when run on its own; a Starlette mount never forwards lifespan
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1000})
            return

        route = _parse_path(_route_path(scope))
        if route is None:
            await _plain(send, 404, "not found")
            return
        method = scope["method"]
        if route.rest == "info/refs":
            if method != "GET":
                await _plain(send, 405, "method not allowed", [(b"allow", b"GET")])
                return
            service = _service(scope)
            if service is None:  # the dumb protocol
                await _plain(send, 404, "not found: only the smart HTTP protocol is served")
                return
            route.push = service == "git-receive-pack"
        elif method != "POST":
            await _plain(send, 405, "method not allowed", [(b"allow", b"POST")])
            return

        headers = _headers(scope)
        agent = await self._agent(headers.get("authorization"))
        if agent is None:
            await _plain(send, 401, "authentication required: use an agent token as the password",
                         [(b"www-authenticate", f'Basic realm="{REALM}"'.encode())])
            return
        if not self.repo_exists(route.name):
            await _plain(send, 404, f"repository {route.name} not found")
            return
        if route.push and not self.may_push(agent):
            await _plain(send, 403, f"role {agent.role} may not push")
            return

        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length: int | None = None
        if not chunked and "content-length" in headers:
            try:
                length = int(headers["content-length"])
            except ValueError:
                await _plain(send, 400, "bad Content-Length")
                return
            if length < 0:
                await _plain(send, 400, "bad Content-Length")
                return
            if length > self.max_body_bytes:
                await _plain(send, 413, f"request body over {self.max_body_bytes} bytes")
                return

        env = self._env(scope, headers, route, agent, length)
        try:
            # pushes and the verifiers' fetches first: the queue waits on both
            async with self.gate.slot(ahead=route.push or agent.role == "verifier", timeout=self.queue_timeout):
                session: PushSession | None = None
                if route.push and route.rest == "git-receive-pack":
                    session = PushSession(push_id=secrets.token_urlsafe(24), repo=route.name, agent=agent)
                    env["MERGEBOT_PUSH_ID"] = session.push_id
                    env["MERGEBOT_HOOK_URL"] = self.hook_url()
                    env["MERGEBOT_REPO"] = route.name
                    self.sessions[session.push_id] = session
                try:
                    await self._run_cgi(env, route, receive, send, session)
                finally:
                    if session is not None:
                        self.sessions.pop(session.push_id, None)
        except Busy as e:
            await _plain(send, 503, f"server busy: {e}; try again", [(b"retry-after", b"5")])

    # -- pieces ---------------------------------------------------------------------------------------------

    async def _agent(self, authorization: str | None) -> Agent | None:
        if not authorization:
            return None
        scheme, _, value = authorization.strip().partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        _user, sep, password = decoded.partition(":")
        if not sep or not password:
            return None
        return await self.authenticate(password)

    def _env(self, scope: Scope, headers: dict[str, str], route: _Route, agent: Agent,
             length: int | None) -> dict[str, str]:
        client = scope.get("client")
        env = {
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": f"HTTP/{scope.get('http_version', '1.1')}",
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": f"/{route.name}.git/{route.rest}",
            "QUERY_STRING": scope.get("query_string", b"").decode("latin-1"),
            "REQUEST_METHOD": scope["method"],
            "REMOTE_USER": agent.name,
            "REMOTE_ADDR": str(client[0]) if client else "",
            "PATH": os.environ.get("PATH", os.defpath),
            "HOME": self._home,
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_COUNT": "2",
            "GIT_CONFIG_KEY_0": "http.receivepack",
            "GIT_CONFIG_VALUE_0": "true" if route.push else "false",
            "GIT_CONFIG_KEY_1": "http.uploadpack",
            "GIT_CONFIG_VALUE_1": "true",
        }
        if "content-type" in headers:
            env["CONTENT_TYPE"] = headers["content-type"]
        if length is not None:
            env["CONTENT_LENGTH"] = str(length)
        for name, value in headers.items():
            if name in _WITHHELD or not _HEADER_NAME_RE.match(name):
                continue
            env["HTTP_" + name.upper().replace("-", "_")] = value
        return env

    async def _run_cgi(self, env: dict[str, str], route: _Route, receive: Receive, send: Send,
                       session: PushSession | None) -> None:
        proc = await asyncio.create_subprocess_exec(
            *self._backend, env=env, cwd=self._home, start_new_session=True,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        ex = _Exchange(proc, send)
        feeder = asyncio.create_task(self._feed(ex, receive))
        errors = asyncio.create_task(_log_stderr(proc, route.name))
        try:
            async with asyncio.timeout(self.timeout):
                await ex.relay()
                await proc.wait()
        except TimeoutError:
            ex.abort(504, f"git took longer than {self.timeout:g} s")
        except _Abort as e:
            ex.abort(e.status, e.message)
        finally:
            feeder.cancel()
            if proc.returncode is None:
                _kill_group(proc)
            await asyncio.gather(feeder, return_exceptions=True)
            await proc.wait()
            # The session ends with the CGI, before the client hears the end of the answer: once a push
            # has finished for git, its session is gone.
            if session is not None:
                self.sessions.pop(session.push_id, None)
            try:
                await asyncio.wait_for(errors, 5)
            except TimeoutError:
                log.warning("git %s: stderr still open after exit", route.name)
        if ex.aborted is not None:
            reason = ex.aborted
            log.warning("git %s %s: %s (exit %s)", route.name, route.rest, reason.message, proc.returncode)
            if not ex.started and reason.status:
                await _plain(send, reason.status, reason.message)
            # Otherwise returning without finishing the body makes the server drop the connection, so the
            # client sees a failed transfer rather than a short, seemingly complete one.
            return
        if proc.returncode:
            log.warning("git http-backend for %s %s exited %s", route.name, route.rest, proc.returncode)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _feed(self, ex: _Exchange, receive: Receive) -> None:
        """Copy the request body to the CGI's stdin, then keep watching for the client going away."""
        stdin = ex.proc.stdin
        assert stdin is not None
        seen = 0
        writable = True
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                ex.abort(0, "client disconnected")
                return
            if message["type"] != "http.request":
                continue
            chunk: bytes = message.get("body", b"")
            more = bool(message.get("more_body", False))
            seen += len(chunk)
            if seen > self.max_body_bytes:
                ex.abort(413, f"request body over {self.max_body_bytes} bytes")
                return
            if chunk and writable:
                try:
                    stdin.write(chunk)
                    await stdin.drain()
                except (BrokenPipeError, ConnectionResetError):
                    writable = False  # the CGI stopped reading; its answer says why
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            stdin.close()
        ex.body_done.set()
        # The body is complete: the next message only comes when the client leaves or the response is done.
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                ex.abort(0, "client disconnected")
                return


def backend_command() -> list[str]:
    """How to start ``git http-backend`` so that it dies with this process, even by SIGKILL.

    ``git http-backend`` is a wrapper that runs ``git-http-backend`` as its child, out of reach of any signal
    we send it; and a SIGKILLed server cleans nothing up, so a backend cut off mid-request was left spinning
    at 100% CPU (found by the drills). The backend is run directly, and through util-linux's ``setpriv
    --pdeathsig KILL`` when it is there, which asks the kernel to kill it when its parent dies. Its own
    children (``receive-pack``, ``upload-pack``) then see their input end and exit."""
    exec_path = subprocess.run(["git", "--exec-path"], capture_output=True, text=True, check=False).stdout.strip()
    backend = Path(exec_path) / "git-http-backend"
    cmd = [str(backend)] if exec_path and os.access(backend, os.X_OK) else ["git", "http-backend"]
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--", *cmd] if setpriv else cmd


class _Exchange:
    """One CGI run: its process, what has been sent, and whether (and why) it was cut short."""

    def __init__(self, proc: asyncio.subprocess.Process, send: Send) -> None:
        self.proc = proc
        self.send = send
        self.body_done = asyncio.Event()
        self.started = False
        self.aborted: _Abort | None = None

    def abort(self, status: int, message: str) -> None:
        if self.aborted is None:
            self.aborted = _Abort(status, message)
        _kill_group(self.proc)

    async def relay(self) -> None:
        """Parse the CGI's header block, answer with it, then stream stdout as it comes (all but the end)."""
        stdout = self.proc.stdout
        assert stdout is not None
        buf = bytearray()
        while True:
            end, sep = _header_end(buf)
            if end >= 0:
                break
            if len(buf) > _MAX_CGI_HEADER_BYTES:
                raise _Abort(502, "git http-backend sent a header block that is too long")
            chunk = await stdout.read(_CHUNK)
            if not chunk:
                if self.aborted is None:  # the CGI died without answering
                    await self.proc.wait()
                    raise _Abort(502, f"git http-backend answered nothing (exit {self.proc.returncode})")
                return
            buf += chunk
        status, headers = _parse_cgi_headers(bytes(buf[:end]))
        first = bytes(buf[end + sep:])
        # http-backend prints its headers before it reads the request. Hold them until the request body is in
        # (or the CGI says more), so that an oversized body, a timeout or a disconnect while the body streams
        # in still gets a real status instead of a cut-off 200.
        if not first and not self.body_done.is_set():
            first = await self._output_or_body_done(stdout)
        if self.aborted is not None:
            return
        self.started = True
        await self.send({"type": "http.response.start", "status": status, "headers": headers})
        if first:
            await self.send({"type": "http.response.body", "body": first, "more_body": True})
        while chunk := await stdout.read(_CHUNK):
            if self.aborted is not None:
                return
            await self.send({"type": "http.response.body", "body": chunk, "more_body": True})

    async def _output_or_body_done(self, stdout: asyncio.StreamReader) -> bytes:
        """Wait for the CGI's next output or the end of the request body, whichever comes first."""
        read = asyncio.ensure_future(stdout.read(_CHUNK))
        body_done = asyncio.ensure_future(self.body_done.wait())
        try:
            await asyncio.wait({read, body_done}, return_when=asyncio.FIRST_COMPLETED)
            if not read.done():
                read.cancel()
                await asyncio.wait({read})  # a StreamReader allows one pending read: let this one finish
        finally:
            body_done.cancel()
            read.cancel()
        out = b"" if read.cancelled() else read.result()
        if not out and not self.body_done.is_set():
            # The end of output is not the end of the answer while the CGI still runs: http-backend hands its
            # stdout to receive-pack, which can finish before a child still copying the request body does.
            waits = {asyncio.ensure_future(self.proc.wait()), asyncio.ensure_future(self.body_done.wait())}
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
        return out


def _header_end(buf: bytearray) -> tuple[int, int]:
    crlf, lf = buf.find(b"\r\n\r\n"), buf.find(b"\n\n")
    if crlf >= 0 and (lf < 0 or crlf < lf):
        return crlf, 4
    if lf >= 0:
        return lf, 2
    return -1, 0


def _parse_cgi_headers(block: bytes) -> tuple[int, list[tuple[bytes, bytes]]]:
    status = 0
    headers: list[tuple[bytes, bytes]] = []
    has_location = False
    for raw in block.split(b"\n"):
        line = raw.rstrip(b"\r")
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        name, value = name.strip().lower(), value.strip()
        if name == b"status":
            with contextlib.suppress(ValueError, IndexError):
                status = int(value.split()[0])
            continue
        if name == b"location":
            has_location = True
        headers.append((name, value))
    if not 100 <= status <= 599:
        status = 302 if has_location else 200
    return status, headers


def _route_path(scope: Scope) -> str:
    """The path below the mount point. Starlette's ``Mount`` keeps the full ``path`` and appends the mount
    prefix to ``root_path``, so the prefix has to be cut here (as ``starlette._utils.get_route_path`` does)."""
    path: str = scope["path"]
    root_path: str = scope.get("root_path", "")
    if root_path and path.startswith(root_path):
        if path == root_path:
            return ""
        if path[len(root_path)] == "/":
            return path[len(root_path):]
    return path


def _parse_path(path: str) -> _Route | None:
    parts = path.split("/")
    if len(parts) < 3 or parts[0] != "" or not parts[1].endswith(".git"):
        return None
    name = parts[1][: -len(".git")]
    if not NAME_RE.fullmatch(name) or ".." in name:  # fullmatch: "$" would let "demo\n" through
        return None
    rest = "/".join(parts[2:])
    if rest == "info/refs":
        return _Route(name, rest, False)
    if rest in SERVICES:
        return _Route(name, rest, rest == "git-receive-pack")
    return None


def _service(scope: Scope) -> str | None:
    raw: bytes = scope.get("query_string", b"")
    values = parse_qs(raw.decode("latin-1")).get("service", [])
    if len(values) == 1 and values[0] in SERVICES:
        return values[0]
    return None


def _headers(scope: Scope) -> dict[str, str]:
    headers: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers", []):
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return headers


def _neutral_home() -> str:
    """An empty directory for the CGI's HOME: one per user, reused (a server killed with SIGKILL leaves no
    temporary directory behind); a private temporary one if that path is not safely ours."""
    path = Path(tempfile.gettempdir()) / f"mergebot-git-home-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    try:
        st = path.lstat()
    except OSError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022:
        return str(path)
    home = tempfile.mkdtemp(prefix="mergebot-git-home-")
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    return home


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    """Kill the CGI and everything it started (upload-pack, receive-pack, hooks)."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


async def _log_stderr(proc: asyncio.subprocess.Process, repo: str) -> None:
    """Drain the CGI's stderr (a full pipe would block it) and log the start of it."""
    stderr = proc.stderr
    assert stderr is not None
    logged = 0
    while chunk := await stderr.read(_CHUNK):
        if logged < 8192:
            text = chunk[: 8192 - logged].decode("utf-8", "replace").rstrip()
            logged += len(chunk)
            for line in text.splitlines():
                log.warning("git %s: %s", repo, line)


async def _plain(send: Send, status: int, text: str, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    body = (text + "\n").encode()
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
               *(extra or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
