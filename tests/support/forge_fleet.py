"""Forge mode end to end: a real ``mergebot serve`` whose repository ``calc`` lives on a bare repository standing
in for GitHub's git remote, the forge stand-in for its API, and webhook deliveries signed as GitHub signs them.
The ``forge_fleet`` fixture (conftest.py) gives a :class:`ForgeFleet` with agents ann (her login ``Ann-GH`` linked)
and bob (not linked).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from mergebot.db.database import Database
from mergebot.landing.main.repos import add_repo, forge_settings, repos_root
from mergebot.messages.refs import subtask_ref
from mergebot.models import Subtask
from mergebot.rules import Rules
from tests.support.bot import BotProcess, check_command, commit, forge_remote, git
from tests.support.forge_standin import ForgeStandin, PostedStatus
from tests.support.webhooks import PAYLOADS

SECRET = "webhook-secret-for-tests"
TOKEN = "ghp_standin_token"
ZERO = "0" * 40


@dataclass
class ForgeFleet:
    """The bot, its database, the forge stand-in, the forge's bare remote of ``calc``, a folder for clones, and
    the agents' ids by name."""

    bot: BotProcess
    db: Database
    forge: ForgeStandin
    remote: Path
    work: Path
    agents: dict[str, int]

    async def claimed(self, title: str, who: str = "ann") -> Subtask:
        """A new subtask, claimed by ``who`` (it is the only one ready): the claimed row."""
        sub, _ = await self.db.subtasks.create_subtask(actor_id=None, title=title)
        claim = await self.db.subtasks.claim(agent_id=self.agents[who])
        assert claim is not None and claim.id == sub.id
        return claim

    def clone(self, name: str, remote: Path | None = None) -> Path:
        wt = self.work / name
        git(["clone", "-q", str(remote or self.remote), str(wt)], self.work)
        return wt

    def push(self, wt: Path, files: dict[str, str], ref: str) -> str:
        """Commit ``files`` in the clone ``wt`` and push the commit to ``ref`` on its remote; the commit's sha."""
        sha = commit(wt, files)
        git(["push", "-q", "origin", f"HEAD:{ref}"], wt)
        return sha

    def push_claim(self, wt: Path, claim: Subtask, files: dict[str, str]) -> tuple[str, str]:
        """Commit ``files`` in the clone ``wt`` and push the commit to the claim's own branch: the full ref and
        the commit's sha."""
        ref = subtask_ref(claim.id, claim.claim_version)
        return ref, self.push(wt, files, ref)

    def forge_main(self, remote: Path | None = None) -> str:
        return git(["rev-parse", "refs/heads/main"], remote or self.remote).stdout.strip()

    def deliver(self, ref: str, before: str, after: str, sender: str, *, delivery: str | None = None,
                body: bytes | None = None, event: str = "push", form: bool = False,
                to: BotProcess | None = None) -> httpx.Response:
        if body is None:
            payload: dict[str, Any] = json.loads((PAYLOADS / "github_push_branch_update.json").read_bytes())
            payload.update(ref=ref, before=before, after=after, created=before == ZERO, deleted=False, forced=False)
            payload["repository"]["full_name"] = "acme/calc"
            payload["sender"]["login"] = sender
            payload["pusher"] = {"name": sender, "email": f"{sender}@example.com"}
            body = json.dumps(payload).encode()
        if form:  # GitHub's default for a new webhook: the JSON as a form's payload field, signed as sent
            body = b"payload=" + urllib.parse.quote_plus(body.decode()).encode()
        sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
                   "X-Hub-Signature-256": sig,
                   "Content-Type": "application/x-www-form-urlencoded" if form else "application/json"}
        return httpx.post(f"{(to or self.bot).url}/webhooks/github", content=body, headers=headers, timeout=30)

    def wait_status(self, sha: str, done: Callable[[list[PostedStatus]], bool],
                    timeout: float = 90) -> list[PostedStatus]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.forge.statuses(sha)
            if got and done(got):
                return got
            time.sleep(0.1)
        raise AssertionError(f"no final status for {sha[:12]}; got {self.forge.statuses(sha)}\n"
                             + self.bot.log.read_text()[-3000:])

    async def add_gitea_repo(self) -> Path:
        """A second repository, ``gcalc``, on Gitea (the same stand-in, under ``/api/v1``), with ann's Gitea login
        ``ann`` linked; its bare remote."""
        remote = forge_remote(self.remote, self.remote.with_name("gitea-calc.git"))
        await add_repo(self.db, repos_root(self.bot.data_dir), name="gcalc", source=None,
                       rules=Rules.of(verifier_command=check_command(), verifier_timeout_s=60),
                       forge=forge_settings("gitea", "acme/gcalc", url=self.forge.url, git_url=str(remote)))
        await self.db.forge.link(forge="gitea", login="ann", agent_id=self.agents["ann"])
        return remote


def final(statuses: list[PostedStatus]) -> bool:
    return statuses[-1].state in ("success", "failure", "error")


def pull_request(fixture: str, *, repo: str, head_ref: str, sha: str, sender: str, number: int | None = None,
                 **head: str) -> dict[str, Any]:
    """A recorded pull-request delivery aimed at ``repo``: from ``head_ref`` at ``sha`` into main, sent by
    ``sender`` (and renumbered, and its head given ``head``'s other fields, when asked)."""
    pr: dict[str, Any] = json.loads((PAYLOADS / fixture).read_bytes())
    if number is not None:
        pr["number"] = pr["pull_request"]["number"] = number
    pr["pull_request"]["head"].update(ref=head_ref, sha=sha, **head)
    pr["pull_request"]["base"]["ref"] = "main"
    pr["pull_request"]["head"]["repo"]["full_name"] = pr["pull_request"]["base"]["repo"]["full_name"] = repo
    pr["repository"]["full_name"] = repo
    pr["sender"]["login"] = sender
    return pr
