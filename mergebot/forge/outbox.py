"""Commit statuses and check runs out: the server sends the forge outbox, newest state first, with retries.

Check runs (``forge_check_runs``, a GitHub App's repositories only) are sent as their candidate is at the time
of sending (``forge.checkrun`` words them): the moves of a candidate between two sends go out as one update.
So is each pull request's one living comment (``forge_pulls``, ``forge.comment`` words it), on GitHub, Gitea and
Forgejo alike. A repository with named checks and no GitHub App gets a commit status per check (``mergebot/NAME``,
``StatusSender._named_statuses``), sent with each of its candidate's, so as the candidate is at the time of sending.

Each status is sent through the forge's client (``mergebot.forge.client``) with a short in-place retry; if that
fails it goes back to the outbox with an exponential backoff (durable across restarts) and is given up after
``MAX_ATTEMPTS``, or at once when the forge says the request itself is wrong. Posting a status is idempotent on
every forge (the latest status per context wins), so a repeat after a crash is harmless. Every text sent is
masked first (``masker``: the server's secrets, ``mergebot.secrets``), whatever made it.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeVar

from mergebot import messages as say
from mergebot.db.database import Database
from mergebot.forge import checkrun, comment
from mergebot.forge.client import (
    IN_PLACE_WAIT,
    ForgeCallError,
    ForgeClient,
    StatusPost,
    client_for,
    post_with_retry,
)
from mergebot.forge.renewing import Renewing
from mergebot.git import credentials
from mergebot.landing.judge import told, verdicts
from mergebot.models import Candidate, CheckRunRow, PullRow, Repo, StatusRow
from mergebot.naps import nap
from verifier import outcomes as outcome_files
from verifier.mask import Masker

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_ATTEMPTS = 12
MAX_DELAY_S = 600.0


def backoff(attempts: int) -> float:
    return float(min(MAX_DELAY_S, 2 ** min(attempts, 20)))


def held(wait: float) -> str:
    return f"held: the forge's rate limit resets in {wait:.0f} s"


def target_url(public_url: str, candidate_id: int | None) -> str | None:
    """The candidate's page, where statuses and check runs link."""
    if not public_url or candidate_id is None:
        return None
    return f"{public_url.rstrip('/')}/ui/candidates/{candidate_id}"


class StatusSender:
    def __init__(self, db: Database, *, public_url: str = "", poll_seconds: float = 0.5,
                 make_client: Callable[[Repo], ForgeClient] | None = None,
                 masker: Callable[[], Awaitable[Masker]] | None = None) -> None:
        self.db = db
        self.masker = masker
        self._mask = Masker()
        self.public_url = public_url
        self.poll = poll_seconds
        self.make_client = make_client or _client
        self._wake = asyncio.Event()
        self._held: dict[str, float] = {}  # repository -> when (loop time) its forge's rate limit resets

    def poke(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        while True:
            self._wake.clear()
            try:
                sent = await self.send_due()
            except Exception as e:  # the database is away: try again shortly
                log.warning("status outbox pass failed, will retry: %s", e)
                sent = 0
            if not sent:
                await nap(self._wake, self.poll)

    async def send_due(self) -> int:
        rows = await self.db.forge.take_statuses()
        runs = await self.db.forge.take_check_runs()
        pulls = await self.db.forge.take_pulls()
        if not rows and not runs and not pulls:
            return 0
        repos = {r.name: r for r in await self.db.repos.forge_repos(("github", "gitea", "forgejo"))}
        if self.masker is not None:
            self._mask = await self.masker()
        for row in rows:
            await self.send(repos.get(row.repo), row)
        for run in runs:
            await self.send_check_run(repos.get(run.repo), run)
        for pull in pulls:
            await self.send_comment(repos.get(pull.repo), pull)
        return len(rows) + len(runs) + len(pulls)

    async def send_comment(self, repo: Repo | None, pull: PullRow) -> None:
        """Bring a pull request's one comment up to its newest candidate (posted once, then edited)."""
        if repo is None or not repo.forge_repo:
            await self.db.forge.pull_comment_failed(pull, error="not a forge repository", delay_s=0, give_up=True)
            return
        if wait := self.held_for(repo.name):
            await self.db.forge.pull_comment_failed(pull, error=held(wait), delay_s=wait, give_up=False)
            return
        cands = await self.db.forge.candidates_on(repo=repo.name, ref=pull.head_ref)
        if not cands:  # the pull request came before any push of it: nothing to say yet
            await self.db.forge.pull_comment_sent(pull, version=pull.version, comment_id=pull.comment_id,
                                                  digest=pull.sent_digest or "")
            return
        text = self._mask.text(await self._comment_text(repo, pull, cands))
        digest = hashlib.sha256(text.encode()).hexdigest()
        if pull.comment_id and digest == pull.sent_digest:  # nothing it says has changed: no edit
            await self.db.forge.pull_comment_sent(pull, version=pull.version, comment_id=pull.comment_id,
                                                  digest=digest)
            return
        forge_repo, mark = repo.forge_repo, comment.marker(repo.forge_repo, pull.number)

        def deliver() -> int:
            client: Any = self.make_client(repo)
            if not hasattr(client, "comment"):
                raise ForgeCallError(say.CLIENT_WRITES_NO_COMMENTS, retryable=False)
            return int(client.comment(forge_repo, pull.number, pull.comment_id or None, text, mark))

        ok, made = await self._deliver(repo, f"the comment on #{pull.number}", pull.attempts, deliver,
                                       functools.partial(self.db.forge.pull_comment_failed, pull))
        if ok:
            await self.db.forge.pull_comment_sent(pull, version=pull.version, comment_id=made, digest=digest)

    async def _comment_text(self, repo: Repo, pull: PullRow, cands: list[Candidate]) -> str:
        newest = cands[-1]
        verdict = await told.candidate_verdict(self.db, newest)
        position: int | None = None
        ahead: tuple[int, ...] = ()
        if newest.status == "queued":
            waiting = [w for w in await self.db.pages.queue_waiting(500)
                       if w["repo"] == repo.name and w["status"] == "queued"]
            ids = [int(w["id"]) for w in waiting]
            if newest.id in ids:
                position, ahead = ids.index(newest.id) + 1, tuple(ids[: ids.index(newest.id)])
        landed_url = None
        if newest.status == "landed" and self.public_url:
            rows = await self.db.landing.landed(subtask_id=newest.subtask_id)
            row = next((r for r in rows if r.candidate_sha == newest.sha), None)
            landed_url = f"{self.public_url.rstrip('/')}/ui/landed/{row.id}" if row else None
        earlier = tuple(comment.Earlier(c.id, c.sha, c.status, verdicts.kind_of(c)) for c in cands[:-1])
        assert repo.forge_repo is not None
        return comment.body(forge_repo=repo.forge_repo, number=pull.number, status=newest.status, verdict=verdict,
                            target=repo.target_branch, position=position, ahead=ahead, landed_url=landed_url,
                            details_url=target_url(self.public_url, newest.id), earlier=earlier,
                            answer=pull.answer, full=pull.full_verdict)

    async def _deliver(self, repo: Repo, what: str, attempts: int, call: Callable[[], T],
                       failed: Callable[..., Awaitable[None]]) -> tuple[bool, T | None]:
        """Make one forge call in a thread (a GitHub App's token may be minted first, over HTTP): (True, its
        answer), or (False, None) with the failure recorded through ``failed`` (retry later, or give up)."""
        try:
            return True, await asyncio.to_thread(call)
        except ForgeCallError as e:
            self._hold(repo.name, e)
            give_up = not e.retryable or attempts >= MAX_ATTEMPTS
            await failed(error=str(e), give_up=give_up, delay_s=max(backoff(attempts), e.retry_after or 0.0))
            log.warning("%s on %s failed (%s): %s", what, repo.name, "given up" if give_up else "will retry", e)
        except Exception as e:  # a missing token or key, a bad URL: an operator must act; keep retrying slowly
            await failed(error=f"{type(e).__name__}: {e}", delay_s=backoff(attempts), give_up=attempts >= MAX_ATTEMPTS)
            log.warning("%s on %s could not be sent: %s", what, repo.name, e)
        return False, None

    def _hold(self, repo: str, e: ForgeCallError) -> None:
        """A rate limit (a wait longer than the client waits in place): nothing goes to that forge until it resets."""
        if e.retry_after and e.retry_after > IN_PLACE_WAIT:
            self._held[repo] = asyncio.get_running_loop().time() + e.retry_after

    def held_for(self, repo: str) -> float:
        """Seconds until the repository's forge takes calls again (0: now)."""
        return max(0.0, self._held.get(repo, 0.0) - asyncio.get_running_loop().time())

    async def send_check_run(self, repo: Repo | None, row: CheckRunRow) -> None:
        """Create or update a check run as what it follows is now: a candidate, or main's check on its new commit."""
        if repo is None or not repo.forge_repo or not repo.github_app_id:
            await self.db.forge.check_run_failed(row.id, error="not a GitHub App's repository", delay_s=0,
                                                 give_up=True)
            return
        if wait := self.held_for(repo.name):
            await self.db.forge.check_run_failed(row.id, error=held(wait), delay_s=wait, give_up=False)
            return
        body, named = await (self._candidate_check(row) if row.kind == "candidate" else self._main_check(repo, row))
        forge_repo, version, existing = repo.forge_repo, row.version, row.check_run_id

        def deliver() -> tuple[int, dict[str, int], ForgeCallError | None]:
            """The candidate's check run, then each named check's (issue 43): a failure among these keeps the ones
            made, and the row due."""
            client = self.make_client(repo)
            check_run = getattr(client, "check_run", None)
            if check_run is None:
                raise ForgeCallError(say.CLIENT_POSTS_NO_CHECK_RUNS, retryable=False)
            made, ids = int(check_run(forge_repo, existing, body)), {}
            for name, one in named.items():
                try:
                    ids[name] = int(check_run(forge_repo, row.named_runs.get(name), one))
                except ForgeCallError as e:
                    return made, ids, e
            return made, ids, None

        ok, got = await self._deliver(repo, f"the check run on {row.head_sha[:12]}", row.attempts, deliver,
                                      functools.partial(self.db.forge.check_run_failed, row.id))
        if ok and got is not None:
            made, ids, err = got
            await self.db.forge.check_run_sent(row.id, version=version if err is None else version - 1,
                                               check_run_id=made, named_runs=ids)
            if err is not None:
                self._hold(repo.name, err)
                await self.db.forge.check_run_failed(row.id, error=str(err), delay_s=backoff(row.attempts),
                                                     give_up=not err.retryable or row.attempts >= MAX_ATTEMPTS)

    async def _candidate_check(self, row: CheckRunRow) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        """The candidate's check run, and once it is decided, one per named check its run had, by name."""
        assert row.candidate_id is not None
        cand = await self.db.landing.get_candidate(row.candidate_id)
        checks = [c for c in (cand.verifier or {}).get("checks") or [] if isinstance(c, dict) and c.get("name")]
        verdict = await told.candidate_verdict(self.db, cand)
        jobs = await self.db.jobs.jobs(candidate_id=cand.id)
        lines: dict[str, int] = {}  # where each failing test is: its runs' outcomes hold it (newest last)
        for j in sorted(jobs, key=lambda j: int(j["id"])):
            if j.get("purpose") != "held_out":  # a held-out test's place is not an agent's to see
                lines |= outcome_files.unpack((j.get("result") or {}).get("tests")).lines
        seconds = sum((j["finished_at"] - j["started_at"]).total_seconds() for j in jobs
                      if j.get("started_at") and j.get("finished_at"))
        masked = replace(verdict, message=self._mask.text(verdict.message),
                         failing_tests=[self._mask.text(t) for t in verdict.failing_tests])
        named = {str(c["name"]): checkrun.named_body(
            c, candidate_id=cand.id, head_sha=row.head_sha, create=str(c["name"]) not in row.named_runs,
            details_url=f"{self.public_url.rstrip('/')}/ui/jobs/{c['job']}/log" if self.public_url and c.get("job")
            else None) for c in checks} if cand.status in checkrun.CONCLUSION else {}
        return checkrun.body(status=cand.status, verdict=masked, head_sha=row.head_sha,
                             details_url=target_url(self.public_url, cand.id),
                             log_tail=self._mask.text(verdict.log_tail), lines=lines,
                             runs=len([j for j in jobs if not j.get("is_group")]),  # a group's checks ran, not it
                             seconds=seconds, create=row.check_run_id is None,
                             checks=tuple(str(c["name"]) for c in checks)), named

    async def _main_check(self, repo: Repo, row: CheckRunRow) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        landed = [r for r in await self.db.landing.landed(repo=repo.name, limit=200) if r.main_sha == row.head_sha]
        status = landed[0].main_status if landed else "pending"
        subtasks = sorted(r.subtask_id for r in landed)
        url = f"{self.public_url.rstrip('/')}/ui/landed/{landed[0].id}" if landed and self.public_url else None
        return checkrun.main_body(status=status, head_sha=row.head_sha, target=repo.target_branch,
                                  subtasks=subtasks, details_url=url, create=row.check_run_id is None), {}

    async def send(self, repo: Repo | None, row: StatusRow) -> None:
        if repo is None or not repo.forge_repo:
            await self.db.forge.status_failed(row.id, error="not a forge repository", delay_s=0, give_up=True)
            return
        if wait := self.held_for(repo.name):
            await self.db.forge.status_failed(row.id, error=held(wait), delay_s=wait, give_up=False)
            return
        post = StatusPost(sha=row.sha, state=row.state, description=self._mask.text(row.description),
                          target_url=target_url(self.public_url, row.candidate_id))
        named = await self._named_statuses(repo, row)
        forge_repo = repo.forge_repo

        def deliver() -> None:
            """Each named check's status, then the candidate's own (``mergebot``): all again on a retry, harmless
            as each context keeps its latest."""
            client = self.make_client(repo)
            for one in (*named, post):
                post_with_retry(client, forge_repo, one, attempts=3)

        ok, _ = await self._deliver(repo, f"status {row.state} for {row.sha[:12]}", row.attempts, deliver,
                                    functools.partial(self.db.forge.status_failed, row.id))
        if ok:
            await self.db.forge.status_sent(row.id)

    async def _named_statuses(self, repo: Repo, row: StatusRow) -> list[StatusPost]:
        """One status per named check (``mergebot/NAME``) beside the candidate's, on a repository with named checks
        and no GitHub App (an App's repository has a check run per check instead; issue 43): pending while its
        candidate is verified, then each check's outcome linking the check's log; once the candidate is decided, a
        check its run never reached says so, in the candidate's colour."""
        if row.candidate_id is None or repo.github_app_id or not repo.checks:
            return []
        cand = await self.db.landing.get_candidate(row.candidate_id)
        page, base = target_url(self.public_url, cand.id), self.public_url.rstrip("/")

        def one(name: str, state: str, description: str, url: str | None) -> StatusPost:
            return StatusPost(sha=row.sha, state=state, description=self._mask.text(description), target_url=url,
                              context=f"{checkrun.NAME}/{name}")

        if cand.status == "verifying":
            return [one(str(c["name"]), "pending", say.NAMED_CHECK_RUNNING, page) for c in repo.checks]
        if cand.status == "queued":  # waiting for a (new) run: the last run's statuses stand until it is decided
            return []
        ran = {str(c["name"]): c for c in (cand.verifier or {}).get("checks") or []
               if isinstance(c, dict) and c.get("name")}
        posts = []
        for name, c in ran.items():
            outcome, required = str(c.get("outcome")), bool(c.get("required"))
            posts.append(one(name, "success" if outcome == "pass" or not required else "failure",
                             say.named_check_status(required, outcome, float(c.get("duration_ms") or 0) / 1000),
                             f"{base}/ui/jobs/{c['job']}/log" if base and c.get("job") else page))
        missing = [str(c["name"]) for c in repo.checks if str(c["name"]) not in ran]
        if missing and cand.status in checkrun.CONCLUSION and await self.db.jobs.jobs(candidate_id=cand.id):
            state = {"landed": "success", "rejected": "failure"}.get(cand.status, "error")  # as the trigger says
            posts += [one(name, state, say.named_check_not_run(cand.status), page) for name in missing]
        return posts


def _client(repo: Repo) -> ForgeClient:
    """The repository's forge client, with its credentials (``git.credentials``): a GitHub App's installation
    token, renewed on a 401, or the personal token of its variable."""
    assert repo.forge is not None
    forge, api = repo.forge, repo.forge_api_url
    creds = credentials.for_repo(repo)
    if creds.kind == "app":
        return Renewing(lambda token: client_for(forge, token=token, base_url=api), creds.token, creds.renew)
    token = os.environ.get(repo.forge_token_env or "")
    if not token:
        raise RuntimeError(say.forge_token_unset(repo.forge_token_env))
    return client_for(forge, token=token, base_url=api)
