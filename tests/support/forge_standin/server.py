"""The stand-in server: GitHub (at the root) and Gitea (under ``/api/v1``) on 127.0.0.1, in a background thread.

It composes the routes of each forge (``github.py``, ``gitea.py``, ``comments.py``) over one shared state
(``core.py``), records every request, injects the faults a test asks for (failures, stalls, GitHub's rate
limit), checks credentials as each forge does (a token; for the App's routes a JWT signed with the App's key),
and serves the real bare repository over git's smart HTTP as GitHub does (Basic ``x-access-token:TOKEN``).
The tests talk to it through the methods under "test-facing API".
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.forge_standin.comments import CommentRoutes
from tests.support.forge_standin.core import Handler, PostedStatus, Pull, RecordedRequest, utc_now
from tests.support.forge_standin.gitea import GiteaRoutes
from tests.support.forge_standin.github import GitHubRoutes
from tests.support.forge_standin.github_schema import CHECK_RUNS, GITHUB_DOCS, INSTALLATION


class ForgeStandin(GitHubRoutes, GiteaRoutes, CommentRoutes):
    """GitHub (at the root) and Gitea (under ``/api/v1``) REST stand-in on 127.0.0.1, in a background thread;
    ``ForgeStandin(token, bare_repo, login=..., app=GitHubApp(...))``."""

    # ---- test-facing API

    @property
    def minted(self) -> list[str]:
        """The installation tokens minted for the App, oldest first."""
        with self._lock:
            return list(self._minted)

    def revoke_tokens(self) -> None:
        """Revoke every installation token minted so far (GitHub answers 401 to them from now on)."""
        with self._lock:
            self._minted = dict.fromkeys(self._minted, False)

    def comments(self, number: int) -> list[dict[str, Any]]:
        """The comments on pull request ``number`` (either forge), oldest first: body and how often edited."""
        with self._lock:
            return [dict(c, id=i) for i, c in self._comments.items() if c["number"] == number]

    def check_runs(self, head_sha: str | None = None) -> dict[int, list[dict[str, Any]]]:
        """Check runs by id (of ``head_sha``, if given): every body each was sent, the create first."""
        with self._lock:
            return {i: list(b) for i, b in self._check_runs.items()
                    if head_sha is None or b[0].get("head_sha") == head_sha}

    @property
    def git_requests(self) -> list[tuple[str, str | None]]:
        """Each git request over HTTP: the service and path, and the token its Basic credentials carried."""
        with self._lock:
            return list(self._git)

    def add_pull(self, owner: str, repo: str, number: int, head_ref: str, head_sha: str, base_ref: str) -> None:
        with self._lock:
            self._pulls[(owner, repo, number)] = Pull(head_ref, head_sha, base_ref, created_at=utc_now())

    def statuses(self, sha: str) -> list[PostedStatus]:
        """Statuses posted for ``sha`` (either forge), oldest first."""
        with self._lock:
            return [s for s in self._statuses if s.sha == sha]

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def fail_next(self, n: int, status: int = 502) -> None:
        """Answer the next ``n`` requests (after recording them) with ``status`` and an error body."""
        with self._lock:
            self._faults.fail.extend([status] * n)

    def rate_limit_next(self, n: int, reset_in: float) -> int:
        """Answer the next ``n`` GitHub requests as GitHub does past a rate limit: 403, ``X-RateLimit-Remaining: 0``
        and ``X-RateLimit-Reset``, the whole second (epoch) at least ``reset_in`` from now, which is returned."""
        reset = int(time.time() + reset_in) + 1
        with self._lock:
            self._faults.limited.extend([float(reset)] * n)
        return reset

    def stall_next(self, n: int, seconds: float) -> None:
        """Wait ``seconds`` before answering each of the next ``n`` requests (to provoke client timeouts)."""
        with self._lock:
            self._faults.stall.extend([seconds] * n)

    # ---- lifecycle

    def __enter__(self) -> ForgeStandin:
        self.start()
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        config = uvicorn.Config(self._app(), log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        for _ in range(500):
            if self._server.started:
                return
            if not self._thread.is_alive():
                break
            threading.Event().wait(0.01)
        raise RuntimeError("forge stand-in did not start")

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._server.force_exit = True  # don't wait for keep-alive connections or stalled handlers
            self._thread.join(timeout=10)
        self._server = self._thread = None

    # ---- plumbing

    def _app(self) -> Starlette:
        gh, gt = "github", "gitea"
        routes = [
            Route("/repos/{owner}/{repo}", self._wrap(gh, self._gh_repo), methods=["GET"]),
            Route("/repos/{owner}/{repo}/statuses/{sha}", self._wrap(gh, self._gh_create_status), methods=["POST"]),
            Route("/repos/{owner}/{repo}/commits/{ref}/statuses", self._wrap(gh, self._gh_list), methods=["GET"]),
            Route("/repos/{owner}/{repo}/commits/{ref}/status", self._wrap(gh, self._gh_combined), methods=["GET"]),
            Route("/repos/{owner}/{repo}/pulls/{number:int}", self._wrap(gh, self._gh_pull), methods=["GET"]),
            Route(INSTALLATION, self._wrap(gh, self._gh_installation, app_auth=True), methods=["GET"]),
            Route("/app/installations/{installation_id:int}/access_tokens",
                  self._wrap(gh, self._gh_access_token, app_auth=True), methods=["POST"]),
            Route(CHECK_RUNS, self._wrap(gh, self._gh_create_check_run), methods=["POST"]),
            Route("/repos/{owner}/{repo}/check-runs/{check_run_id:int}", self._wrap(gh, self._gh_update_check_run),
                  methods=["PATCH"]),
            *self._comment_routes(),
            Route("/{owner}/{repo}.git/{rest:path}", self._git_http, methods=["GET", "POST"]),
            Route("/api/v1/repos/{owner}/{repo}/statuses/{sha}", self._wrap(gt, self._gt_create), methods=["POST"]),
            Route("/api/v1/repos/{owner}/{repo}/statuses/{sha}", self._wrap(gt, self._gt_list), methods=["GET"]),
            Route("/api/v1/repos/{owner}/{repo}/pulls/{number:int}", self._wrap(gt, self._gt_pull), methods=["GET"]),
        ]
        return Starlette(routes=routes)

    def _comment_routes(self) -> list[Route]:
        """The issue-comment routes, the same on both forges: GitHub's at the root, Gitea's under ``/api/v1``."""
        return [Route(f"{root}/repos/{{owner}}/{{repo}}/issues/{path}", self._wrap(forge, handler), methods=[method])
                for forge, root in (("github", ""), ("gitea", "/api/v1"))
                for path, handler, method in (("{number:int}/comments", self._list_comments, "GET"),
                                              ("{number:int}/comments", self._create_comment, "POST"),
                                              ("comments/{comment_id:int}", self._edit_comment, "PATCH"))]

    def _wrap(self, forge: str, handler: Handler, *,
              app_auth: bool = False) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            raw = await request.body()
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            record = RecordedRequest(
                method=request.method,
                path=request.url.path,
                query=request.url.query,
                headers={k.lower(): v for k, v in request.headers.items()},
                json=body,
                at=time.time(),
            )
            with self._lock:
                self._requests.append(record)
                stall = self._faults.stall.pop(0) if self._faults.stall else 0.0
                fail = self._faults.fail.pop(0) if self._faults.fail else None
                limited = self._faults.limited.pop(0) if forge == "github" and self._faults.limited else None
            if limited is not None:
                body_out = {"message": "API rate limit exceeded for installation ID 777.",
                            "documentation_url": f"{GITHUB_DOCS}/overview/rate-limits-for-the-rest-api"}
                record.status = 403
                reset = str(int(limited))  # whole seconds, as GitHub sends them
                return JSONResponse(body_out, status_code=403, headers={
                    "X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": reset,
                    "X-RateLimit-Resource": "core"})
            if stall:
                await asyncio.sleep(stall)
            if fail is not None:
                response = self._error(forge, fail, "Server Error" if fail >= 500 else "Injected failure")
            elif not (self._app_authorized(request) if app_auth else self._authorized(request)):
                message = "Bad credentials" if forge == "github" else "invalid username, password or token"
                if app_auth:
                    message = "A JSON web token could not be decoded"
                response = self._error(forge, 401, message)
            else:
                response = await handler(request, body)
            record.status = response.status_code
            return response

        return endpoint

    def _authorized(self, request: Request) -> bool:
        scheme, _, credential = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() not in ("token", "bearer"):
            return False
        with self._lock:
            return credential == self.token or self._minted.get(credential, False)

    def _app_authorized(self, request: Request) -> bool:
        """A JWT signed with the App's key, issued by its id, for at most ten minutes (as GitHub checks it)."""
        import jwt

        scheme, _, credential = request.headers.get("authorization", "").partition(" ")
        if self.app is None or scheme.lower() != "bearer":
            return False
        try:
            claims = jwt.decode(credential, self.app.public_key, algorithms=["RS256"],
                                options={"require": ["iat", "exp", "iss"]})
        except jwt.PyJWTError:
            return False
        return bool(str(claims["iss"]) == str(self.app.app_id) and int(claims["exp"]) - int(claims["iat"]) <= 600)

    # ---- git over HTTP, as GitHub serves it: Basic credentials x-access-token:TOKEN, else 401

    async def _git_http(self, request: Request) -> Response:
        import base64

        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        token = None
        if scheme.lower() == "basic":
            user, _, secret = base64.b64decode(value).decode(errors="replace").partition(":")
            token = secret if user == "x-access-token" else None
        rest = request.path_params["rest"]
        with self._lock:
            self._git.append((f"{request.method} {rest} {request.url.query}".strip(), token))
            valid = token is not None and (token == self.token or self._minted.get(token, False))
        if not valid:
            return Response("Invalid username or token.\n", status_code=401,
                            headers={"WWW-Authenticate": 'Basic realm="GitHub"'})
        assert self.bare_repo is not None
        from mergebot.git import cgi

        env = {"PATH": "/usr/bin:/bin", "GIT_PROJECT_ROOT": str(self.bare_repo.parent), "GIT_HTTP_EXPORT_ALL": "1",
               "PATH_INFO": f"/{self.bare_repo.name}/{rest}", "REQUEST_METHOD": request.method,
               "QUERY_STRING": request.url.query, "CONTENT_TYPE": request.headers.get("content-type", ""),
               "REMOTE_USER": "x-access-token", "REMOTE_ADDR": "127.0.0.1", "HOME": cgi.neutral_home()}
        for header in ("content-encoding", "git-protocol"):
            if header in request.headers:
                env["HTTP_" + header.upper().replace("-", "_")] = request.headers[header]
        proc = await asyncio.create_subprocess_exec("git", "http-backend", env=env, stdin=subprocess.PIPE,
                                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, _ = await proc.communicate(await request.body())
        end, sep = cgi.header_end(bytearray(out))
        status, headers = cgi.parse_cgi_headers(out[:end])
        return Response(out[end + sep:], status_code=status,
                        headers={k.decode(): v.decode() for k, v in headers if k != b"content-length"})

    # ---- GitHub
