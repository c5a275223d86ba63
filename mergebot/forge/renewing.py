"""A forge client whose token may be renewed: a GitHub App's installation token (``git.credentials``). A call
answered 401 is made once more with a fresh token, and the client is rebuilt with it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mergebot import messages as say
from mergebot.forge.client import ForgeCallError, ForgeClient, GitHubClient, StatusPost


class Renewing:
    """A client whose token may be renewed (a GitHub App's installation token): a call answered 401 is made once
    more with a fresh token from ``renew``, and the client is rebuilt with it. A personal token is never renewed:
    its 401 is an operator's to mend, and stands."""

    def __init__(self, build: Callable[[str], ForgeClient], token: Callable[[], str | None],
                 renew: Callable[[str | None], str | None]) -> None:
        self._build, self._renew = build, renew
        self._token = token()
        if not self._token:
            raise ForgeCallError(say.NO_FORGE_TOKEN, retryable=True)
        self._client = build(self._token)

    def _again(self, exc: ForgeCallError) -> bool:
        if exc.status != 401:
            return False
        fresh = self._renew(self._token)
        if not fresh or fresh == self._token:
            return False
        self._token, self._client = fresh, self._build(fresh)
        return True

    def post_status(self, repo: str, post: StatusPost) -> None:
        try:
            self._client.post_status(repo, post)
        except ForgeCallError as exc:
            if not self._again(exc):
                raise
            self._client.post_status(repo, post)

    def pull_merged(self, repo: str, number: int) -> bool:
        try:
            return self._client.pull_merged(repo, number)
        except ForgeCallError as exc:
            if not self._again(exc):
                raise
            return self._client.pull_merged(repo, number)

    def comment(self, repo: str, number: int, comment_id: int | None, body: str, marker: str) -> int:
        client: Any = self._client
        try:
            return int(client.comment(repo, number, comment_id, body, marker))
        except ForgeCallError as exc:
            if not self._again(exc):
                raise
            retry: Any = self._client
            return int(retry.comment(repo, number, comment_id, body, marker))

    def check_run(self, repo: str, check_run_id: int | None, body: dict[str, Any]) -> int:
        client = self._client
        if not isinstance(client, GitHubClient):
            raise ForgeCallError(say.CHECK_RUNS_ARE_GITHUBS, retryable=False)
        try:
            return client.check_run(repo, check_run_id, body)
        except ForgeCallError as exc:
            if not self._again(exc):
                raise
            assert isinstance(self._client, GitHubClient)
            return self._client.check_run(repo, check_run_id, body)
