"""Where a forge push is judged: a signed webhook becomes a candidate, exactly as a push to our own remote does.

Steps for one delivery (the pure parsing is ``mergebot.forge.sansio``; this module does the I/O):
  1. verify the signature against the webhook secrets of the forge repositories we manage (401, nothing
     recorded), parse the JSON strictly, whole or as a form's ``payload`` field (400; 415 for other bodies);
  2. record the delivery by id: a processed one is answered again without effect, a failed one is processed
     again, the same id with another body is refused (409) and logged;
  3. map the event: pings, tags, deletions, closed pull requests and other repositories are acknowledged and
     ignored; the sender's login must be linked to an agent (else a failure status says so);
  4. fetch the announced commit into the local mirror, judge it with the same rules as a push to our remote
     (``landing.intake.prereceive.judge_push``), and either queue it as a candidate or post a failure status with
     the reason.
A failure of our own (the forge unreachable, the database down) answers 5xx and marks the delivery failed,
so the forge's redelivery processes it again.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from mergebot import messages as say
from mergebot.db.database import Database
from mergebot.db.forge import GITEA_FAMILY, GITHUB_FAMILY
from mergebot.errors import ClaimSuperseded
from mergebot.forge import answer
from mergebot.forge.sansio import Delivery, WebhookError, parse_delivery, to_event, to_pull_comment, to_pull_review
from mergebot.git import mirror
from mergebot.git import repo as git
from mergebot.landing.intake.checks import RefUpdate
from mergebot.landing.intake.prereceive import accept_push, judge_push
from mergebot.messages.refs import parse_subtask_ref
from mergebot.models import Repo

log = logging.getLogger(__name__)
ZERO = "0" * 40


@dataclass
class Answer:
    status: int
    body: dict[str, object]


def _secret(repo: Repo) -> bytes | None:
    value = os.environ.get(repo.webhook_secret_env or "")
    return value.encode() if value else None


class WebhookHandler:
    def __init__(self, db: Database, repos_root: Path, poke: Callable[[], None] = lambda: None) -> None:
        self.db = db
        self.root = repos_root
        self.poke = poke

    async def handle(self, endpoint: str, headers: Sequence[tuple[str, str]], body: bytes) -> Answer:
        family = GITHUB_FAMILY if endpoint == "github" else GITEA_FAMILY
        repos = [r for r in await self.db.repos.forge_repos(family) if _secret(r)]
        secrets = [s for r in repos if (s := _secret(r))]
        try:
            delivery = parse_delivery(headers, body, secrets)
        except WebhookError as e:
            return Answer(e.status, {"error": e.message})
        if delivery.forge not in family:
            right = "github" if delivery.forge == "github" else "gitea"  # Forgejo's deliveries go to Gitea's endpoint
            return Answer(400, {"error": say.wrong_endpoint(delivery.forge, right)})
        digest = delivery.body_sha256
        state, row = await self.db.forge.begin_delivery(forge=delivery.forge, delivery_id=delivery.delivery_id,
                                                        event=delivery.event, body_sha256=digest)
        if state == "mismatch":
            await self.db.subtasks.log_event(actor_id=None, kind="webhook_refused", detail={
                "forge": delivery.forge, "delivery": delivery.delivery_id, "why": "same delivery id, different body",
                "sha256": digest, "recorded_sha256": row.body_sha256})
            log.warning("refused %s delivery %s: same id, different body", delivery.forge, delivery.delivery_id)
            return Answer(409, {"error": say.DELIVERY_BODY_CHANGED})
        if state == "done":
            return Answer(200, {"duplicate": True, "outcome": row.outcome})
        if state == "in_progress":  # not 2xx: if that processing died, the forge's redelivery is still taken
            return Answer(503, {"error": say.DELIVERY_IN_PROGRESS})
        signer = secrets[delivery.secret_index]
        try:
            status, outcome, repo_name = await self._process(delivery, [r for r in repos if _secret(r) == signer])
        except WebhookError as e:
            status, outcome, repo_name = e.status, e.message, None
        except Exception as e:
            log.exception("webhook delivery %s failed", delivery.delivery_id)
            await self.db.forge.finish_delivery(forge=delivery.forge, delivery_id=delivery.delivery_id,
                                                attempt=row.attempts, ok=False,
                                                http_status=502, outcome=f"failed: {e}", repo=None)
            return Answer(502, {"error": say.delivery_failed(type(e).__name__)})
        await self.db.forge.finish_delivery(forge=delivery.forge, delivery_id=delivery.delivery_id,
                                            attempt=row.attempts, ok=status < 400, http_status=status,
                                            outcome=outcome, repo=repo_name)
        return Answer(status, {"outcome": outcome} if status < 400 else {"error": outcome})

    async def _process(self, delivery: Delivery, signed_by: list[Repo]) -> tuple[int, str, str | None]:
        if delivery.event == "issue_comment":
            return await self._comment(delivery, signed_by)
        if delivery.event in ("pull_request_review", "pull_request_review_approved"):
            return await self._comment(delivery, signed_by, review=True)
        event = to_event(delivery)
        if event.event == "ping":
            return 200, say.PONG, None
        repo = next((r for r in signed_by if r.forge_repo and event.repository
                     and r.forge_repo.lower() == event.repository.lower()), None)
        if repo is None:
            return 202, say.foreign_repository(event.repository), None
        if event.event == "pull_request" and event.pr_number and event.ref and parse_subtask_ref(event.ref) \
                and event.base_ref == repo.target_ref:  # its one living comment follows its candidates from now on
            await self.db.forge.pull_seen(repo=repo.name, number=event.pr_number, head_ref=event.ref)
        if not event.candidate:
            return 202, say.not_a_candidate(event.event, tag=event.is_tag, deleted=event.deleted,
                                            action=event.action), repo.name
        assert event.ref is not None and event.head_sha is not None
        if event.base_ref is not None and event.base_ref != repo.target_ref:
            return 202, say.into_other_branch(event.base_ref, repo.target_ref), repo.name
        parsed = parse_subtask_ref(event.ref)
        if parsed is None:
            return 202, say.not_subtask_branch(event.ref), repo.name
        sha, arrived = event.head_sha, time.time()  # the delivery's arrival is the push's, for its stages
        forge = repo.forge or delivery.forge  # links follow the repository's forge, not a header
        agent = await self.db.forge.agent_for(forge=forge, login=event.sender or "")
        if agent is None:
            why = say.unlinked_sender(event.sender, forge)
            await self.db.subtasks.log_event(actor_id=None, kind="push_ignored", subtask_id=None, detail={
                "repo": repo.name, "ref": event.ref, "sha": sha, "sender": event.sender, "why": "unmapped sender"})
            await self.db.forge.queue_status(repo=repo.name, sha=sha, state="failure", description=why)
            return 202, why, repo.name
        live = await self.db.landing.live_candidate(subtask_id=parsed[0], claim_version=parsed[1], sha=sha)
        if live is not None:  # the push and its pull request announce one commit
            return 202, say.already_queued(sha, live.id, live.status), repo.name
        path = git.bare_path(self.root, repo.name)
        remote = mirror.remote_of(repo)
        await asyncio.to_thread(mirror.ensure_mirror, path, remote, repo.target_branch)  # a replica's own mirror
        # Deliveries may arrive late or out of order (a redelivery days later): only the branch's current tip
        # on the forge is a candidate, never an older push that a newer one replaced.
        tip = await asyncio.to_thread(mirror.forge_tip, path, remote, event.ref)
        if tip != sha:
            return 202, say.stale_delivery(event.ref, tip, sha), repo.name
        tag = hashlib.sha256(delivery.delivery_id.encode()).hexdigest()[:24]
        await asyncio.to_thread(mirror.fetch_commit, path, remote, sha, event.ref, tag)
        try:
            old = await asyncio.to_thread(lambda: git.head_of(git.open_repo(path), event.ref or "")) or ZERO
            update = RefUpdate(old, sha, event.ref)
            verdict = await judge_push(self.db, repo, path, agent, None, [update])
            if not verdict.ok:
                await self.db.forge.queue_status(repo=repo.name, sha=sha, state="failure",
                                                 description=verdict.message)
                return 202, say.refused(verdict.message), repo.name
            await asyncio.to_thread(mirror.set_branch, path, event.ref, sha,
                                    f"mergebot: {delivery.forge} delivery {delivery.delivery_id}")
            try:
                cands = await accept_push(self.db, repo, agent, [update], path, arrived)
            except ClaimSuperseded as e:  # reclaimed between the judgement and now
                await self.db.forge.queue_status(repo=repo.name, sha=sha, state="failure", description=e.message)
                return 202, say.refused(e.message), repo.name
        finally:
            await asyncio.to_thread(mirror.drop_incoming, path, tag)
        self.poke()
        return 202, say.queued_as(cands[0].id), repo.name  # (or already queued by a twin delivery)

    async def _comment(self, delivery: Delivery, signed_by: list[Repo],
                       review: bool = False) -> tuple[int, str, str | None]:
        """A comment on a pull request: a command for the bot is carried out and answered in its comment. An
        approving review is the command ``@mergebot approve`` from its author (``to_pull_review``)."""
        note = to_pull_review(delivery) if review else to_pull_comment(delivery)
        if note is None:
            return 202, say.NOT_AN_APPROVING_REVIEW if review else say.NOT_A_NEW_COMMENT, None
        repo = next((r for r in signed_by if r.forge_repo and r.forge_repo.lower() == note.repository.lower()), None)
        if repo is None:
            return 202, say.foreign_repository(note.repository), None
        outcome = await answer.carry_out(self.db, self.root, repo, note)
        self.poke()
        return 202, outcome, repo.name

