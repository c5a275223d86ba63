"""Replicas: several ``mergebot serve`` processes on one PostgreSQL server and one data directory's repositories,
with the checks run by a remote ``mergebot verifier worker`` over HTTP. Agents push to either replica; one
replica leads each repository's queue (an advisory lock). SIGKILL the leader in the middle of a landing, or the
worker in the middle of a run: another replica takes the leadership, reconciles, and the queue goes on, and
nothing lands twice. Real processes, real git over HTTP, a real check; nothing mocked.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from mergebot import agent
from mergebot import messages as say
from mergebot.auth import Role
from mergebot.client import ApiError, Client
from mergebot.db.database import Database
from mergebot.drill.gather import stable_check
from mergebot.drill.invariants import Push
from mergebot.landing.main.repos import add_repo, repos_root
from mergebot.rules import Rules, RulesChange
from tests.support.bot import BotProcess, check_command, commit, git, make_project, stop_keepers, until

COMMON = {"MERGEBOT_VERIFIER_WORKERS": "0", "MERGEBOT_VERIFIER_SANDBOX": "none", "MERGEBOT_JOB_LEASE_SECONDS": "2",
          "MERGEBOT_RECOVERY_GRACE_SECONDS": "0"}


@dataclass
class Replicas:
    db: Database
    url: str
    data: Path
    work: Path
    tokens: dict[str, str]
    bots: list[BotProcess]
    workers: list[subprocess.Popen[bytes]]

    def replica(self, name: str, **env: str) -> BotProcess:
        bot = BotProcess(self.url, self.data, log_name=f"serve-{name}.log", **COMMON, **env)
        self.bots.append(bot)
        return bot

    def worker(self, name: str, *servers: BotProcess) -> subprocess.Popen[bytes]:
        """A remote worker; given several replicas (``--server A,B``) it goes on to the next when one dies."""
        log = open(self.work / f"{name}.log", "ab")  # noqa: SIM115 (closed by the process's end)
        proc = subprocess.Popen(
            [sys.executable, "-m", "mergebot", "verifier", "worker", "--server", ",".join(s.url for s in servers),
             "--token",
             self.tokens["vera"], "--work-dir", str(self.work / name), "--sandbox", "none", "--heartbeat", "0.5"],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "MERGEBOT_TOKEN": ""})
        self.workers.append(proc)
        return proc

    def push(self, who: str, server: BotProcess, files: dict[str, str]) -> Push:
        """Claim the next subtask through ``server``, commit ``files`` and push them to ``server``'s remote."""
        wt = self.work / f"{who}-{len(os.listdir(self.work))}"
        got = agent.start(Client(server.url, self.tokens[who]), server.url, self.tokens[who], "demo", wt)
        assert got is not None, "nothing to claim"
        claim, _ = got
        sha = commit(wt, files)
        git(["push", "-q", "origin", f"HEAD:refs/heads/{claim.branch}"], wt)
        return Push(who, claim.subtask_id, claim.claim_version, sha, "accepted")

    async def leaders(self) -> list[str]:
        """The processes that took the leadership of demo's queue, in order."""
        events = await self.db.subtasks.events(limit=1000)
        return [e["detail"]["process"] for e in events if e["kind"] == "queue_leader" and e["detail"]["repo"] == "demo"]

    async def wait_leader(self, bot: BotProcess, timeout: float = 30) -> None:
        assert bot.proc is not None
        deadline = time.monotonic() + timeout
        while not (await self.leaders()) or not (await self.leaders())[-1].endswith(f":{bot.proc.pid}"):
            assert time.monotonic() < deadline, f"{bot.log} never led demo:\n{bot.log.read_text()[-3000:]}"
            time.sleep(0.1)

    async def held_leader(self, step: str) -> tuple[Path, BotProcess, BotProcess]:
        """``a`` leads, its whole process held still at ``step`` of its landing while the returned flag exists; ``b``
        beside it, with the worker that runs the checks (through b)."""
        flag = self.work.parent / "hold"
        flag.touch()
        a = self.replica("a", MERGEBOT_PAUSE_AT=f"{step}:{flag}").start()
        await self.wait_leader(a)
        b = self.replica("b").start()
        self.worker("w", b)
        return flag, a, b

    async def wait_landed(self, ids: list[int], timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while True:
            subs = [await self.db.subtasks.get_subtask(i) for i in ids]
            busy = [c["id"] for c in await self.db.landing.candidates(repo="demo", limit=1000)
                    if c["status"] in ("queued", "verifying", "landing")]
            if all(s.status == "landed" for s in subs) and not busy:
                return
            assert time.monotonic() < deadline, (f"not landed: {[(s.id, s.status) for s in subs]}, busy {busy}\n"
                                                 + "\n".join(b.log.read_text()[-2000:] for b in self.bots))
            time.sleep(0.2)

    async def assert_books_balance(self, pushes: list[Push], ids: list[int], via: BotProcess) -> None:
        """One landed row per subtask, every landed sha on main and no commit on main without a landed row, no
        candidate landed twice, every intent resolved, and the reconciler's findings empty."""
        landed = await self.db.landing.landed(repo="demo", limit=1000)
        assert sorted(r.subtask_id for r in landed) == sorted(ids)
        assert len({r.merged_sha for r in landed}) == len(landed)
        cands = await self.db.landing.candidates(repo="demo", limit=1000)
        assert sorted(c["subtask_id"] for c in cands if c["status"] == "landed") == sorted(ids)  # none twice
        assert await self.db.landing.pending_intents("demo") == []
        client = Client(via.url, self.tokens["root"], timeout=30)
        violations = stable_check(client, via.url, self.tokens["root"], "demo", self.work / "check", pushes,
                                  settled=True, attempts=3)
        assert violations == [], violations
        assert client.get("/api/v1/findings", repo="demo")["findings"] == []


@pytest.fixture
async def replicas(e2e_db: Database, e2e_db_url: str, tmp_path: Path) -> AsyncIterator[Replicas]:
    tokens = {}
    for name, role in (("root", Role.ADMIN), ("vera", Role.VERIFIER), ("ann", Role.AGENT), ("bob", Role.AGENT)):
        _, tokens[name] = await e2e_db.agents.add_agent(name=name, role=role)
    data = tmp_path / "data"
    await add_repo(e2e_db, repos_root(data), name="demo", source=str(make_project(tmp_path / "src")),
                   rules=Rules.of(verifier_command=check_command(), verifier_timeout_s=60, protected_paths=["ci/"]))
    (tmp_path / "work").mkdir()
    r = Replicas(e2e_db, e2e_db_url, data, tmp_path / "work", tokens, [], [])
    try:
        yield r
    finally:
        stop_keepers(r.work)
        for w in r.workers:
            w.kill()
            w.wait()
        for b in r.bots:
            b.stop()


async def test_leaders_killed_at_each_landing_step_are_replaced_and_nothing_lands_twice(replicas: Replicas) -> None:
    """Three replicas, each set to SIGKILL itself at one step of its first landing: after the intent (a), after
    the compare-and-swap (b), after the landed row (c). Each death hands the queue to a replica still alive,
    which reconciles what the dead one left (rolls the intent back, or finishes it) and lands; at the end a
    replica that does not crash (d) takes over. Agents push to whichever replica is up."""
    r = replicas
    subs = [(await r.db.subtasks.create_subtask(actor_id=None, title=f"change {i}"))[0] for i in range(3)]
    steps = {"a": "after_intent", "b": "after_cas", "c": "after_commit"}
    bots = {name: r.replica(name, MERGEBOT_CRASH_AT=step).start() for name, step in steps.items()}
    await r.wait_leader(bots["a"])
    final = r.replica("d")  # started once the others are dead
    worker = r.worker("w1", bots["c"], final, bots["b"])  # the checks run on another "machine", via any replica up

    def alive() -> list[BotProcess]:
        return [b for b in bots.values() if b.proc is not None and b.proc.poll() is None]

    async def until_alive(n: int) -> None:
        deadline = time.monotonic() + 90
        while len(alive()) > n:
            assert time.monotonic() < deadline, [b.log.read_text()[-2000:] for b in bots.values()]
            time.sleep(0.1)
        assert len(alive()) == n

    pushes = [r.push("ann", bots["b"], {"one.py": "x = 1\n"})]
    await r.wait_landed([subs[0].id])  # a died after its intent; the next leader landed it, and died too
    await until_alive(1)
    (last,) = alive()
    pushes.append(r.push("bob", last, {"two.py": "x = 2\n"}))
    assert last.wait_exit(90) == -signal.SIGKILL  # the last crashy replica died landing it
    # nobody else kills them: each died by its own crash point, at its step
    assert all(b.proc is not None and b.proc.returncode == -signal.SIGKILL for b in bots.values())
    final.start()
    await r.wait_leader(final)
    await r.wait_landed([subs[1].id])  # finished by d's reconcile if the death came after the swap
    pushes.append(r.push("ann", final, {"three.py": "x = 3\n"}))
    await r.wait_landed([s.id for s in subs])

    leaders = [p.rsplit(":", 1)[1] for p in await r.leaders()]
    pids = {name: str(b.proc.pid) for name, b in bots.items() if b.proc is not None}
    assert final.proc is not None and len(leaders) == 4 and leaders[0] == pids["a"]
    assert set(leaders[1:3]) == {pids["b"], pids["c"]} and leaders[3] == str(final.proc.pid)
    await r.assert_books_balance(pushes, [s.id for s in subs], final)
    assert worker.poll() is None  # the remote worker outlived every replica it knew dying, and worked on


async def test_a_remote_worker_killed_mid_run_is_replaced_and_its_late_result_refused(replicas: Replicas) -> None:
    r = replicas
    await r.db.repos.update_repo("demo", RulesChange.of(verifier_command=f"sleep 2 && {check_command()}"))
    sub, _ = await r.db.subtasks.create_subtask(actor_id=None, title="slow")
    a = r.replica("a").start()
    await r.wait_leader(a)
    b = r.replica("b").start()
    doomed = r.worker("doomed", a)
    pushes = [r.push("ann", b, {"slow.py": "x = 1\n"})]
    deadline = time.monotonic() + 60
    while not (running := [j for j in await r.db.jobs.jobs(status="running") if j["purpose"] == "candidate"]):
        assert time.monotonic() < deadline, (r.work / "doomed.log").read_text()[-3000:]
        time.sleep(0.05)
    doomed.send_signal(signal.SIGKILL)
    doomed.wait()
    job = running[0]
    r.worker("rescuer", b)
    await r.wait_landed([sub.id])
    done = (await r.db.jobs.get_jobs([job["id"]]))[job["id"]]
    assert done.status == "done" and done.outcome == "pass" and done.worker_name != job["worker_name"]
    assert done.claim_version == job["claim_version"] + 1  # run again elsewhere after its lease
    vera = Client(a.url, r.tokens["vera"])
    with pytest.raises(ApiError) as err:  # the killed worker's result, arriving late: refused
        vera.post(f"/api/v1/verify-jobs/{job['id']}/result",
                  {"claim_version": job["claim_version"], "result": {"outcome": "fail"}})
    assert err.value.status == 409 and err.value.code == "claim_superseded"

    # Then the leader goes too: b leads, and the rescuer, which knows only b, runs the next check.
    nxt, _ = await r.db.subtasks.create_subtask(actor_id=None, title="after the leader")
    assert a.proc is not None and b.proc is not None
    a.proc.send_signal(signal.SIGKILL)
    assert a.wait_exit(30) == -signal.SIGKILL
    await r.wait_leader(b)
    pushes.append(r.push("bob", b, {"next.py": "y = 1\n"}))
    await r.wait_landed([sub.id, nxt.id])
    assert [p.rsplit(":", 1)[1] for p in await r.leaders()] == [str(a.proc.pid), str(b.proc.pid)]
    await r.assert_books_balance(pushes, [sub.id, nxt.id], b)


@pytest.mark.parametrize("step", ["after_cas", "after_intent"])
async def test_a_leader_that_lost_its_lock_mid_landing_writes_nothing_over_the_new_leaders(
        replicas: Replicas, step: str) -> None:
    """The protocol model's take-over finding (docs/protocol.md, "Findings"), on real processes: ``a`` leads and is
    held still at ``step`` of its landing while its lock's session is ended under it (as a broken connection would
    end it), so ``b`` takes the lead and reconciles a's intent. Before a locked the intent's row (after_intent), b
    rolls it back, and a, let go, finds it settled and moves nothing (before the fix its compare-and-swap still moved
    main); past its compare-and-swap (after_cas) a holds the row, b's reconciler waits, and a, let go, records its
    landing (before the fix b finished it and a then cancelled the landed candidate). Either way the candidate
    landed once and the books balance: no finding, nothing pending."""
    r = replicas
    sub, _ = await r.db.subtasks.create_subtask(actor_id=None, title="taken over mid-landing")
    flag, a, b = await r.held_leader(step)
    pushes = [r.push("ann", b, {"one.py": "x = 1\n"})]
    reached = Path(f"{flag}.reached")
    await until(reached.exists, timeout=90)
    with psycopg.connect(r.url, autocommit=True) as conn:  # a's leadership ends under it
        ended = conn.execute("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' "
                             "AND classid = 7243502 AND granted").fetchall()
    assert ended and all(ok for (ok,) in ended)
    await r.wait_leader(b)

    async def reconciled() -> bool:
        return await r.db.landing.pending_intents("demo") == []

    if step == "after_intent":
        await until(reconciled, timeout=60)  # b rolled a's intent back: a had not locked it yet
    flag.unlink()  # a goes on with its landing
    if step == "after_intent":
        await until(lambda: "settled by the leader that took over" in a.log.read_text(), timeout=60)
    await r.wait_landed([sub.id])
    cands = await r.db.landing.candidates(repo="demo", subtask_id=sub.id, limit=10)
    assert [c["status"] for c in cands if c["status"] == "landed"] == ["landed"], cands
    await r.assert_books_balance(pushes, [sub.id], b)  # one landed row, nothing pending, no finding


@pytest.mark.parametrize("step", ["after_intent", "before_intent"])
async def test_a_leads_cancel_under_a_landing_leaves_no_commit_without_its_landed_row(
        replicas: Replicas, step: str) -> None:
    """The protocol model's cancel finding (docs/protocol.md, "Findings"), on real processes: ``a`` leads and is held
    still at ``step`` of its landing while a lead cancels the subtask through ``b``'s API (and its command line).
    After the intent (main about to move) the cancel is refused with a typed answer (409 ``being_landed``, its
    sentence saying to wait for the verdict); let go, ``a`` lands the candidate with its landed row. Before the
    intent the cancel is taken, and ``a``'s intent, fenced again in its own transaction, is never written: main keeps
    its commit and nothing lands. Either way no ``landed_without_claim`` finding (before the fix the cancel was taken
    under the intent, main moved to the cancelled subtask's commit and the landing recorded that finding)."""
    r = replicas
    sub, _ = await r.db.subtasks.create_subtask(actor_id=None, title="cancelled mid-landing")
    flag, _, b = await r.held_leader(step)
    bare = repos_root(r.data) / "demo.git"
    main_before = git(["rev-parse", "refs/heads/main"], bare).stdout.strip()
    pushes = [r.push("ann", b, {"one.py": "x = 1\n"})]
    await until(Path(f"{flag}.reached").exists, timeout=90)
    (cand,) = await r.db.landing.candidates(repo="demo", subtask_id=sub.id, limit=10)
    lead = Client(b.url, r.tokens["root"], timeout=30)
    if step == "after_intent":
        assert cand["status"] == "landing"
        with pytest.raises(ApiError) as err:
            lead.post(f"/api/v1/subtasks/{sub.id}/cancel", {"reason": "not needed"})
        said = say.being_landed(sub.id, cand["id"])
        assert (err.value.status, err.value.code, err.value.message) == (409, "being_landed", said)
        assert err.value.body["error"]["kind"] == "being_landed" and err.value.body["error"]["candidate"] == cand["id"]
        out = subprocess.run([sys.executable, "-m", "mergebot", "cancel", str(sub.id)], capture_output=True, text=True,
                             env={**os.environ, "MERGEBOT_URL": b.url, "MERGEBOT_TOKEN": r.tokens["root"]},
                             check=False, timeout=60)
        assert out.returncode == 1 and out.stderr.strip() == f"mergebot: refused (409 being_landed): {said}", out
        assert (await r.db.subtasks.get_subtask(sub.id)).status == "submitted"
        flag.unlink()  # a goes on: main moves, and the landing is recorded
        await r.wait_landed([sub.id])
        await r.assert_books_balance(pushes, [sub.id], b)  # its landed row, nothing pending, no finding
        return
    assert cand["status"] == "verifying"
    assert lead.post(f"/api/v1/subtasks/{sub.id}/cancel", {"reason": "not needed"})["subtask"]["status"] == "cancelled"
    flag.unlink()  # a goes on to write its intent: the fence, read again under the subtask's lock, refuses it

    async def closed() -> bool:
        rows = await r.db.landing.candidates(repo="demo", subtask_id=sub.id, limit=10)
        return rows[0]["status"] not in ("verifying", "landing")

    await until(closed, timeout=60)
    assert lead.get("/api/v1/findings", repo="demo")["findings"] == []
    assert git(["rev-parse", "refs/heads/main"], bare).stdout.strip() == main_before
    assert await r.db.landing.landed(repo="demo") == [] and await r.db.landing.pending_intents("demo") == []
    (cand,) = await r.db.landing.candidates(repo="demo", subtask_id=sub.id, limit=10)
    # its agent is told the subtask was cancelled, and why, not that a newer push replaced it
    assert (cand["status"], cand["reason"]) == ("cancelled", say.fence_cancelled("not needed")), cand
    told = lead.get(f"/api/v1/candidates/{cand['id']}")["verdict"]
    assert (told["kind"], told["final"]) == ("cancelled", True), told
    assert (await r.db.subtasks.get_subtask(sub.id)).status == "cancelled"


async def test_a_leader_whose_lock_went_between_passes_stops_and_leads_again_only_by_taking_it(
        replicas: Replicas) -> None:
    """The protocol model's lock lost between passes (docs/protocol.md, ``lockouts``), on a real process: ``a`` leads
    and is idle when its lock's session is ended (as a broken connection, a pooler's or the server's timeout would end
    it) and another session (the other replica) takes the lock at once. ``a`` notices at its next pass (a query on its
    lock's connection: nothing else would tell it) and stops, its window dropped; once the other lets go, ``a`` takes
    the lock again, on the record and with a reconcile, and lands what is pushed then. Before, ``a`` never looked at
    its lock again (it only asked for the locks it did not hold), so it went on leading beside the other."""
    r = replicas
    sub, _ = await r.db.subtasks.create_subtask(actor_id=None, title="after the lead changed hands twice")
    a = r.replica("a").start()
    await r.wait_leader(a)
    with psycopg.connect(r.url, autocommit=True) as other:  # a's session ends; the lock is taken by another at once
        ended = other.execute("SELECT pg_terminate_backend(pid, 5000) FROM pg_locks WHERE locktype = 'advisory' "
                              "AND classid = 7243502 AND granted").fetchall()
        assert ended and all(ok for (ok,) in ended)
        other.execute("SELECT pg_advisory_lock(7243502, hashtext('demo'))")
        await until(lambda: "lost the lead of demo" in a.log.read_text(), timeout=30)

    async def led_again() -> bool:  # the other let go: a takes the lock again, a new leadership on the record
        return len(await r.leaders()) == 2

    await until(led_again, timeout=30)
    r.worker("w", a)
    pushes = [r.push("ann", a, {"one.py": "x = 1\n"})]
    await r.wait_landed([sub.id])
    await r.assert_books_balance(pushes, [sub.id], a)
    assert a.proc is not None and [p.rsplit(":", 1)[1] for p in await r.leaders()] == [str(a.proc.pid)] * 2
