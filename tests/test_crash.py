"""Crash drills for the landing path: SIGKILL the bot at each step, restart it, and check the books balance.

The bot kills itself with SIGKILL at the named step (``MERGEBOT_CRASH_AT``, a test hook in
``mergebot.landing.context.crash_point``): after verification, after the intent is written, after main moved but
before the database commit, and after the commit. After a restart the reconciler must leave exactly one landed
row per landed commit, main's history fully explained, every intent resolved, and no subtask lost.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import socket
import time
from pathlib import Path

import pygit2
import pytest

from mergebot import agent
from mergebot.git import notes
from mergebot.landing.main.orphans import queue_orphans
from tests.support.bot import Fleet, commit, git, until


async def wait_status(fleet: Fleet, subtask_id: int, status: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (await fleet.db.subtasks.get_subtask(subtask_id)).status == status:
            return
        time.sleep(0.1)
    raise AssertionError(f"subtask {subtask_id} never became {status}; log:\n{fleet.bot.log.read_text()[-3000:]}")


@pytest.mark.parametrize("step", [pytest.param(step, marks=pytest.mark.bot_env(MERGEBOT_CRASH_AT=step))
                                  for step in ("after_verify", "after_intent", "after_cas", "after_commit")])
async def test_sigkill_at_each_landing_step(fleet: Fleet, step: str) -> None:
    # the bot runs with MERGEBOT_CRASH_AT=step (the mark): it dies at that step of the landing
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="work")
    child, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="after", depends_on=[sub.id])
    before = fleet.main()

    claim, wt = fleet.start("ann")
    sha = commit(wt, {"feature.txt": "done\n"})
    git(["push", "-q", "origin", f"HEAD:refs/heads/{claim.branch}"], wt)
    assert fleet.bot.wait_exit(60) == -9  # the bot died by SIGKILL at that step

    moved = fleet.main() != before
    assert moved == (step in ("after_cas", "after_commit"))

    fleet.bot.start()  # no crash this time: the reconciler runs first, then the queue
    await wait_status(fleet, sub.id, "landed")
    await wait_status(fleet, child.id, "ready")

    landed = await fleet.db.landing.landed(repo="demo")
    head = fleet.main()
    assert [row.merged_sha for row in landed] == [head]  # exactly one landed row, and it is main's head
    assert landed[0].base_sha == before and landed[0].candidate_sha == sha
    bare = fleet.bare()
    assert bare.descendant_of(head, before) or head == before
    assert landed[0].tree_sha == str(bare[head].peel(pygit2.Commit).tree_id)
    # every intent resolved, no candidate stuck mid-flight
    cands = await fleet.db.landing.candidates(repo="demo")
    assert {c["status"] for c in cands} <= {"landed", "superseded"}
    assert sum(c["status"] == "landed" for c in cands) == 1
    assert await fleet.db.landing.pending_intents("demo") == []
    # main's one move is proven: its signed statement (made before the crash when main had moved) is kept with the
    # landed row and in the commit's git note, whichever process recorded the landing
    statements = await fleet.db.attest.landings("demo")
    assert [(r["subject_sha"], r["sequence"]) for r in statements] == [(head, 1)]
    await until(lambda: notes.read(fleet.bare().path, head) is not None, timeout=30)
    # the reconciler finds main fully explained
    report = fleet.client("lead")  # lead cannot reconcile; reviewers read findings
    findings = report.get("/api/v1/findings", repo="demo")["findings"]
    assert findings == [], findings


async def test_lost_post_receive_is_requeued(fleet: Fleet) -> None:
    """An accepted push whose post-receive never ran (the bot died in between) is queued by the reconciler."""
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="work")
    claim, wt = fleet.start("ann")
    sha = commit(wt, {"f.txt": "x\n"})
    fleet.bot.stop()
    # Simulate the ref moving with no post-receive: write the ref straight into the bare repository.
    git(["push", "-q", str(fleet.bot.data_dir / "repos" / "demo.git"), f"HEAD:refs/heads/{claim.branch}"], wt,
        check=False)
    bare = fleet.bare()
    if f"refs/heads/{claim.branch}" not in bare.references:  # the hook refused the direct push, as it should
        git(["--git-dir", str(fleet.bot.data_dir / "repos" / "demo.git"), "fetch", "-q", str(wt),
             f"HEAD:refs/heads/{claim.branch}"], wt)
    assert str(fleet.bare().references[f"refs/heads/{claim.branch}"].target) == sha
    fleet.bot.start()
    await wait_status(fleet, sub.id, "landed")
    assert (await fleet.db.landing.landed(subtask_id=sub.id))[0].candidate_sha == sha
    _ = agent  # the agent module drives the other drills


async def test_a_push_git_finished_after_its_subtask_landed_is_refused_on_the_record(fleet: Fleet) -> None:
    """Git can finish a push after the bot that judged it died, and the subtask can land with the push before it
    meanwhile (a lost push the crash-stream drill once found): the sweep then refuses it on the record, once, so
    no accepted push is left unaccounted for."""
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="work")
    claim, wt = fleet.start("ann")
    commit(wt, {"f.txt": "x\n"})
    assert agent.push(fleet.client("ann"), wt, wait=60, progress=False)["status"] == "landed"
    late = commit(wt, {"f.txt": "y\n"})
    fleet.bot.stop()
    git(["--git-dir", str(fleet.bot.data_dir / "repos" / "demo.git"), "fetch", "-q", str(wt),
         f"+HEAD:refs/heads/{claim.branch}"], wt)  # the ref moves with no post-receive step
    repo = await fleet.db.repos.get_repo("demo")
    for _ in range(2):  # once: a later sweep finds it on the record
        assert await queue_orphans(fleet.db, fleet.bot.data_dir / "repos" / "demo.git", repo) == []
    refusals = [e for e in await fleet.db.subtasks.events(subtask_id=sub.id) if e["kind"] == "push_refused"]
    assert [(e["claim_version"], e["detail"]["sha"], e["detail"]["stage"]) for e in refusals] == [
        (claim.claim_version, late, "post-receive")]
    assert f"subtask {sub.id} was landed before the push reached the queue" in refusals[0]["detail"]["message"]
    assert late not in [c["sha"] for c in await fleet.db.landing.candidates(subtask_id=sub.id)]


async def test_reconciler_reports_commits_no_landed_row_explains(fleet: Fleet) -> None:
    """Someone moves main behind the bot's back: the reconciler reports exactly those commits."""
    fleet.bot.stop()
    bare = fleet.bare()
    head = bare.references["refs/heads/main"]
    parent = bare[head.target].peel(pygit2.Commit)
    sig = pygit2.Signature("Intruder", "intruder@example.com")
    sneaky = bare.create_commit(None, sig, sig, "not through mergebot", parent.tree_id, [parent.id])
    head.set_target(sneaky, "moved by hand")
    fleet.bot.start()
    root = fleet.client("lead")  # any role may read findings
    deadline = time.monotonic() + 30
    findings: list[dict[str, object]] = []
    while time.monotonic() < deadline and len(findings) < 2:
        findings = root.get("/api/v1/findings", repo="demo")["findings"]
        time.sleep(0.2)
    by_kind = {f["kind"]: f["detail"] for f in findings}  # and no landing statement explains it (issue 44)
    assert sorted(by_kind) == ["unattested_main", "unexplained_commits"], findings
    assert by_kind["unexplained_commits"] == {"commits": [str(sneaky)], "count": 1}
    assert by_kind["unattested_main"]["commits"] == [str(sneaky)]  # type: ignore[index]


async def test_a_lock_on_main_left_by_a_killed_process_is_cleared(fleet: Fleet) -> None:
    """A process killed while it moved main leaves ``refs/heads/main.lock``; every later move of main would fail
    on it. The reconciler removes it once it is older than any ref update takes, and the queue goes on."""
    fleet.bot.stop()
    lock = Path(fleet.bare().path) / "refs" / "heads" / "main.lock"
    lock.write_text(fleet.main() + "\n")
    os.utime(lock, (time.time() - 60, time.time() - 60))
    fleet.bot.start()
    sub, _ = await fleet.db.subtasks.create_subtask(actor_id=None, title="after a stale lock")
    claim, wt = fleet.start("ann")
    sha = commit(wt, {"after-lock.txt": "moved\n"})
    git(["push", "-q", "origin", f"HEAD:refs/heads/{claim.branch}"], wt)
    await wait_status(fleet, sub.id, "landed")
    assert not lock.exists()
    assert [row.candidate_sha for row in await fleet.db.landing.landed(repo="demo", subtask_id=sub.id)] == [sha]
    assert "stale_lock=True" in fleet.bot.log.read_text()


def _backends_serving(root: Path) -> list[int]:
    """Pids of git processes whose CGI environment points at ``root``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"GIT_PROJECT_ROOT={root}".encode() in environ:
            found.append(int(entry.name))
    return found


async def test_a_killed_server_leaves_no_git_backend_behind(fleet: Fleet) -> None:
    """SIGKILL of ``mergebot serve`` in the middle of a push: its ``git http-backend`` dies with it (a backend
    cut off mid-request used to be left spinning at 100% CPU, owned by init). The backend is stopped first, so
    only the kernel's parent-death signal can end it, not the end of its input."""
    root = fleet.bot.data_dir / "repos"
    assert fleet.bot.proc is not None
    auth = base64.b64encode(f"ann:{fleet.tokens['ann']}".encode()).decode()
    with socket.create_connection(("127.0.0.1", fleet.bot.port)) as sock:
        sock.sendall((f"POST /git/demo.git/git-receive-pack HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {auth}\r\n"
                      "Content-Type: application/x-git-receive-pack-request\r\nContent-Length: 100000\r\n\r\n"
                      ).encode() + b"0" * 100)  # a request body that stops short: the backend waits for the rest
        deadline = time.monotonic() + 30
        while not _backends_serving(root) and time.monotonic() < deadline:
            time.sleep(0.1)
        backends = _backends_serving(root)
        assert backends, "no git backend was started for the push"
        for pid in backends:  # frozen: it cannot notice its input ending, only a signal can end it now
            os.kill(pid, signal.SIGSTOP)
        fleet.bot.proc.kill()
        assert fleet.bot.wait_exit(30) == -9
        deadline = time.monotonic() + 10
        while _backends_serving(root) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _backends_serving(root)
        for pid in left:  # do not leave them to spin for the rest of the suite
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        assert left == [], f"git processes outlived the server: {left}"
