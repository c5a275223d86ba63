"""What the stand-in knows and how it answers: its state, both forges' replies, the bare repository's facts.

:class:`StandinCore` holds everything the routes share: the requests recorded, the statuses posted, the pull
requests registered, the faults to inject, the tokens minted; the error and JSON replies in each forge's shape
(GitHub's headers and error bodies, Gitea's); the bot's user as each forge shows it; and what the real bare
repository says (its default branch, a branch's tip, whether a pull request's head has reached its base).
The routes of each forge (``github.py``, ``gitea.py``, ``comments.py``) extend it; ``server.py`` composes them.
"""

from __future__ import annotations

import itertools
import subprocess
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import uvicorn
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tests.support.forge_standin.github_schema import GITHUB_DOCS, STATUS_DOCS, Json


@dataclass
class RecordedRequest:
    """A request as the stand-in received it."""

    method: str
    path: str
    query: str
    headers: dict[str, str]  # lower-case names
    json: Json
    status: int | None = None  # the status the stand-in answered with
    at: float = 0.0  # when it came (time.time())


@dataclass(frozen=True)
class PostedStatus:
    """A commit status posted to either forge."""

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
class Pull:
    """A pull request registered with ``add_pull``."""

    head_ref: str
    head_sha: str
    base_ref: str
    created_at: str
    merged_at: str | None = None


@dataclass
class Faults:
    """The faults to inject into the next requests, in order."""

    fail: list[int] = field(default_factory=list)  # statuses for the next requests
    stall: list[float] = field(default_factory=list)  # seconds to wait before answering the next requests
    limited: list[float] = field(default_factory=list)  # the next requests: GitHub's rate limit, reset in N s


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_git(bare_repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(bare_repo), *args], capture_output=True, text=True, check=False)


Handler = Callable[[Request, Json], Awaitable[Response]]


@dataclass(frozen=True)
class GitHubApp:
    """The App the stand-in authenticates: its id, the public half of its key, its one installation."""

    app_id: int
    public_key: str
    installation_id: int = 4242
    token_lifetime_s: float = 3600.0


class StandinCore:
    """The state and the replies every route of the stand-in shares (see the module's docstring)."""

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
        self._pulls: dict[tuple[str, str, int], Pull] = {}
        self._faults = Faults()
        self._ids = itertools.count(1)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._minted: dict[str, bool] = {}  # installation tokens minted: token -> still valid
        self._git: list[tuple[str, str | None]] = []  # git over HTTP: (what, the token it carried)
        self._check_runs: dict[int, list[dict[str, Any]]] = {}  # id -> every body it was sent (created first)
        self._comments: dict[int, dict[str, Any]] = {}  # id -> forge, owner, repo, number, body, edits

    # ---- replies, in each forge's shape

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

    # ---- the real bare repository

    def _default_branch(self) -> str:
        if self.bare_repo is not None:
            head = run_git(self.bare_repo, "symbolic-ref", "--short", "HEAD")
            if head.returncode == 0 and head.stdout.strip():
                return head.stdout.strip()
        return "main"

    def _branch_tip(self, branch: str) -> str | None:
        if self.bare_repo is None:
            return None
        tip = run_git(self.bare_repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}")
        return tip.stdout.strip() if tip.returncode == 0 else None

    def _pull_state(self, request: Request) -> tuple[str, str, int, Pull, str | None] | None:
        """The owner, repo and number the request's path names, the pull registered there and the tip of its base
        branch, refreshing whether it is merged; None when no such pull is registered."""
        owner, repo = self._params(request)
        number = request.path_params["number"]
        with self._lock:
            pull = self._pulls.get((owner, repo, number))
        if pull is None:
            return None
        base_tip = self._branch_tip(pull.base_ref)
        merged = False
        if base_tip is not None and self.bare_repo is not None:
            check = run_git(self.bare_repo, "merge-base", "--is-ancestor", pull.head_sha, base_tip)
            merged = check.returncode == 0
        with self._lock:
            if merged and pull.merged_at is None:
                pull.merged_at = utc_now()
            elif not merged:
                pull.merged_at = None
        return owner, repo, number, pull, base_tip

    # ---- requests

    @staticmethod
    def _params(request: Request) -> tuple[str, str]:
        return request.path_params["owner"], request.path_params["repo"]

    @staticmethod
    def _forge_of(request: Request) -> str:
        return "gitea" if request.url.path.startswith("/api/v1/") else "github"

    # ---- the bot's user, as each forge shows it

    def _gh_user(self, template: dict[str, Any]) -> dict[str, Any]:
        user = dict(template)
        user |= {"login": self.login, "id": 4242, "type": "Bot", "site_admin": False}
        for key, value in user.items():
            if isinstance(value, str):
                user[key] = value.replace("/octocat", f"/{self.login}").replace("https://api.github.com", self.url)
        return user

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

    # ---- commit statuses (either forge)

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
                created_at=utc_now(),
            )
            self._statuses.append(status)
        return status

    def _posted(self, forge: str, owner: str, repo: str, sha: str) -> list[PostedStatus]:
        """Statuses for one commit of one repo, newest first (the order both forges list them in)."""
        with self._lock:
            found = [s for s in self._statuses if (s.forge, s.owner, s.repo, s.sha) == (forge, owner, repo, sha)]
        return found[::-1]
