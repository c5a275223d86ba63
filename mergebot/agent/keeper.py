"""The keeper: a small detached process that keeps a worktree's claim alive while the agent shows signs of life.

An LLM agent thinks for minutes between two commands and runs each in a fresh shell; nothing of it renews a
lease. ``mergebot start`` leaves a keeper beside the worktree (``python -m mergebot.agent.keeper DIR``; its pid,
log and state in ``<git dir>/mergebot/``). Rules:
  * It heart-beats the claim at a third of the lease while the agent is alive: a file of the worktree changed, a
    commit was made, or a ``mergebot`` command ran there (``worktree.touch``) less than ``MERGEBOT_AGENT_IDLE``
    seconds ago (default 30 minutes).
  * It stops, and says why in a note on the subtask (an owner's note: it holds until someone else claims it) and in
    its state,
    when the agent has been idle past that limit (the lease then lapses as for a dead agent), when the subtask
    landed, was released or the claim was superseded (a heartbeat is refused), when the worktree is removed or
    holds another claim, when ``mergebot stop`` asks it to (SIGTERM), or when the server has not answered for
    longer than a lease (the claim is lost by then anyway). A new ``mergebot start`` in the same worktree replaces
    it, and it says so (not that ``mergebot stop`` was run).
  * A dead machine loses its claim by the server's lease and grace, as before: the keeper is a convenience on the
    agent's machine, never what the server relies on.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mergebot import messages as say
from mergebot.agent.worktree import Claim, current_claim, state_dir, token_of
from mergebot.client import ApiError, Client
from mergebot.errors import MergebotError

IDLE_DEFAULT = 1800.0


class Stopped(Exception):
    """The keeper was asked to stop, between or during its steps: by ``mergebot stop`` (SIGTERM), or by a new
    ``mergebot start`` in the same worktree, whose own keeper takes over (SIGUSR1, ``REPLACED``)."""

    def __init__(self, why: str = say.KEEPER_STOP_ASKED) -> None:
        super().__init__(why)
        self.why = why


REPLACED = signal.SIGUSR1  # what ``spawn`` sends the keeper it replaces (``stop`` sends SIGTERM)
MAX_FILES = 20_000  # files looked at for changes per tick; a bigger worktree counts its commits and commands


def idle_limit() -> float:
    try:
        return float(os.environ.get("MERGEBOT_AGENT_IDLE", IDLE_DEFAULT))
    except ValueError:
        return IDLE_DEFAULT


def last_activity(workdir: Path, gitdir: Path, max_files: int = MAX_FILES) -> float:
    """The newest sign of life: a changed file of the worktree, a commit (HEAD's log), a ``mergebot`` command."""
    newest = 0.0
    for mark in (gitdir / "mergebot" / "activity", gitdir / "logs" / "HEAD", gitdir / "index", gitdir / "HEAD"):
        with contextlib.suppress(OSError):
            newest = max(newest, mark.stat().st_mtime)
    seen = 0
    for root, dirs, files in os.walk(workdir):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in files:
            seen += 1
            if seen > max_files:
                return newest
            with contextlib.suppress(OSError):
                newest = max(newest, os.stat(os.path.join(root, name)).st_mtime)
    return newest


class Keeper:
    def __init__(self, workdir: Path, client: Client, claim: Claim, *, lease: float, idle: float,
                 now: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep) -> None:
        self.workdir, self.client, self.claim = workdir, client, claim
        self.gitdir = state_dir(workdir).parent
        self.lease, self.idle = lease, idle
        self.now, self.sleep = now, sleep
        self.state: dict[str, Any] = {"pid": os.getpid(), "subtask": claim.subtask_id,
                                      "claim_version": claim.claim_version, "kept": True}

    def save(self, **facts: Any) -> None:
        self.state.update(facts)
        path = self.gitdir / "mergebot" / "keeper.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state, default=str))
        tmp.replace(path)

    def run(self) -> str:
        """Keep the claim until a reason to stop; return that reason."""
        try:
            return self._keep()
        except Stopped as e:
            return self.stop(e.why)

    def _keep(self) -> str:
        interval = max(0.5, self.lease / 3)
        unreachable_since: float | None = None
        while True:
            why = self._why_stop()
            if why is None:
                try:
                    beat = self.client.post(f"/api/v1/subtasks/{self.claim.subtask_id}/heartbeat",
                                            {"claim_version": self.claim.claim_version})
                    unreachable_since = None
                    self.save(last_beat=_iso(self.now()), kept_until=beat.get("lease_expires_at"))
                except ApiError as e:
                    why = self._refused(e)
                except (OSError, MergebotError, ValueError) as e:  # the server is away: try again, not forever
                    unreachable_since = unreachable_since or self.now()
                    if self.now() - unreachable_since > self.lease:
                        why = say.keeper_server_silent(self.now() - unreachable_since, e)
            if why is not None:
                return self.stop(why)
            self.sleep(interval)

    def _why_stop(self) -> str | None:
        if not self.workdir.exists() or not self.gitdir.exists():
            return say.KEEPER_WORKTREE_REMOVED
        try:
            held = current_claim(self.workdir)
        except MergebotError:
            return say.KEEPER_NOT_A_WORKTREE
        if (held.subtask_id, held.claim_version) != (self.claim.subtask_id, self.claim.claim_version):
            return say.keeper_worktree_moved_on(held.subtask_id, held.claim_version)
        idle = self.now() - last_activity(self.workdir, self.gitdir)
        if idle > self.idle:
            return say.keeper_agent_idle(idle / 60, self.idle / 60)
        return None

    def _refused(self, e: ApiError) -> str:
        with contextlib.suppress(ApiError, OSError):
            sub = self.client.get(f"/api/v1/subtasks/{self.claim.subtask_id}")["subtask"]
            if sub["status"] == "landed":
                return say.KEEPER_SUBTASK_LANDED
            if sub["claim_version"] == self.claim.claim_version and sub["status"] == "ready":
                return say.KEEPER_CLAIM_RELEASED
        return say.keeper_claim_gone(e.message)

    def stop(self, why: str) -> str:
        self.save(kept=False, stopped_at=_iso(self.now()), stopped_because=why)
        body = say.keeper_note(self.claim.subtask_id, self.claim.claim_version, why)
        path = f"/api/v1/subtasks/{self.claim.subtask_id}/notes"
        with contextlib.suppress(ApiError, OSError):  # refused once another agent has claimed the subtask
            self.client.post(path, {"claim_version": self.claim.claim_version, "body": body})
        return why


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


def lease_of(client: Client, claim: Claim) -> float:
    """The server's lease, as the subtask shows it (claimed or last renewed at, to its expiry)."""
    sub = client.get(f"/api/v1/subtasks/{claim.subtask_id}")["subtask"]
    start = sub.get("heartbeat_at") or sub.get("claimed_at")
    if start and sub.get("lease_expires_at"):
        span = datetime.fromisoformat(sub["lease_expires_at"]) - datetime.fromisoformat(start)
        return max(1.0, span.total_seconds())
    return 120.0


def spawn(workdir: Path, env: dict[str, str] | None = None) -> int:
    """Start the worktree's keeper (replacing one already there: it notes that a new start took over); its pid."""
    stop(workdir, wait=5.0, sig=REPLACED)
    state = state_dir(workdir)
    with open(state / "keeper.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "mergebot.agent.keeper", str(workdir.resolve())],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, env={**os.environ, **(env or {})}, cwd=str(workdir))
    (state / "keeper.pid").write_text(str(proc.pid))
    return proc.pid


def running(workdir: Path) -> int | None:
    """The keeper's pid if it runs."""
    with contextlib.suppress(OSError, ValueError, MergebotError):
        pid = int((state_dir(workdir) / "keeper.pid").read_text())
        os.kill(pid, 0)
        with contextlib.suppress(ChildProcessError):  # reap it if it is our own child and has exited
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return None
        return pid
    return None


def stop(workdir: Path, wait: float = 10.0, sig: signal.Signals = signal.SIGTERM) -> bool:
    """Ask the keeper to stop (it notes why on the subtask: ``sig`` says who asked); True if one was running."""
    pid = running(workdir)
    if pid is None:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and running(workdir) == pid:
        time.sleep(0.05)
    return True


def state(workdir: Path) -> dict[str, Any]:
    """What the keeper last recorded (kept until when, or why it stopped), and whether it runs now."""
    with contextlib.suppress(OSError, ValueError, MergebotError):
        data: dict[str, Any] = json.loads((state_dir(workdir) / "keeper.json").read_text())
        data["running"] = running(workdir) is not None
        return data
    return {"kept": False, "running": False}


def main(argv: list[str]) -> int:
    workdir = Path(argv[0])
    claim = current_claim(workdir)
    client = Client(claim.server, token_of(workdir))
    keeper = Keeper(workdir, client, claim, lease=lease_of(client, claim), idle=idle_limit())

    def on_term(*_: object) -> None:
        raise Stopped

    def on_replaced(*_: object) -> None:
        raise Stopped(say.KEEPER_REPLACED)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(REPLACED, on_replaced)
    keeper.save(kept=True, started_at=_iso(time.time()), lease_seconds=keeper.lease, idle_seconds=keeper.idle)
    why = keeper.run()
    print(say.keeper_stopped(_iso(time.time()), why), flush=True)
    pidfile = state_dir(workdir) / "keeper.pid"
    with contextlib.suppress(OSError, ValueError):  # gone at once: an unreaped exit must not look alive
        if int(pidfile.read_text()) == os.getpid():
            pidfile.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
