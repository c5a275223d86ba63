"""A local stand-in for the bits of GitHub's and Gitea's REST APIs that mergebot calls, on their real wire format.

GitHub responses are built from the documented examples in ``tests/forge_openapi/github_subset.json`` (extracted
from GitHub's published OpenAPI description, see ``tests/forge_openapi/extract.py``) with the relevant fields
filled in, so their shapes are GitHub's; :func:`validate_github_response` checks a body against the published
response schema. Gitea has no such package here: :data:`GITEA_SCHEMAS` is a small hand-kept JSON Schema of the
Gitea swagger definitions used (``CommitStatus``, ``User``, ``PullRequest``, ``APIError``, ``Comment``, and
``IssueCommentOption`` for the bot's comment requests, which are validated against it). No registry package this
machine reaches (PyPI, npm, Debian) carries Gitea's swagger itself, so these stay hand-written; npm's
``gitea-js`` 1.23.0 carries TypeScript types generated from it, and its ``CreateIssueCommentOption`` and
``EditIssueCommentOption`` (``body: string``, required) are what ``IssueCommentOption`` says.

A pull request registered with :meth:`ForgeStandin.add_pull` is reported merged (GitHub: ``state`` "closed",
``merged`` true) as soon as its head commit is an ancestor of, or equal to, the tip of its base branch in the
real bare repository the stand-in was given: that is how a forge closes a pull request whose commits were
pushed to the base branch.

Usage::

    with ForgeStandin(token="t", bare_repo=path) as forge:
        forge.add_pull("acme", "widgets", 7, head_ref="feature", head_sha=sha, base_ref="main")
        ...  # point a client at forge.url
        forge.statuses(sha), forge.requests, forge.fail_next(2, 502)
"""

from __future__ import annotations

import asyncio
import copy
import functools
import itertools
import json
import socket
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import jsonschema
import uvicorn
from jsonschema.protocols import Validator
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

SUBSET_PATH = Path(__file__).parents[2] / "forge_openapi" / "github_subset.json"
GITHUB_STATES = ("error", "failure", "pending", "success")
GITEA_STATES = ("pending", "success", "error", "failure", "warning")
GITHUB_DESCRIPTION_LIMIT = 140
GITHUB_DOCS = "https://docs.github.com/rest"
STATUS_DOCS = "https://docs.github.com/rest/commits/statuses#create-a-commit-status"

# Paths of the GitHub operations served, as written in the OpenAPI description.
REPO = "/repos/{owner}/{repo}"
CREATE_STATUS = "/repos/{owner}/{repo}/statuses/{sha}"
LIST_STATUSES = "/repos/{owner}/{repo}/commits/{ref}/statuses"
COMBINED_STATUS = "/repos/{owner}/{repo}/commits/{ref}/status"
PULL = "/repos/{owner}/{repo}/pulls/{pull_number}"
INSTALLATION = "/repos/{owner}/{repo}/installation"
ACCESS_TOKENS = "/app/installations/{installation_id}/access_tokens"
CHECK_RUNS = "/repos/{owner}/{repo}/check-runs"
CHECK_RUN = "/repos/{owner}/{repo}/check-runs/{check_run_id}"
ISSUE_COMMENTS = "/repos/{owner}/{repo}/issues/{issue_number}/comments"
ISSUE_COMMENT = "/repos/{owner}/{repo}/issues/comments/{comment_id}"

Json = Any

# --------------------------------------------------------------------------------------------- GitHub's OpenAPI


@functools.cache
def github_subset() -> dict[str, Any]:
    """The extracted subset of GitHub's OpenAPI description (parsed once)."""
    data: dict[str, Any] = json.loads(SUBSET_PATH.read_text())
    return data


def _deref(node: Json) -> Json:
    """Follow a top-level ``#/components/...`` reference of the subset (responses, examples)."""
    while isinstance(node, dict) and "$ref" in node:
        _, kind, name = node["$ref"].removeprefix("#/").split("/")
        node = github_subset()["components"][kind][name]
    return node


def _response_content(path: str, method: str, status: int) -> dict[str, Any]:
    response = _deref(github_subset()["paths"][path][method]["responses"][str(status)])
    content: dict[str, Any] = response["content"]["application/json"]
    return content


def github_example(path: str, method: str, status: int) -> Json:
    """A deep copy of the first documented example response of an operation."""
    examples = _response_content(path, method, status)["examples"]
    return copy.deepcopy(_deref(next(iter(examples.values())))["value"])


def openapi_to_json_schema(node: Json) -> Json:
    """Turn an OpenAPI 3.0 schema into JSON Schema: ``nullable: true`` becomes a ``null`` alternative."""
    if isinstance(node, list):
        return [openapi_to_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: v if k in ("example", "examples") else openapi_to_json_schema(v) for k, v in node.items()}
    if out.pop("nullable", False):
        if "type" in out:
            out["type"] = [out["type"], "null"]
            if "enum" in out and None not in out["enum"]:
                out["enum"] = [*out["enum"], None]
        else:
            out = {"anyOf": [{"type": "null"}, out]}
    return out


@functools.cache
def _converted_components() -> dict[str, Any]:
    components: dict[str, Any] = openapi_to_json_schema(github_subset()["components"])
    return components


def github_validator(schema: Json) -> Validator:
    """A validator for an OpenAPI schema of the subset; its ``#/components/...`` references resolve in the subset."""
    root = {"components": _converted_components(), "allOf": [openapi_to_json_schema(schema)]}
    cls = jsonschema.validators.validator_for({"$schema": "https://json-schema.org/draft/2020-12/schema"})
    validator: Validator = cls(root)
    return validator


def github_response_schema(path: str, method: str, status: int) -> Json:
    return _response_content(path, method, status)["schema"]


@functools.cache
def _response_validator(path: str, method: str, status: int) -> Validator:
    return github_validator(github_response_schema(path, method, status))


def validate_github_response(path: str, method: str, status: int, body: Json) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``body`` matches the published response schema."""
    _response_validator(path, method, status).validate(body)


def validate_github_error(status: int, body: Json) -> None:
    """GitHub's error bodies: 422 is a ``validation-error``, the others a ``basic-error``."""
    name = "validation-error" if status == 422 else "basic-error"
    github_validator({"$ref": f"#/components/schemas/{name}"}).validate(body)


def _github_request_schema(path: str, method: str) -> Json:
    return github_subset()["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]


# ------------------------------------------------------------------------------------------- Gitea's swagger

_GITEA_USER = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "login": {"type": "string"},
        "login_name": {"type": "string"},
        "full_name": {"type": "string"},
        "email": {"type": "string"},
        "avatar_url": {"type": "string"},
        "html_url": {"type": "string"},
        "language": {"type": "string"},
        "is_admin": {"type": "boolean"},
        "last_login": {"type": "string"},
        "created": {"type": "string"},
        "restricted": {"type": "boolean"},
        "active": {"type": "boolean"},
        "prohibit_login": {"type": "boolean"},
        "location": {"type": "string"},
        "website": {"type": "string"},
        "description": {"type": "string"},
        "visibility": {"type": "string"},
        "followers_count": {"type": "integer"},
        "following_count": {"type": "integer"},
        "starred_repos_count": {"type": "integer"},
        "username": {"type": "string"},
    },
}
_GITEA_BRANCH = {
    "type": "object",
    "properties": {
        "label": {"type": "string"},
        "ref": {"type": "string"},
        "sha": {"type": "string"},
        "repo_id": {"type": "integer"},
    },
}
# Gitea's swagger (templates/swagger/v1_json.tmpl) is Swagger 2.0 with no "required" lists; the stand-in's
# bodies always carry every property listed here, so the schemas below require them all.
GITEA_SCHEMAS: dict[str, dict[str, Any]] = {
    "User": _GITEA_USER,
    "CommitStatus": {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            # Gitea's CommitStatus carries the state in a field named "status" (CreateStatusOption calls it "state").
            "status": {"type": "string", "enum": list(GITEA_STATES)},
            "target_url": {"type": "string"},
            "description": {"type": "string"},
            "url": {"type": "string"},
            "context": {"type": "string"},
            "creator": _GITEA_USER,
            "created_at": {"type": "string", "format": "date-time"},
            "updated_at": {"type": "string", "format": "date-time"},
        },
    },
    "PullRequest": {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "url": {"type": "string"},
            "number": {"type": "integer"},
            "user": _GITEA_USER,
            "title": {"type": "string"},
            "body": {"type": "string"},
            "state": {"type": "string", "enum": ["open", "closed"]},
            "is_locked": {"type": "boolean"},
            "comments": {"type": "integer"},
            "html_url": {"type": "string"},
            "diff_url": {"type": "string"},
            "patch_url": {"type": "string"},
            "mergeable": {"type": "boolean"},
            "merged": {"type": "boolean"},
            "merged_at": {"type": ["string", "null"]},
            "merge_commit_sha": {"type": ["string", "null"]},
            "merged_by": {"anyOf": [{"type": "null"}, _GITEA_USER]},
            "base": _GITEA_BRANCH,
            "head": _GITEA_BRANCH,
            "merge_base": {"type": "string"},
            "created_at": {"type": "string"},
            "updated_at": {"type": "string"},
            "closed_at": {"type": ["string", "null"]},
        },
    },
    "APIError": {"type": "object", "properties": {"message": {"type": "string"}, "url": {"type": "string"}}},
    # The bot's requests for the pull request's comment: CreateIssueCommentOption and EditIssueCommentOption (both
    # just "body", required), and the Comment they answer with.
    "IssueCommentOption": {"type": "object", "properties": {"body": {"type": "string"}}},
    "Comment": {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "body": {"type": "string"},
            "user": _GITEA_USER,
            "html_url": {"type": "string"},
            "issue_url": {"type": "string"},
            "created_at": {"type": "string"},
            "updated_at": {"type": "string"},
        },
    },
}


def validate_gitea(name: str, body: Json) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``body`` is a Gitea ``name`` object with every property."""

    def strict(schema: dict[str, Any]) -> dict[str, Any]:
        if "properties" not in schema:
            return schema
        props = {k: strict(v) if isinstance(v, dict) else v for k, v in schema["properties"].items()}
        return {**schema, "properties": props, "required": sorted(props)}

    jsonschema.Draft202012Validator(strict(GITEA_SCHEMAS[name])).validate(body)


# ------------------------------------------------------------------------------------------------ the server


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: str
    headers: dict[str, str]  # lower-case names
    json: Json
    status: int | None = None  # the status the stand-in answered with
    at: float = 0.0  # when it came (time.time())


@dataclass(frozen=True)
class PostedStatus:
    forge: str  # "github" | "gitea"
    owner: str
    repo: str
    sha: str
    id: int
    state: str
    description: str | None
    target_url: str | None
    context: str
    created_at: str


@dataclass
class _Pull:
    head_ref: str
    head_sha: str
    base_ref: str
    created_at: str
    merged_at: str | None = None


@dataclass
class _Faults:
    fail: list[int] = field(default_factory=list)  # statuses for the next requests
    stall: list[float] = field(default_factory=list)  # seconds to wait before answering the next requests
    limited: list[float] = field(default_factory=list)  # the next requests: GitHub's rate limit, reset in N s


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _git(bare_repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(bare_repo), *args], capture_output=True, text=True, check=False)


Handler = Callable[[Request, Json], Awaitable[Response]]


@dataclass(frozen=True)
class GitHubApp:
    """The App the stand-in authenticates: its id, the public half of its key, its one installation."""

    app_id: int
    public_key: str
    installation_id: int = 4242
    token_lifetime_s: float = 3600.0


class ForgeStandin:
    """GitHub (at the root) and Gitea (under ``/api/v1``) REST stand-in on 127.0.0.1, in a background thread."""

    def __init__(self, token: str, bare_repo: Path | None = None, *, login: str = "mergebot-bot",
                 app: GitHubApp | None = None) -> None:
        self.token = token
        self.app = app
        self.bare_repo = bare_repo
        self.login = login
        self.url = ""
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._statuses: list[PostedStatus] = []
        self._pulls: dict[tuple[str, str, int], _Pull] = {}
        self._faults = _Faults()
        self._ids = itertools.count(1)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._minted: dict[str, bool] = {}  # installation tokens minted: token -> still valid
        self._git: list[tuple[str, str | None]] = []  # git over HTTP: (what, the token it carried)
        self._check_runs: dict[int, list[dict[str, Any]]] = {}  # id -> every body it was sent (created first)
        self._comments: dict[int, dict[str, Any]] = {}  # id -> forge, owner, repo, number, body, edits

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
            self._pulls[(owner, repo, number)] = _Pull(head_ref, head_sha, base_ref, created_at=_now())

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
            Route("/repos/{owner}/{repo}/issues/{number:int}/comments", self._wrap(gh, self._list_comments),
                  methods=["GET"]),
            Route("/repos/{owner}/{repo}/issues/{number:int}/comments", self._wrap(gh, self._create_comment),
                  methods=["POST"]),
            Route("/repos/{owner}/{repo}/issues/comments/{comment_id:int}", self._wrap(gh, self._edit_comment),
                  methods=["PATCH"]),
            Route("/api/v1/repos/{owner}/{repo}/issues/{number:int}/comments", self._wrap(gt, self._list_comments),
                  methods=["GET"]),
            Route("/api/v1/repos/{owner}/{repo}/issues/{number:int}/comments", self._wrap(gt, self._create_comment),
                  methods=["POST"]),
            Route("/api/v1/repos/{owner}/{repo}/issues/comments/{comment_id:int}",
                  self._wrap(gt, self._edit_comment), methods=["PATCH"]),
            Route("/{owner}/{repo}.git/{rest:path}", self._git_http, methods=["GET", "POST"]),
            Route("/api/v1/repos/{owner}/{repo}/statuses/{sha}", self._wrap(gt, self._gt_create), methods=["POST"]),
            Route("/api/v1/repos/{owner}/{repo}/statuses/{sha}", self._wrap(gt, self._gt_list), methods=["GET"]),
            Route("/api/v1/repos/{owner}/{repo}/pulls/{number:int}", self._wrap(gt, self._gt_pull), methods=["GET"]),
        ]
        return Starlette(routes=routes)

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

    def _error(self, forge: str, status: int, message: str, errors: list[dict[str, Any]] | None = None) -> Response:
        body: dict[str, Any]
        if forge == "github":
            body = {"message": message, "documentation_url": GITHUB_DOCS if status != 422 else STATUS_DOCS}
            if errors is not None:
                body["errors"] = errors
            body["status"] = str(status)
        else:
            body = {"message": message, "url": f"{self.url}/api/swagger"}
        return self._json(forge, body, status)

    def _json(self, forge: str, body: Json, status: int = 200, headers: dict[str, str] | None = None) -> Response:
        extra = dict(headers or {})
        if forge == "github":
            extra |= {
                "X-GitHub-Media-Type": "github.v3; format=json",
                "X-GitHub-Request-Id": f"STANDIN:{len(self._requests)}",
                "X-RateLimit-Limit": "5000",
                "X-RateLimit-Remaining": "4999",
                "X-RateLimit-Reset": "4102444800",
                "X-RateLimit-Resource": "core",
            }
        return JSONResponse(body, status_code=status, headers=extra)

    def _localize(self, value: Json, owner: str, repo: str) -> Json:
        """Rewrite the example's api.github.com URLs and octocat/Hello-World names to this stand-in and repo."""
        if isinstance(value, dict):
            return {k: self._localize(v, owner, repo) for k, v in value.items()}
        if isinstance(value, list):
            return [self._localize(v, owner, repo) for v in value]
        if isinstance(value, str):
            return value.replace("https://api.github.com", self.url).replace("octocat/Hello-World", f"{owner}/{repo}")
        return value

    def _default_branch(self) -> str:
        if self.bare_repo is not None:
            head = _git(self.bare_repo, "symbolic-ref", "--short", "HEAD")
            if head.returncode == 0 and head.stdout.strip():
                return head.stdout.strip()
        return "main"

    def _branch_tip(self, branch: str) -> str | None:
        if self.bare_repo is None:
            return None
        tip = _git(self.bare_repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}")
        return tip.stdout.strip() if tip.returncode == 0 else None

    def _pull_state(self, key: tuple[str, str, int]) -> tuple[_Pull, str | None] | None:
        """The registered pull and the tip of its base branch, refreshing whether it is merged."""
        with self._lock:
            pull = self._pulls.get(key)
        if pull is None:
            return None
        base_tip = self._branch_tip(pull.base_ref)
        merged = False
        if base_tip is not None and self.bare_repo is not None:
            check = _git(self.bare_repo, "merge-base", "--is-ancestor", pull.head_sha, base_tip)
            merged = check.returncode == 0
        with self._lock:
            if merged and pull.merged_at is None:
                pull.merged_at = _now()
            elif not merged:
                pull.merged_at = None
        return pull, base_tip

    @staticmethod
    def _params(request: Request) -> tuple[str, str]:
        return request.path_params["owner"], request.path_params["repo"]

    # ---- GitHub App authentication

    async def _gh_installation(self, request: Request, body: Json) -> Response:
        owner, repo = self._params(request)
        assert self.app is not None
        data = self._localize(github_example(INSTALLATION, "get", 200), owner, repo)
        data |= {"id": self.app.installation_id, "app_id": self.app.app_id, "target_type": "Organization"}
        data["account"] = self._gh_user(data["account"]) | {"login": owner}
        return self._json("github", data)

    async def _gh_access_token(self, request: Request, body: Json) -> Response:
        assert self.app is not None
        if request.path_params["installation_id"] != self.app.installation_id:
            return self._error("github", 404, "Not Found")
        token = f"ghs_standin{next(self._ids):04d}{'x' * 24}"
        with self._lock:
            self._minted[token] = True
        expires = datetime.fromtimestamp(datetime.now(UTC).timestamp() + self.app.token_lifetime_s, UTC)
        data = github_example(ACCESS_TOKENS, "post", 201) | {"token": token,
                                                              "expires_at": expires.strftime("%Y-%m-%dT%H:%M:%SZ")}
        data.pop("repositories", None)  # all of the installation's repositories, as with no list asked for
        data["repository_selection"] = "all"
        return self._json("github", data, 201)

    # ---- check runs: an App's installation token only, bodies as GitHub's description has them

    def _check_run_refused(self, request: Request, body: Json, path: str, method: str) -> Response | None:
        credential = request.headers.get("authorization", "").partition(" ")[2]
        with self._lock:
            app_token = self._minted.get(credential, False)
        if not app_token:
            return self._error("github", 403, "You must authenticate via a GitHub App.")
        if not isinstance(body, dict):
            return self._error("github", 400, "Problems parsing JSON")
        problem = jsonschema.exceptions.best_match(
            github_validator(_github_request_schema(path, method)).iter_errors(body))
        if problem is not None:
            return self._error("github", 422, f"Invalid request.\n\n{problem.message}")
        return None

    def _check_run_body(self, owner: str, repo: str, check_run_id: int) -> dict[str, Any]:
        sent = self._check_runs[check_run_id]
        merged: dict[str, Any] = {}
        for b in sent:  # an update changes what it names, as GitHub's does
            merged |= {k: v for k, v in b.items() if k != "output"}
            if "output" in b:
                merged["output"] = b["output"]
        data = self._localize(github_example(CHECK_RUNS, "post", 201), owner, repo)
        output = merged.get("output") or {}
        data |= {"id": check_run_id, "head_sha": sent[0]["head_sha"], "name": merged.get("name", data["name"]),
                 "status": merged.get("status", "queued"), "conclusion": merged.get("conclusion"),
                 "external_id": merged.get("external_id", ""), "details_url": merged.get("details_url"),
                 "started_at": data.get("started_at"),
                 "completed_at": _now() if merged.get("status") == "completed" else None}
        data["output"] = data["output"] | {"title": output.get("title"), "summary": output.get("summary"),
                                           "text": output.get("text"),
                                           "annotations_count": len(output.get("annotations") or [])}
        return data

    async def _gh_create_check_run(self, request: Request, body: Json) -> Response:
        owner, repo = self._params(request)
        refused = self._check_run_refused(request, body, CHECK_RUNS, "post")
        if refused is not None:
            return refused
        if self.bare_repo is not None and _git(self.bare_repo, "cat-file", "-e", f"{body['head_sha']}^{{commit}}"
                                               ).returncode != 0:
            return self._error("github", 422, "No commit found for SHA: " + str(body["head_sha"]))
        with self._lock:
            check_run_id = next(self._ids)
            self._check_runs[check_run_id] = [body]
            data = self._check_run_body(owner, repo, check_run_id)
        return self._json("github", data, 201)

    async def _gh_update_check_run(self, request: Request, body: Json) -> Response:
        owner, repo = self._params(request)
        check_run_id = request.path_params["check_run_id"]
        refused = self._check_run_refused(request, body, CHECK_RUN, "patch")
        if refused is not None:
            return refused
        with self._lock:
            if check_run_id not in self._check_runs:
                return self._error("github", 404, "Not Found")
            self._check_runs[check_run_id].append(body)
            data = self._check_run_body(owner, repo, check_run_id)
        return self._json("github", data)

    # ---- issue comments (a pull request is an issue on both forges)

    @staticmethod
    def _forge_of(request: Request) -> str:
        return "gitea" if request.url.path.startswith("/api/v1/") else "github"

    def _comment_body(self, forge: str, owner: str, repo: str, comment_id: int) -> dict[str, Any]:
        c = self._comments[comment_id]
        if forge == "github":
            data: dict[str, Any] = self._localize(github_example(ISSUE_COMMENTS, "post", 201), owner, repo)
            data |= {"id": comment_id, "node_id": f"IC_standin{comment_id}", "body": c["body"],
                     "url": f"{self.url}/repos/{owner}/{repo}/issues/comments/{comment_id}",
                     "issue_url": f"{self.url}/repos/{owner}/{repo}/issues/{c['number']}",
                     "created_at": c["created_at"], "updated_at": _now()}
            if "user" in data:
                data["user"] = self._gh_user(data["user"])
            return data
        return {"id": comment_id, "body": c["body"], "user": self._gt_user(), "html_url": "",
                "issue_url": f"{self.url}/api/v1/repos/{owner}/{repo}/issues/{c['number']}",
                "created_at": c["created_at"], "updated_at": _now()}

    def _comment_refused(self, forge: str, path: str, method: str, body: Json) -> Response | None:
        if not isinstance(body, dict) or not isinstance(body.get("body"), str):
            return self._error(forge, 422, "body is required")
        if forge == "github":
            problem = jsonschema.exceptions.best_match(
                github_validator(_github_request_schema(path, method)).iter_errors(body))
            if problem is not None:
                return self._error("github", 422, f"Invalid request.\n\n{problem.message}")
        else:
            try:
                validate_gitea("IssueCommentOption", body)
            except jsonschema.ValidationError as e:
                return self._error("gitea", 422, e.message)
        return None

    async def _list_comments(self, request: Request, body: Json) -> Response:
        owner, repo = self._params(request)
        forge, number = self._forge_of(request), request.path_params["number"]
        page = int(request.query_params.get("page", "1"))
        per = int(request.query_params.get("per_page", "30" if forge == "github" else "50"))
        with self._lock:
            ids = [i for i, c in self._comments.items() if c["number"] == number and c["forge"] == forge]
            shown = [self._comment_body(forge, owner, repo, i) for i in ids[(page - 1) * per: page * per]]
        return self._json(forge, shown)

    async def _create_comment(self, request: Request, body: Json) -> Response:
        owner, repo = self._params(request)
        forge, number = self._forge_of(request), request.path_params["number"]
        refused = self._comment_refused(forge, ISSUE_COMMENTS, "post", body)
        if refused is not None:
            return refused
        with self._lock:
            comment_id = next(self._ids)
            self._comments[comment_id] = {"forge": forge, "owner": owner, "repo": repo, "number": number,
                                          "body": body["body"], "edits": 0, "created_at": _now()}
            data = self._comment_body(forge, owner, repo, comment_id)
        return self._json(forge, data, 201)

    async def _edit_comment(self, request: Request, body: Json) -> Response:
        owner, repo = self._params(request)
        forge, comment_id = self._forge_of(request), request.path_params["comment_id"]
        refused = self._comment_refused(forge, ISSUE_COMMENT, "patch", body)
        if refused is not None:
            return refused
        with self._lock:
            if comment_id not in self._comments:
                return self._error(forge, 404, "Not Found")
            self._comments[comment_id]["body"] = body["body"]
            self._comments[comment_id]["edits"] += 1
            data = self._comment_body(forge, owner, repo, comment_id)
        return self._json(forge, data)

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

    def _gh_user(self, template: dict[str, Any]) -> dict[str, Any]:
        user = dict(template)
        user |= {"login": self.login, "id": 4242, "type": "Bot", "site_admin": False}
        for key, value in user.items():
            if isinstance(value, str):
                user[key] = value.replace("/octocat", f"/{self.login}").replace("https://api.github.com", self.url)
        return user

    def _gh_status_body(self, status: PostedStatus, template: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = self._localize(template, status.owner, status.repo)
        body |= {
            "url": f"{self.url}/repos/{status.owner}/{status.repo}/statuses/{status.sha}",
            "avatar_url": None,
            "id": status.id,
            "node_id": f"SC_standin{status.id}",
            "state": status.state,
            "description": status.description,
            "target_url": status.target_url,
            "context": status.context,
            "created_at": status.created_at,
            "updated_at": status.created_at,
        }
        if "creator" in body:
            body["creator"] = self._gh_user(body["creator"])
        return body

    async def _gh_repo(self, request: Request, body: Json) -> Response:
        owner, repo = self._params(request)
        data = self._localize(github_example(REPO, "get", 200), owner, repo)
        # The published example lacks the required "language" and shows a fork ("parent", "source") whose
        # nested repository misses it too; this stand-in's repositories are not forks.
        data |= {"name": repo, "full_name": f"{owner}/{repo}", "default_branch": self._default_branch()}
        data |= {"fork": False, "language": None}
        data.pop("parent", None)
        data.pop("source", None)
        data["owner"]["login"] = owner
        return self._json("github", data)

    async def _gh_create_status(self, request: Request, body: Json) -> Response:
        owner, repo = self._params(request)
        sha = request.path_params["sha"]
        if not isinstance(body, dict):
            return self._error("github", 400, "Problems parsing JSON")
        if body.get("state") not in GITHUB_STATES:
            message = "state is not included in the list"
            error = {"resource": "Status", "code": "custom", "field": "state", "message": message}
            return self._error("github", 422, "Validation Failed", [error])
        description = body.get("description")
        if isinstance(description, str) and len(description) > GITHUB_DESCRIPTION_LIMIT:
            message = f"description is too long (maximum is {GITHUB_DESCRIPTION_LIMIT} characters)"
            error = {"resource": "Status", "code": "custom", "field": "description", "message": message}
            return self._error("github", 422, "Validation Failed", [error])
        problem = jsonschema.exceptions.best_match(
            github_validator(_github_request_schema(CREATE_STATUS, "post")).iter_errors(body)
        )
        if problem is not None:
            return self._error("github", 422, f"Invalid request.\n\n{problem.message}")
        status = self._record_status("github", owner, repo, sha, body, default_context="default")
        data = self._gh_status_body(status, github_example(CREATE_STATUS, "post", 201))
        return self._json("github", data, 201, headers={"Location": data["url"]})

    def _record_status(
        self, forge: str, owner: str, repo: str, sha: str, body: dict[str, Any], *, default_context: str
    ) -> PostedStatus:
        with self._lock:
            status = PostedStatus(
                forge=forge,
                owner=owner,
                repo=repo,
                sha=sha,
                id=next(self._ids),
                state=body["state"],
                description=body.get("description"),
                target_url=body.get("target_url"),
                context=body.get("context") or default_context,
                created_at=_now(),
            )
            self._statuses.append(status)
        return status

    def _posted(self, forge: str, owner: str, repo: str, sha: str) -> list[PostedStatus]:
        """Statuses for one commit of one repo, newest first (the order both forges list them in)."""
        with self._lock:
            found = [s for s in self._statuses if (s.forge, s.owner, s.repo, s.sha) == (forge, owner, repo, sha)]
        return found[::-1]

    async def _gh_list(self, request: Request, body: Json) -> Response:
        owner, repo = self._params(request)
        template = github_example(LIST_STATUSES, "get", 200)[0]
        posted = self._posted("github", owner, repo, request.path_params["ref"])
        return self._json("github", [self._gh_status_body(s, template) for s in posted])

    async def _gh_combined(self, request: Request, body: Json) -> Response:
        owner, repo = self._params(request)
        ref = request.path_params["ref"]
        data = self._localize(github_example(COMBINED_STATUS, "get", 200), owner, repo)
        latest: dict[str, PostedStatus] = {}
        for s in self._posted("github", owner, repo, ref):
            latest.setdefault(s.context, s)
        states = {s.state for s in latest.values()}
        if states & {"error", "failure"}:
            state = "failure"
        elif not states or "pending" in states:
            state = "pending"
        else:
            state = "success"
        template = data["statuses"][0]
        data |= {
            "state": state,
            "statuses": [self._gh_status_body(s, template) for s in latest.values()],
            "sha": ref,
            "total_count": len(latest),
            "commit_url": f"{self.url}/repos/{owner}/{repo}/commits/{ref}",
            "url": f"{self.url}/repos/{owner}/{repo}/commits/{ref}/status",
        }
        data["repository"] |= {"name": repo, "full_name": f"{owner}/{repo}"}
        data["repository"]["owner"]["login"] = owner
        return self._json("github", data)

    async def _gh_pull(self, request: Request, body: Json) -> Response:
        owner, repo = self._params(request)
        number = request.path_params["number"]
        found = self._pull_state((owner, repo, number))
        if found is None:
            return self._error("github", 404, "Not Found")
        pull, base_tip = found
        data = self._localize(github_example(PULL, "get", 200), owner, repo)
        data = json.loads(json.dumps(data).replace("/1347", f"/{number}"))
        merged = pull.merged_at is not None
        data |= {
            "id": 100000 + number,
            "node_id": f"PR_standin{number}",
            "number": number,
            "state": "closed" if merged else "open",
            "locked": False,
            "active_lock_reason": None,
            "created_at": pull.created_at,
            "updated_at": pull.merged_at or pull.created_at,
            "closed_at": pull.merged_at,
            "merged_at": pull.merged_at,
            "merged": merged,
            "merged_by": self._gh_user(data["user"]) if merged else None,
            "merge_commit_sha": pull.head_sha if merged else None,
            "statuses_url": f"{self.url}/repos/{owner}/{repo}/statuses/{pull.head_sha}",
            "mergeable": None if merged else True,
            "mergeable_state": "unknown" if merged else "clean",
            "draft": False,
            # The example's requested team lacks the required "type"; nobody is requested here anyway.
            "requested_reviewers": [],
            "requested_teams": [],
        }
        data["head"] |= {"label": f"{owner}:{pull.head_ref}", "ref": pull.head_ref, "sha": pull.head_sha}
        data["base"] |= {"label": f"{owner}:{pull.base_ref}", "ref": pull.base_ref, "sha": base_tip or pull.head_sha}
        return self._json("github", data)

    # ---- Gitea

    def _gt_user(self) -> dict[str, Any]:
        return {
            "id": 4242,
            "login": self.login,
            "login_name": "",
            "full_name": "",
            "email": f"{self.login}@noreply.localhost",
            "avatar_url": f"{self.url}/avatars/{self.login}",
            "html_url": f"{self.url}/{self.login}",
            "language": "",
            "is_admin": False,
            "last_login": "0001-01-01T00:00:00Z",
            "created": "2024-01-01T00:00:00Z",
            "restricted": False,
            "active": False,
            "prohibit_login": False,
            "location": "",
            "website": "",
            "description": "",
            "visibility": "public",
            "followers_count": 0,
            "following_count": 0,
            "starred_repos_count": 0,
            "username": self.login,
        }

    def _gt_status_body(self, status: PostedStatus) -> dict[str, Any]:
        return {
            "id": status.id,
            "status": status.state,
            "target_url": status.target_url or "",
            "description": status.description or "",
            "url": f"{self.url}/api/v1/repos/{status.owner}/{status.repo}/statuses/{status.sha}",
            "context": status.context,
            "creator": self._gt_user(),
            "created_at": status.created_at,
            "updated_at": status.created_at,
        }

    async def _gt_create(self, request: Request, body: Json) -> Response:
        owner, repo = self._params(request)
        if not isinstance(body, dict):
            return self._error("gitea", 422, "invalid JSON body")
        if body.get("state") not in GITEA_STATES:
            return self._error("gitea", 422, f"invalid state {body.get('state')!r}")
        for key in ("target_url", "description", "context"):
            if body.get(key) is not None and not isinstance(body[key], str):
                return self._error("gitea", 422, f"{key} must be a string")
        status = self._record_status("gitea", owner, repo, request.path_params["sha"], body, default_context="default")
        return self._json("gitea", self._gt_status_body(status), 201)

    async def _gt_list(self, request: Request, body: Json) -> Response:
        owner, repo = self._params(request)
        posted = self._posted("gitea", owner, repo, request.path_params["sha"])
        return self._json("gitea", [self._gt_status_body(s) for s in posted])

    async def _gt_pull(self, request: Request, body: Json) -> Response:
        owner, repo = self._params(request)
        number = request.path_params["number"]
        found = self._pull_state((owner, repo, number))
        if found is None:
            return self._error("gitea", 404, "The target couldn't be found.")
        pull, base_tip = found
        merged = pull.merged_at is not None
        web = f"{self.url}/{owner}/{repo}/pulls/{number}"
        data = {
            "id": 100000 + number,
            "url": web,
            "number": number,
            "user": self._gt_user(),
            "title": f"Pull request {number}",
            "body": "",
            "state": "closed" if merged else "open",
            "is_locked": False,
            "comments": 0,
            "html_url": web,
            "diff_url": f"{web}.diff",
            "patch_url": f"{web}.patch",
            "mergeable": not merged,
            "merged": merged,
            "merged_at": pull.merged_at,
            "merge_commit_sha": pull.head_sha if merged else None,
            "merged_by": self._gt_user() if merged else None,
            "base": {"label": pull.base_ref, "ref": pull.base_ref, "sha": base_tip or "", "repo_id": 1},
            "head": {"label": pull.head_ref, "ref": pull.head_ref, "sha": pull.head_sha, "repo_id": 1},
            "merge_base": base_tip or "",
            "created_at": pull.created_at,
            "updated_at": pull.merged_at or pull.created_at,
            "closed_at": pull.merged_at,
        }
        return self._json("gitea", data)
