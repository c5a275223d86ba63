"""The over-the-wire drills, run with an admin token against one repository of a running server.

The push stream (``Drill.stream``): several agents at once, each on its own thread, claim the run's subtasks until
none is ready; for each they commit, push (sometimes twice, a newer push while the first is queued), follow the
verdict, and fix and push again a rejected candidate (up to three times). A subtask the agent already holds after
a lost answer or a restart is picked up again; one outside the run is given back untouched.

The lease race (``Drill.lease_race``): the old owner's push is held on a slow link (``HoldingProxy``) until its
lease is gone and the subtask is handed to a new owner. The held push, and every later push of the old owner, must
be refused; the new owner's must land; nothing of the old owner's may reach main. The webhook redelivery storm
lives in ``storm``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from mergebot.client import ApiError, Client
from mergebot.drill.fleet import Agent, Fleet
from mergebot.drill.invariants import Push
from mergebot.drill.wire import HoldingProxy, _git, commit_file, retry
from mergebot.messages.refs import subtask_branch


@dataclass
class StreamResult:
    pushes: list[Push] = field(default_factory=list)
    landed: set[int] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    foreign: list[int] = field(default_factory=list)  # other subtasks a drill agent claimed and gave back


@dataclass
class LeaseRace:
    subtask_id: int
    old: str
    new: str
    old_version: int = 0
    new_version: int = 0
    held_push: Push | None = None
    late_pushes: list[Push] = field(default_factory=list)
    heartbeat_after_expiry: str = ""
    new_push: Push | None = None
    verdict: str = ""
    problems: list[str] = field(default_factory=list)



class Drill(Fleet):
    """The push stream and the lease race, on a ``Fleet``'s agents and subtasks."""

    def _held(self, client: Client, agent: Agent, until: float) -> tuple[int, int, str] | None:
        """A drill subtask this agent already holds (after a lost answer or a restart): (id, version, status)."""
        for status in ("running", "submitted"):
            rows = retry(lambda status=status: client.get(  # type: ignore[misc]
                "/api/v1/subtasks", status=status, group=self.group, limit=1000)["subtasks"], until=until)
            for r in rows:
                if r["owner"] == agent.name and r["id"] in self.subtask_ids:
                    return r["id"], r["claim_version"], status
        return None

    def work_on(self, agent: Agent, result: StreamResult, *, until: float, double_push: float = 0.3,
                stop: threading.Event | None = None, patient: bool = False) -> None:
        """One agent: claim drill subtasks until none is ready; for each, commit, push (sometimes twice), and follow
        the verdict; a rejected candidate is fixed and pushed again (up to three times). A ``patient`` agent, when
        nothing is ready, waits while drill subtasks are still open (blocked on others' landings)."""
        client = Client(self.server, agent.token, timeout=30)
        wt = self.worktree(agent, until=until)
        while time.monotonic() < until and not (stop and stop.is_set()):
            held = self._held(client, agent, until)
            if held is None:
                got = retry(lambda: client.post("/api/v1/subtasks/claim"), until=until)
                if got is None and self._held(client, agent, until) is not None:
                    continue  # the answer to a claim that held was lost (a restart): it is ours, take it up
                if got is None and patient and self._open(client, until):
                    time.sleep(0.5)
                    continue
                if got is None:
                    return
                sid, version = got["handle"]["id"], got["handle"]["claim_version"]
                if sid not in self.subtask_ids:
                    with contextlib.suppress(ApiError, httpx.HTTPError):
                        client.post(f"/api/v1/subtasks/{sid}/release",
                                    {"claim_version": version, "reason": "claimed by a mergebot drill agent; "
                                     "given back untouched"})
                    with self._lock:
                        result.foreign.append(sid)
                    return
                status = "running"
            else:
                sid, version, status = held
            if status == "submitted":  # a push of ours is in the queue: follow its newest candidate
                cands = retry(lambda sid=sid: client.get(  # type: ignore[misc]
                    "/api/v1/candidates", subtask=sid, limit=100)["candidates"], until=until)
                mine = [c for c in cands if c["claim_version"] == version]
                if mine:
                    last = max(mine, key=lambda c: c["id"])
                    v = self.verdict(client, Push(agent.name, sid, version, last["sha"], "accepted"), until=until)
                    if v is not None and v["status"] == "landed":
                        with self._lock:
                            result.landed.add(sid)
                    continue
                time.sleep(0.3)
                continue
            self._attempts(agent, client, wt, sid, version, result, until=until, double_push=double_push)

    def _attempts(self, agent: Agent, client: Client, wt: Path, sid: int, version: int, result: StreamResult, *,
                  until: float, double_push: float) -> None:
        branch = subtask_branch(sid, version)
        start = self._fetch_main(wt, until)
        current = _git(["rev-parse", "--abbrev-ref", "HEAD"], wt).stdout.strip()
        if current != branch:
            _git(["checkout", "-q", "-B", branch, start], wt)
        for attempt in range(3):
            n = self.rng.randrange(1 << 30)
            commit_file(wt, f"drill/{self.run_id}/s{sid}-v{version}-{attempt}.txt",
                        f"{agent.name} {sid} {version} {attempt} {n}\n", f"drill: subtask {sid} v{version} #{attempt}")
            pushes = [self.push_until_answered(agent, wt, sid, version, until=until)]
            if pushes[0].accepted and self.rng.random() < double_push:  # a newer push while the first is queued
                commit_file(wt, f"drill/{self.run_id}/s{sid}-v{version}-{attempt}b.txt", f"{n} again\n",
                            f"drill: subtask {sid} v{version} #{attempt}, amended")
                pushes.append(self.push_until_answered(agent, wt, sid, version, until=until))
            with self._lock:
                result.pushes += pushes
            last = next((p for p in reversed(pushes) if p.accepted), None)
            if last is None:
                self.log(f"{agent.name}: push for subtask {sid} v{version} refused: {pushes[-1].message[-300:]}")
                return
            waited = time.monotonic()
            v = self.verdict(client, last, until=until)
            waited = time.monotonic() - waited
            if waited > 10:
                self.log(f"{agent.name}: waited {waited:.0f} s for the verdict on {last.sha[:12]} (subtask {sid} "
                         f"v{version}): {v and v['status']}")
            if v is None:
                return
            if v["status"] == "landed":
                with self._lock:
                    result.landed.add(sid)
                return
            if v["status"] != "rejected":  # superseded, cancelled, parked, refused: not ours to fix
                with contextlib.suppress(ApiError, httpx.HTTPError):  # an earlier push of ours may have landed it
                    if client.get(f"/api/v1/subtasks/{sid}")["subtask"]["status"] == "landed":
                        with self._lock:
                            result.landed.add(sid)
                return
            self.log(f"{agent.name}: subtask {sid} rejected ({(v.get('reason') or '')[:200]}); pushing a fix")

    def _open(self, client: Client, until: float) -> bool:
        """Whether a drill subtask is still blocked or ready (another agent's landing will release it)."""
        return any(r["id"] in self.subtask_ids for status in ("blocked", "ready")
                   for r in retry(lambda status=status: client.get(  # type: ignore[misc]
                       "/api/v1/subtasks", status=status, group=self.group, limit=1000)["subtasks"], until=until))

    def stream(self, agents: Sequence[Agent], *, until: float, double_push: float = 0.3,
               stop: threading.Event | None = None,
               patient: bool = False) -> tuple[StreamResult, list[threading.Thread]]:
        """Start every agent on its own thread; returns the shared result and the threads (join them)."""
        result = StreamResult()

        def run(agent: Agent) -> None:
            try:
                self.work_on(agent, result, until=until, double_push=double_push, stop=stop, patient=patient)
            except Exception as e:
                with self._lock:
                    result.errors.append(f"{agent.name}: {type(e).__name__}: {e}")

        threads = [threading.Thread(target=run, args=(a,), name=a.name, daemon=True) for a in agents]
        for t in threads:
            t.start()
        return result, threads

    # -- the lease race --------------------------------------------------------------------------------------

    @staticmethod
    def _keep_alive(client: Client, sid: int, version: int, claim: Mapping[str, Any], stop: threading.Event) -> None:
        left = 30.0
        with contextlib.suppress(TypeError, ValueError):
            left = (datetime.fromisoformat(claim["lease_expires_at"]) - datetime.now(UTC)).total_seconds()
        every = max(0.2, min(10.0, left / 3))
        while not stop.wait(every):
            with contextlib.suppress(ApiError, httpx.HTTPError):
                client.post(f"/api/v1/subtasks/{sid}/heartbeat", {"claim_version": version})

    def lease_race(self, old: Agent, new: Agent, *, until: float) -> LeaseRace:
        """The old owner's push is under way (held on a slow link) when its lease runs out; the subtask is handed
        to the new owner. The held push, and every later push of the old owner, must be refused; the new owner's
        must land; nothing of the old owner's may reach main."""
        sid = self.subtasks(1, "lease race", until=until)[0]
        race = LeaseRace(sid, old.name, new.name)
        old_client = Client(self.server, old.token, timeout=30)
        new_client = Client(self.server, new.token, timeout=30)
        got = retry(lambda: old_client.post("/api/v1/subtasks/claim"), until=until)
        if got is None or got["handle"]["id"] != sid:
            race.problems.append(f"the old owner could not claim subtask {sid}: {got and got['handle']}")
            return race
        race.old_version = got["handle"]["claim_version"]
        proxy = HoldingProxy(self.server)
        try:
            wt = self.worktree(old, via=proxy.url, until=until)
            _git(["checkout", "-q", "-B", subtask_branch(sid, race.old_version), self._fetch_main(wt, until)], wt)
            commit_file(wt, f"drill/{self.run_id}/lease-old.txt", f"{old.name} was here\n", "drill: the old owner")
            box: list[Push] = []
            pusher = threading.Thread(target=lambda: box.append(self.push_until_answered(
                old, wt, sid, race.old_version, until=until)), daemon=True)
            pusher.start()
            if not proxy.held.wait(max(1.0, until - time.monotonic())):
                race.problems.append("the old owner's push never reached the bot")
                return race
            while True:  # the lease lapses and recovery hands the subtask back
                sub = retry(lambda: self.admin.get(f"/api/v1/subtasks/{sid}")["subtask"], until=until)
                if sub["status"] == "ready":
                    break
                if time.monotonic() > until:
                    race.problems.append(f"the old owner's lease never lapsed (subtask is {sub['status']})")
                    return race
                time.sleep(0.2)
            try:
                old_client.post(f"/api/v1/subtasks/{sid}/heartbeat", {"claim_version": race.old_version})
                race.heartbeat_after_expiry = "accepted"
                race.problems.append("the old owner's heartbeat after its lease lapsed was accepted")
            except ApiError as e:
                race.heartbeat_after_expiry = e.code
            got = retry(lambda: new_client.post("/api/v1/subtasks/claim"), until=until)
            if got is None or got["handle"]["id"] != sid:
                race.problems.append(f"the new owner did not get subtask {sid}: {got and got['handle']}")
                return race
            race.new_version = got["handle"]["claim_version"]
            keep = threading.Event()  # the new owner renews its lease while it works (the old one did not)
            threading.Thread(target=self._keep_alive, args=(new_client, sid, race.new_version, got, keep),
                             daemon=True).start()
            proxy.release()
            pusher.join(max(1.0, until - time.monotonic()))
            race.held_push = box[0] if box else None
            if race.held_push is None or race.held_push.accepted:
                race.problems.append(f"the old owner's held push was not refused: {race.held_push}")
            # the old owner, unaware, keeps pushing: to its own branch, and to the new owner's
            commit_file(wt, f"drill/{self.run_id}/lease-old-2.txt", "still at it\n", "drill: the old owner, again")
            race.late_pushes.append(self.push_until_answered(old, wt, sid, race.old_version, until=until))
            race.late_pushes.append(self.push_until_answered(old, wt, sid, race.new_version, until=until))
            for p in race.late_pushes:
                if p.accepted:
                    race.problems.append(f"a late push of the old owner was accepted: {p}")
            new_wt = self.worktree(new, until=until)
            _git(["checkout", "-q", "-B", subtask_branch(sid, race.new_version), self._fetch_main(new_wt, until)],
                 new_wt)
            commit_file(new_wt, f"drill/{self.run_id}/lease-new.txt", f"{new.name} took over\n",
                        "drill: the new owner")
            race.new_push = self.push_until_answered(new, new_wt, sid, race.new_version, until=until)
            keep.set()
            if not race.new_push.accepted:
                race.problems.append(f"the new owner's push was refused: {race.new_push.message[-500:]}")
                return race
            v = self.verdict(new_client, race.new_push, until=until)
            race.verdict = v["status"] if v else "none"
            if race.verdict != "landed":
                race.problems.append(f"the new owner's push did not land: {v}")
                return race
            main = self._fetch_main(new_wt, until)
            old_commits = [p.sha for p in [*(box[:1]), *race.late_pushes]]
            for sha in old_commits:
                if _git(["cat-file", "-e", sha], new_wt, check=False).returncode == 0 and _git(
                        ["merge-base", "--is-ancestor", sha, main], new_wt, check=False).returncode == 0:
                    race.problems.append(f"the old owner's commit {sha[:12]} is on main")
            names = _git(["ls-tree", "-r", "--name-only", main, f"drill/{self.run_id}/"], new_wt).stdout.split()
            if any("lease-old" in n for n in names):
                race.problems.append(f"the old owner's files are on main: {names}")
            if f"drill/{self.run_id}/lease-new.txt" not in names:
                race.problems.append("the new owner's file is not on main")
            landed = retry(lambda: self.admin.get("/api/v1/landed", subtask=sid)["landed"], until=until)
            if [(r["claim_version"], r["owner"]) for r in landed] != [(race.new_version, new.name)]:
                race.problems.append(f"landed rows for subtask {sid}: {landed}")
            return race
        finally:
            proxy.close()
