"""Outbound calls to code forges: commit statuses and "is this pull request merged?".

Mergebot reports on the commits it lands by posting a commit status (GitHub's Statuses API, or Gitea's and
Forgejo's equivalent). Statuses are idempotent by nature: posting the same state for the same sha and context
twice is harmless (the forge shows the latest per context), so a post whose outcome is unknown (a timeout, a
502 from a proxy) can simply be sent again; :func:`post_with_retry` does that with exponential backoff.

All calls here are blocking; run them in a worker thread from async code.
"""

from __future__ import annotations

import math
import random
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from mergebot import messages as say

if TYPE_CHECKING:  # PyGithub (and requests) load on first use: a server without a GitHub repository never pays
    import requests  # the 130 ms they add to every start, nor does any CLI command
    from github.GithubException import GithubException

STATES = ("pending", "success", "failure", "error")
GITHUB_DESCRIPTION_LIMIT = 140  # characters; GitHub answers 422 beyond it
MAX_RETRY_AFTER = 60.0  # seconds: the longest a forge's Retry-After is honoured by post_with_retry
IN_PLACE_WAIT = 5.0  # seconds: a longer wait (a rate limit's reset) is the outbox's, which sends other work meanwhile


class ForgeCallError(Exception):
    """A forge call failed. ``retryable`` tells whether sending it again may succeed."""

    def __init__(
        self, message: str, *, retryable: bool, status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        self.status = status  # HTTP status, None when no response came back
        self.retry_after = retry_after  # seconds, from a Retry-After header


@dataclass(frozen=True)
class StatusPost:
    sha: str
    state: str  # pending | success | failure | error
    description: str
    target_url: str | None
    context: str = "mergebot"


class ForgeClient(Protocol):
    def post_status(self, repo: str, post: StatusPost) -> None:
        """Set a commit status on ``repo`` ("owner/name"). Blocking; raises ForgeCallError."""
        ...

    def pull_merged(self, repo: str, number: int) -> bool:
        """Whether pull request ``number`` of ``repo`` ("owner/name") is merged. Blocking; raises ForgeCallError."""
        ...


def _retryable_status(status: int) -> bool:
    return status >= 500 or status in (408, 429)


def _rate_limit_reset(headers: object) -> float | None:
    """Seconds until GitHub's rate limit resets, when the answer says it is spent (``X-RateLimit-Remaining: 0``)."""
    if not isinstance(headers, dict | httpx.Headers):
        return None
    low = {str(k).lower(): v for k, v in headers.items()}
    if str(low.get("x-ratelimit-remaining", "")).strip() != "0":
        return None
    try:
        return max(0.0, float(low["x-ratelimit-reset"]) - time.time())
    except (KeyError, TypeError, ValueError):
        return None


def _retry_after(headers: object) -> float | None:
    value = None
    if isinstance(headers, dict):
        for key, item in headers.items():
            if str(key).lower() == "retry-after":
                value = item
    elif isinstance(headers, httpx.Headers):
        value = headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except (TypeError, ValueError):
        return None  # an HTTP date: rare from forges, ignored


def _split_repo(repo: str) -> tuple[str, str]:
    owner, sep, name = repo.partition("/")
    if not sep or not owner or not name or "/" in name:
        raise ValueError(say.forge_repo_malformed(repo))
    return owner, name


def truncate_description(description: str, limit: int = GITHUB_DESCRIPTION_LIMIT) -> str:
    """``description`` cut to ``limit`` characters, ending in an ellipsis when cut."""
    return description if len(description) <= limit else description[: limit - 1] + "…"


class GitHubClient:
    """GitHub (github.com or Enterprise Server: ``base_url`` like ``https://ghe.example/api/v3``) via PyGithub.

    PyGithub's own retrying and request throttling are off: :func:`post_with_retry` owns retries, and a
    merge queue posts a few statuses per landing, far below GitHub's secondary rate limits.
    """

    def __init__(self, token: str, base_url: str = "https://api.github.com", timeout: float = 10.0) -> None:
        import github

        self._gh = github.Github(
            base_url=base_url.rstrip("/"),
            auth=github.Auth.Token(token),
            # PyGithub only takes whole seconds.
            timeout=max(1, math.ceil(timeout)),
            user_agent="mergebot",
            retry=None,
            seconds_between_requests=None,
            seconds_between_writes=None,
            lazy=True,  # get_repo/get_commit/get_pull build objects without a GET
        )

    def close(self) -> None:
        self._gh.close()

    def post_status(self, repo: str, post: StatusPost) -> None:
        import requests
        from github.GithubException import GithubException
        from github.GithubObject import NotSet, Opt

        _split_repo(repo)
        target_url: Opt[str] = post.target_url if post.target_url is not None else NotSet
        try:
            commit = self._gh.get_repo(repo).get_commit(post.sha)
            commit.create_status(
                state=post.state,
                target_url=target_url,
                description=truncate_description(post.description),
                context=post.context,
            )
        except (GithubException, requests.RequestException) as exc:
            raise self._mapped(exc, f"posting status {post.state!r} on {repo}@{post.sha}") from exc

    def pull_merged(self, repo: str, number: int) -> bool:
        import requests
        from github.GithubException import GithubException

        _split_repo(repo)
        try:
            return bool(self._gh.get_repo(repo).get_pull(number).merged)
        except (GithubException, requests.RequestException) as exc:
            raise self._mapped(exc, f"reading pull request {repo}#{number}") from exc

    def check_run(self, repo: str, check_run_id: int | None, body: dict[str, Any]) -> int:
        """Create a check run (``check_run_id`` None: POST) or update one (PATCH); returns its id. Only a GitHub
        App's installation token may (a personal token gets 403)."""
        import requests
        from github.GithubException import GithubException

        owner, name = _split_repo(repo)
        base = f"/repos/{_q(owner)}/{_q(name)}/check-runs"
        try:
            if check_run_id is None:
                _, data = self._gh.requester.requestJsonAndCheck("POST", base, input=body)
            else:
                _, data = self._gh.requester.requestJsonAndCheck("PATCH", f"{base}/{check_run_id}", input=body)
        except (GithubException, requests.RequestException) as exc:
            raise self._mapped(exc, f"{'creating' if check_run_id is None else 'updating'} a check run on "
                                    f"{repo}@{body.get('head_sha', check_run_id)}") from exc
        return int(data["id"]) if isinstance(data, dict) and "id" in data else int(check_run_id or 0)

    def comment(self, repo: str, number: int, comment_id: int | None, body: str, marker: str) -> int:
        """Edit the pull request's comment ``comment_id``; with none, the one that carries ``marker`` (found among
        the first 1,000 comments), else post it. Returns its id."""
        import requests
        from github.GithubException import GithubException

        owner, name = _split_repo(repo)
        base = f"/repos/{_q(owner)}/{_q(name)}/issues"
        doing = f"writing the comment on {repo}#{number}"
        try:
            if comment_id is None:
                for page in range(1, 11):
                    _, found = self._gh.requester.requestJsonAndCheck(
                        "GET", f"{base}/{number}/comments", parameters={"per_page": 100, "page": page})
                    mine = [c for c in found or [] if isinstance(c, dict) and marker in str(c.get("body") or "")]
                    if mine:
                        comment_id = int(mine[0]["id"])
                        break
                    if not found or len(found) < 100:
                        break
            if comment_id is None:
                _, made = self._gh.requester.requestJsonAndCheck("POST", f"{base}/{number}/comments",
                                                                 input={"body": body})
                return int(made["id"])
            self._gh.requester.requestJsonAndCheck("PATCH", f"{base}/comments/{comment_id}", input={"body": body})
            return comment_id
        except (GithubException, requests.RequestException) as exc:
            raise self._mapped(exc, doing) from exc

    @staticmethod
    def _mapped(exc: GithubException | requests.RequestException, doing: str) -> ForgeCallError:
        from github.GithubException import GithubException, RateLimitExceededException

        if isinstance(exc, GithubException):
            # Secondary rate limits come back as 403 with a rate-limit message: PyGithub singles those out.
            retryable = isinstance(exc, RateLimitExceededException) or _retryable_status(exc.status)
            message = exc.message or (exc.data.get("message") if isinstance(exc.data, dict) else None)
            wait = _retry_after(exc.headers)
            reset = _rate_limit_reset(exc.headers) if exc.status in (403, 429) else None
            if reset is not None:  # the primary rate limit: nothing goes through before it resets
                retryable, wait = True, max(wait or 0.0, reset)
            return ForgeCallError(
                say.forge_answered("GitHub", exc.status, doing, message or exc),
                retryable=retryable,
                status=exc.status,
                retry_after=wait,
            )
        # requests' errors: connection refused or reset, timeouts.
        return ForgeCallError(say.forge_unreachable("GitHub", doing, exc), retryable=True)


class GiteaClient:
    """Gitea or Forgejo (same API) via plain httpx; ``base_url`` is the server, like ``http://host:3000``
    (an ``.../api/v1`` suffix is accepted too)."""

    def __init__(self, token: str, base_url: str, timeout: float = 10.0) -> None:
        root = base_url.rstrip("/")
        self._http = httpx.Client(
            base_url=root if root.endswith("/api/v1") else f"{root}/api/v1",
            headers={"Authorization": f"token {token}", "Accept": "application/json", "User-Agent": "mergebot"},
            timeout=timeout,
        )

    def close(self) -> None:
        self._http.close()

    def post_status(self, repo: str, post: StatusPost) -> None:
        owner, name = _split_repo(repo)
        body: dict[str, str] = {"state": post.state, "description": post.description, "context": post.context}
        if post.target_url is not None:
            body["target_url"] = post.target_url
        path = f"/repos/{_q(owner)}/{_q(name)}/statuses/{_q(post.sha)}"
        self._call("POST", path, body, f"posting status {post.state!r} on {repo}@{post.sha}")

    def pull_merged(self, repo: str, number: int) -> bool:
        owner, name = _split_repo(repo)
        doing = f"reading pull request {repo}#{number}"
        response = self._call("GET", f"/repos/{_q(owner)}/{_q(name)}/pulls/{number}", None, doing)
        try:
            data = response.json()
        except ValueError as exc:
            raise ForgeCallError(say.forge_sent_no("Gitea", "JSON", doing), retryable=True,
                                 status=response.status_code) from exc
        return isinstance(data, dict) and data.get("merged") is True

    def comment(self, repo: str, number: int, comment_id: int | None, body: str, marker: str) -> int:
        """As ``GitHubClient.comment``, through Gitea's issue comments (a pull request is an issue there too)."""
        owner, name = _split_repo(repo)
        base = f"/repos/{_q(owner)}/{_q(name)}/issues"
        doing = f"writing the comment on {repo}#{number}"
        if comment_id is None:
            found = self._call("GET", f"{base}/{number}/comments", None, doing).json()
            mine = [c for c in found or [] if isinstance(c, dict) and marker in str(c.get("body") or "")]
            comment_id = int(mine[0]["id"]) if mine else None
        if comment_id is None:
            return int(self._call("POST", f"{base}/{number}/comments", {"body": body}, doing).json()["id"])
        self._call("PATCH", f"{base}/comments/{comment_id}", {"body": body}, doing)
        return comment_id

    def _call(self, method: str, path: str, body: dict[str, str] | None, doing: str) -> httpx.Response:
        try:
            response = self._http.request(method, path, json=body)
        except httpx.TransportError as exc:  # connect errors, timeouts, broken connections
            raise ForgeCallError(say.forge_unreachable("Gitea", doing, repr(exc)), retryable=True) from exc
        if response.is_error:
            try:
                detail = response.json().get("message")
            except (ValueError, AttributeError):  # a proxy's HTML page, or not an object
                detail = None
            raise ForgeCallError(
                say.forge_answered("Gitea", response.status_code, doing, detail or response.reason_phrase),
                retryable=_retryable_status(response.status_code),
                status=response.status_code,
                retry_after=_retry_after(response.headers),
            )
        return response


def _q(part: str) -> str:
    return urllib.parse.quote(part, safe="")


def client_for(forge: str, *, token: str, base_url: str | None) -> ForgeClient:
    """The client for ``forge`` ("github", "gitea" or "forgejo"); GitHub's ``base_url`` defaults to api.github.com."""
    kind = forge.lower()
    if kind == "github":
        return GitHubClient(token, base_url) if base_url else GitHubClient(token)
    if kind in ("gitea", "forgejo"):
        if not base_url:
            raise ValueError(say.forge_needs_base_url(forge))
        return GiteaClient(token, base_url)
    raise ValueError(say.unknown_forge(forge))


def post_with_retry(
    client: ForgeClient,
    repo: str,
    post: StatusPost,
    *,
    attempts: int = 5,
    base_delay: float = 0.2,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Post a status, retrying retryable failures up to ``attempts`` calls in all.

    Safe because statuses are idempotent. Waits grow exponentially with "equal jitter" (between half and all of
    ``base_delay * 2**n``, so each wait is at least as long as the one before), or longer when the forge sent a
    Retry-After (capped at a minute). A non-retryable error is raised at once, and so is one that asks to wait
    longer than ``IN_PLACE_WAIT`` (a rate limit's reset: the outbox waits for it instead, sending nothing to that
    forge meanwhile); otherwise the last error is.
    """
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    for attempt in range(attempts):
        try:
            client.post_status(repo, post)
            return
        except ForgeCallError as exc:
            if not exc.retryable or attempt == attempts - 1 or (exc.retry_after or 0.0) > IN_PLACE_WAIT:
                raise
            ceiling = base_delay * 2**attempt
            delay = ceiling / 2 + random.uniform(0, ceiling / 2)  # noqa: S311 - jitter, not crypto
            if exc.retry_after is not None:
                delay = max(delay, min(exc.retry_after, MAX_RETRY_AFTER))
            sleep(delay)
