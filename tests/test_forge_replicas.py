"""Stateless replicas for a forge repository: two ``mergebot serve`` processes on one PostgreSQL and separate data
directories (no shared disk), the repository's git on the forge (a bare repository standing in for GitHub's
remote), webhooks signed as GitHub signs them. Whatever one replica makes or receives, the other gets from the
forge: a candidate from its subtask branch, a merged commit from its ``mergebot-queue/...`` branch (deleted after
its verdict). The leader is SIGKILLed mid-landing; the other takes the queue over and everything lands once.
Real processes, real git, a real check; nothing mocked.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pygit2
import pytest

from mergebot.auth import Role
from mergebot.db.database import Database
from mergebot.landing.main.repos import add_repo, forge_settings, repos_root
from mergebot.rules import Rules
from tests.support.bot import BotProcess, check_command, forge_remote, git, make_project, until
from tests.support.forge_fleet import SECRET, TOKEN, ZERO, ForgeFleet
from tests.support.forge_standin import ForgeStandin

COMMON = {"MERGEBOT_VERIFIER_SANDBOX": "none", "MERGEBOT_JOB_LEASE_SECONDS": "2",
          "MERGEBOT_RECOVERY_GRACE_SECONDS": "0", "GITHUB_TOKEN": TOKEN, "MERGEBOT_WEBHOOK_SECRET": SECRET}


@dataclass
class Replicas:
    fleet: ForgeFleet
    url: str
    tmp: Path
    tokens: dict[str, str]
    bots: list[BotProcess] = field(default_factory=list)
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def replica(self, name: str, **env: str) -> BotProcess:
        """A replica on a data directory of its own (only the first one's holds the mirror ``repo add`` made); the
        replicas share one signing key's folder (``MERGEBOT_ATTEST_DIR``), as their operators would set it."""
        bot = BotProcess(self.url, self.tmp / f"data-{name}", log_name="serve.log", **COMMON,
                         MERGEBOT_ATTEST_DIR=str(self.tmp / "attest"), **env)
        self.bots.append(bot)
        return bot

    def worker(self, name: str, server: BotProcess) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"{name}.log", "ab")  # noqa: SIM115 (closed by the process's end)
        proc = subprocess.Popen(
            [sys.executable, "-m", "mergebot", "verifier", "worker", "--server", server.url, "--token",
             self.tokens["vera"], "--work-dir", str(self.tmp / name), "--sandbox", "none", "--heartbeat", "0.5"],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "MERGEBOT_TOKEN": ""})
        self.workers.append(proc)
        return proc

    async def push(self, title: str, files: dict[str, str], to: BotProcess) -> tuple[int, str]:
        """Ann claims a new subtask, pushes to its branch on the forge, and the push's webhook reaches ``to``."""
        f = self.fleet
        claim = await f.claimed(title)
        branch = f"refs/heads/subtasks/{claim.id}/v{claim.claim_version}"
        sha = f.push(f.clone(f"ann-{claim.id}"), files, branch)
        r = f.deliver(branch, ZERO, sha, "ann-gh", to=to)
        assert r.status_code == 202 and "queued as candidate" in r.json()["outcome"], r.text
        return claim.id, sha

    async def leaders(self) -> list[str]:
        events = await self.fleet.db.subtasks.events(limit=1000)
        return [e["detail"]["process"].rsplit(":", 1)[1] for e in events
                if e["kind"] == "queue_leader" and e["detail"]["repo"] == "calc"]

    async def wait_leader(self, bot: BotProcess, timeout: float = 30) -> None:
        assert bot.proc is not None
        deadline = time.monotonic() + timeout
        while not (got := await self.leaders()) or got[-1] != str(bot.proc.pid):
            assert time.monotonic() < deadline, self.logs()
            time.sleep(0.1)

    async def wait_landed(self, ids: list[int], timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while [(await self.fleet.db.subtasks.get_subtask(i)).status for i in ids] != ["landed"] * len(ids):
            assert time.monotonic() < deadline, self.logs()
            time.sleep(0.2)

    def queue_branches(self) -> list[str]:
        out = git(["for-each-ref", "--format=%(refname)", "refs/heads/mergebot-queue/"], self.fleet.remote).stdout
        return out.split()

    def wait_no_queue_branches(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while self.queue_branches():
            assert time.monotonic() < deadline, f"left on the forge: {self.queue_branches()}\n{self.logs()}"
            time.sleep(0.2)

    def logs(self) -> str:
        return "\n".join(f"--- {b.log}\n{b.log.read_text()[-2500:]}" for b in self.bots if b.log.exists()) + "\n" + \
            "\n".join(f"--- {p}\n{p.read_text()[-1500:]}" for p in self.tmp.glob("w*.log"))


@pytest.fixture
async def replicas(e2e_db: Database, e2e_db_url: str, tmp_path: Path,
                   monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Replicas]:
    db = e2e_db
    remote = forge_remote(make_project(tmp_path / "src"), tmp_path / "forge" / "calc.git")
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("MERGEBOT_WEBHOOK_SECRET", SECRET)
    tokens, ids = {}, {}
    for name, role in (("ann", Role.AGENT), ("vera", Role.VERIFIER)):
        agent, tokens[name] = await db.agents.add_agent(name=name, role=role)
        ids[name] = agent.id
    ann = ids["ann"]
    await db.forge.link(forge="github", login="Ann-GH", agent_id=ann)
    (tmp_path / "work").mkdir()
    with ForgeStandin(token=TOKEN, bare_repo=remote) as forge:
        await add_repo(db, repos_root(tmp_path / "data-a"), name="calc", source=None,
                       rules=Rules.of(verifier_command=check_command(), verifier_timeout_s=60),
                       forge=forge_settings("github", "acme/calc", api_url=forge.url, git_url=str(remote)))
        fleet = ForgeFleet(None, db, forge, remote, tmp_path / "work", {"ann": ann})  # type: ignore[arg-type]
        r = Replicas(fleet, e2e_db_url, tmp_path, tokens)
        try:
            yield r
        finally:
            for w in r.workers:
                w.kill()
                w.wait()
            for b in r.bots:
                b.stop()


def mirror_of(bot: BotProcess) -> pygit2.Repository:
    return pygit2.Repository(str(repos_root(bot.data_dir) / "calc.git"))


async def test_a_leader_killed_mid_landing_hands_a_forge_queue_to_a_replica_without_its_disk(
        replicas: Replicas) -> None:
    """``a`` leads and dies right after its push to the forge's main, before the landed row. ``b`` never shared a
    byte of ``a``'s disk: it received the webhook, answered the remote worker's claims (bringing ``a``'s merge from
    its queue branch) and, once ``a`` is dead, finishes ``a``'s landing from its intent and lands the next one."""
    r = replicas
    a = r.replica("a", MERGEBOT_VERIFIER_WORKERS="0", MERGEBOT_CRASH_AT="after_forge_push").start()
    await r.wait_leader(a)
    b = r.replica("b", MERGEBOT_VERIFIER_WORKERS="0").start()
    assert not (repos_root(b.data_dir) / "calc.git").exists()
    r.worker("w", b)  # checks run on another machine, which knows only b

    first, sha1 = await r.push("subtract", {"calc.py": "def add(a, b):\n    return a + b\n\n\n"
                                                       "def sub(a, b):\n    return a - b\n"}, to=b)
    assert a.wait_exit(90) == -signal.SIGKILL, r.logs()  # a merged what b received, got it verified, pushed, died
    await r.wait_leader(b)
    await r.wait_landed([first])
    second, sha2 = await r.push("multiply", {"mul.py": "def mul(a, b):\n    return a * b\n"}, to=b)
    await r.wait_landed([first, second])

    db = r.fleet.db
    landed = sorted(await db.landing.landed(repo="calc", limit=100), key=lambda x: x.id)
    assert [x.subtask_id for x in landed] == [first, second]  # each once
    assert [x.candidate_sha for x in landed] == [sha1, sha2]
    assert r.fleet.forge_main() == landed[-1].merged_sha
    cands = await db.landing.candidates(repo="calc", limit=100)
    assert sorted(c["subtask_id"] for c in cands if c["status"] == "landed") == [first, second]
    assert await db.landing.pending_intents("calc") == []
    assert a.proc is not None and b.proc is not None
    assert await r.leaders() == [str(a.proc.pid), str(b.proc.pid)]
    jobs = [j for j in await db.jobs.jobs(limit=100) if j["purpose"] == "candidate"]
    first_merge = landed[0].merged_sha
    ran = [j for j in jobs if j["commit_sha"] == first_merge and j["outcome"] == "pass"]
    assert ran and all(j["worker_name"].startswith("vera:") for j in ran)  # a's merge ran on the remote worker
    assert first_merge in mirror_of(b)  # b brought a's merge from the forge's queue branch to serve it
    assert sha1 in mirror_of(a)  # a, which never saw the webhook, fetched the candidate from its subtask branch
    r.wait_no_queue_branches()  # b's sweep deleted the branch a left; its own went after their verdicts

    # a signed the first landing's statements before it died (b finished that landing from its intent), b the
    # second's, with the one key the replicas share: the forge's notes verify against the one trust file
    remote = str(r.fleet.remote)
    await until(lambda: git(["notes", "--ref", "mergebot", "show", landed[-1].merged_sha], remote,
                            check=False).returncode == 0, timeout=30)
    verified = subprocess.run([sys.executable, "-m", "mergebot", "attest", "verify", "--json", "--git-dir", remote,
                               "--trust", str(r.tmp / "attest" / "trust.json")], capture_output=True, text=True)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert json.loads(verified.stdout)["checked"] == 2
    assert not (a.data_dir / "attest").exists() and not (b.data_dir / "attest").exists()


async def test_a_replica_runs_the_leaders_merge_from_its_queue_branch(replicas: Replicas) -> None:
    """The in-process workers of a replica that is not the leader fetch the leader's merge from the forge."""
    r = replicas
    a = r.replica("a", MERGEBOT_VERIFIER_WORKERS="0").start()
    await r.wait_leader(a)
    b = r.replica("b", MERGEBOT_VERIFIER_WORKERS="1").start()
    sub, sha = await r.push("subtract", {"calc.py": "def add(a, b):\n    return a + b\n\n\n"
                                                    "def sub(a, b):\n    return a - b\n"}, to=a)
    await r.wait_landed([sub])
    (landed,) = await r.fleet.db.landing.landed(repo="calc", limit=10)
    assert landed.candidate_sha == sha and r.fleet.forge_main() == landed.merged_sha
    jobs = [j for j in await r.fleet.db.jobs.jobs(limit=100) if j["commit_sha"] == landed.merged_sha]
    assert b.proc is not None and jobs and all(f"/{b.proc.pid}/" in j["worker_name"] for j in jobs)
    assert landed.merged_sha in mirror_of(b)
    r.wait_no_queue_branches()
