"""Webhook redelivery storms in forge mode (the GitHub stand-in of tests/support/forge_standin/, a bare repository
as the forge's git remote, signed deliveries): the same delivery 50 times at once lands once; the same push
announced under 50 different delivery ids at once is queued once; replaying the storm after the landing changes
nothing.
Then the invariant check, through the bot's mirror of the forge repository."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mergebot.auth import Role
from mergebot.db.database import Database
from mergebot.drill.invariants import Push
from mergebot.drill.storm import github_push_body, redelivery_storm
from mergebot.landing.main.repos import add_repo, forge_settings, repos_root
from mergebot.rules import Rules
from tests.drills.conftest import QUICK_CHECK, Rig
from tests.support.bot import BotProcess, commit, forge_remote, git, make_project
from tests.support.forge_standin import ForgeStandin

SECRET = "drill-webhook-secret"
TOKEN = "ghp_drill_standin"
ZERO = "0" * 40


@dataclass
class ForgeRig:
    rig: Rig
    forge: ForgeStandin
    remote: Path
    ann: int
    ann_token: str

    def forge_main(self) -> str:
        return git(["rev-parse", "refs/heads/main"], self.remote).stdout.strip()


@pytest.fixture
async def forge_rig(e2e_db: Database, e2e_db_url: str, tmp_path: Path,
                    monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[ForgeRig]:
    db = e2e_db
    remote = forge_remote(make_project(tmp_path / "src"), tmp_path / "forge" / "calc.git")
    for name, value in (("GITHUB_TOKEN", TOKEN), ("MERGEBOT_WEBHOOK_SECRET", SECRET)):
        monkeypatch.setenv(name, value)
    ann, ann_token = await db.agents.add_agent(name="ann", role=Role.AGENT)
    _, admin = await db.agents.add_agent(name="root", role=Role.ADMIN)
    await db.forge.link(forge="github", login="ann-gh", agent_id=ann.id)
    with ForgeStandin(token=TOKEN, bare_repo=remote) as forge:
        data = tmp_path / "data"
        await add_repo(db, repos_root(data), name="calc", source=None, rules=Rules.of(verifier_command=QUICK_CHECK,
                       verifier_timeout_s=60, protected_paths=["ci/"]),
                       forge=forge_settings("github", "acme/calc", api_url=forge.url, git_url=str(remote)))
        bot = BotProcess(e2e_db_url, data, GITHUB_TOKEN=TOKEN, MERGEBOT_WEBHOOK_SECRET=SECRET,
                         MERGEBOT_VERIFIER_SANDBOX="none").start()
        (tmp_path / "work").mkdir()
        try:
            yield ForgeRig(Rig(bot, db, admin, tmp_path / "work", data, repo="calc"), forge, remote, ann.id,
                           ann_token)
        finally:
            bot.stop()


async def push_to_forge(f: ForgeRig, title: str, name: str) -> tuple[int, str, str]:
    sub, _ = await f.rig.db.subtasks.create_subtask(actor_id=None, title=title)
    claim = await f.rig.db.subtasks.claim(agent_id=f.ann)
    assert claim is not None and claim.id == sub.id
    wt = f.rig.work / name
    git(["clone", "-q", str(f.remote), str(wt)], f.rig.work)
    sha = commit(wt, {f"{name}.txt": f"{title}\n"})
    ref = f"refs/heads/subtasks/{sub.id}/v{claim.claim_version}"
    git(["push", "-q", "origin", f"HEAD:{ref}"], wt)
    return sub.id, ref, sha


async def landed_once(f: ForgeRig, sid: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while (await f.rig.db.subtasks.get_subtask(sid)).status != "landed":
        assert time.monotonic() < deadline, f.rig.bot.log.read_text()[-3000:]
        time.sleep(0.2)


async def test_redelivery_storms_land_once(forge_rig: ForgeRig) -> None:
    f = forge_rig
    start = f.forge_main()
    one, ref1, sha1 = await push_to_forge(f, "storm, one id", "one")
    body1 = github_push_body("acme/calc", ref1, ZERO, sha1, "ann-gh")
    answers = redelivery_storm(f.rig.bot.url, "github", SECRET, body1, copies=50)
    counts = collections.Counter(status for status, _ in answers)
    assert set(counts) <= {202, 200, 503} and counts[202] == 1, counts  # one processed it; the rest were told
    assert all("being processed" in b["error"] for s, b in answers if s == 503)
    assert all(b.get("duplicate") is True for s, b in answers if s == 200)
    assert "queued as candidate" in next(b["outcome"] for s, b in answers if s == 202)

    two, ref2, sha2 = await push_to_forge(f, "storm, fifty ids", "two")
    body2 = github_push_body("acme/calc", ref2, ZERO, sha2, "ann-gh")
    answers = redelivery_storm(f.rig.bot.url, "github", SECRET, body2, copies=50, same_id=False)
    assert {status for status, _ in answers} == {202}, collections.Counter(s for s, _ in answers)
    outcomes = [b["outcome"] for _, b in answers]
    assert all("queued as candidate" in o or "already queued" in o for o in outcomes), outcomes

    await landed_once(f, one)
    await landed_once(f, two)
    replay = redelivery_storm(f.rig.bot.url, "github", SECRET, body1, copies=50)  # a new id: the forge's replay
    assert {status for status, _ in replay} <= {200, 202, 503}
    assert all("already queued" in b["outcome"] or b.get("duplicate") for s, b in replay if s in (200, 202))
    time.sleep(1.0)

    for sid, sha in ((one, sha1), (two, sha2)):
        cands = await f.rig.db.landing.candidates(subtask_id=sid)
        assert [(c["sha"], c["status"]) for c in cands] == [(sha, "landed")]
        assert len(await f.rig.db.landing.landed(subtask_id=sid)) == 1
        statuses = [s.state for s in f.forge.statuses(sha)]
        assert statuses.count("success") == 1 and statuses[-1] == "success", statuses
    main = f.forge_main()
    chain = git(["rev-list", "--first-parent", f"{start}..{main}"], f.remote).stdout.split()
    assert len(chain) == 2  # main moved exactly twice on the forge: once per subtask
    pushes = [Push("ann", one, 1, sha1, "accepted"), Push("ann", two, 1, sha2, "accepted")]
    assert f.rig.violations(pushes) == []

    # The same storm from `mergebot drill` against the running server, as an operator would run it.
    out = subprocess.run([sys.executable, "-m", "mergebot", "drill", "--url", f.rig.bot.url, "--token", f.rig.admin,
                          "--repo", "calc", "--skip", "stream", "--skip", "lease", "--forge-login", "ann-gh",
                          "--forge-agent-token", f.ann_token, "--json"], capture_output=True, text=True, timeout=180,
                         env={**os.environ, "MERGEBOT_WEBHOOK_SECRET": SECRET, "MERGEBOT_TOKEN": ""})
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert report["storm"]["problems"] == [] and report["storm"]["candidates"] == 1, report
    assert set(report["storm"]["statuses"]) <= {200, 202, 503} and report["violations"] == []
    assert (await f.rig.db.subtasks.get_subtask(report["storm"]["subtask"])).status == "landed"
