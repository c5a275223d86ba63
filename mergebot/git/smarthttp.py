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
    killed, the kernel kills the backend (``mergebot.git.cgi``).
  * At most ``concurrency`` CGIs run at once; the others wait in ``gate`` (in arrival order, with pushes and
    verifiers' fetches given a 10 s head start over the agents' fetches), and one that waits longer than
    ``queue_timeout`` is answered 503 with ``Retry-After``.
  * A ``PushSession`` exists in ``sessions`` from just before a ``git-receive-pack`` POST's CGI starts until
    it has exited, whatever happens.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import os
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs

from starlette.types import Receive, Scope, Send

from mergebot import messages as say
from mergebot.git import cgi
from mergebot.git.gate import Busy, Gate, default_limit
from mergebot.models import VERDICT_HEADER, Agent

log = logging.getLogger(__name__)

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
SERVICES = ("git-upload-pack", "git-receive-pack")
REALM = "mergebot"
# Request headers never handed to the CGI: credentials would reach every hook's environment, and an
# ``HTTP_PROXY`` variable made from a client's ``Proxy`` header would redirect a hook's outbound calls.
_WITHHELD = frozenset({"authorization", "proxy-authorization", "proxy", "content-type", "content-length"})
_HEADER_NAME_RE = re.compile(r"^[A-Za-z0-9-]+$")


@dataclass
class PushSession:
    """Created for each ``git-receive-pack`` POST; alive while that CGI runs."""

    push_id: str
    repo: str
    agent: Agent
    started: float = field(default_factory=time.time)  # when the push's request arrived (its candidates' pushed_at)
    verdicts: bool = False  # the pusher asked for the machine-readable verdict lines (``models.VERDICT_HEADER``)


@dataclass
class _Route:
    name: str
    rest: str  # "info/refs", "git-upload-pack" or "git-receive-pack"
    push: bool  # the request is part of a push (receive-pack)


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
        self._home = cgi.neutral_home()
        self._backend = cgi.backend_command()

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
            await _plain(send, 403, say.role_may_not(agent.role, "push"))
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
                    session = PushSession(push_id=secrets.token_urlsafe(24), repo=route.name, agent=agent,
                                          verdicts=headers.get(VERDICT_HEADER.lower(), "").strip() == "1")
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
        ex = cgi.Exchange(proc, send)
        feeder = asyncio.create_task(self._feed(ex, receive))
        errors = asyncio.create_task(_log_stderr(proc, route.name))
        try:
            async with asyncio.timeout(self.timeout):
                await ex.relay()
                await proc.wait()
        except TimeoutError:
            ex.abort(504, f"git took longer than {self.timeout:g} s")
        except cgi.Abort as e:
            ex.abort(e.status, e.message)
        finally:
            feeder.cancel()
            if proc.returncode is None:
                cgi.kill_group(proc)
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

    async def _feed(self, ex: cgi.Exchange, receive: Receive) -> None:
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


async def _log_stderr(proc: asyncio.subprocess.Process, repo: str) -> None:
    """Drain the CGI's stderr (a full pipe would block it) and log the start of it."""
    stderr = proc.stderr
    assert stderr is not None
    logged = 0
    while chunk := await stderr.read(cgi.CHUNK):
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
