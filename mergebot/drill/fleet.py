"""Driving a running server as a fleet of agents: the set-up and the single moves the drills are made of.

A ``Fleet`` holds an admin client and creates agents and subtasks named after its run id, so a drill never takes
someone else's work and can clean up after itself (``cancel_leftovers``). One agent's moves: a worktree cloned
over HTTP with its token, main fetched, HEAD pushed to the claim's branch again and again while the server gives no
answer, and the final verdict on a push followed through the candidates API.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from mergebot.client import ApiError, Client
from mergebot.drill.invariants import CANDIDATE_FINAL, Push
from mergebot.drill.wire import _git, basic_header, push_head, retry
from mergebot.messages.refs import subtask_branch


@dataclass
class Agent:
    name: str
    token: str



class Fleet:
    """The agents and subtasks of one drill run on one repository of a running server, with an admin token.

    Everything the drill creates is named after its run id: agents ``drill-<run>-<n>`` in group ``drill-<run>``
    (closed, so they claim their own subtasks first), subtasks in that group at a very low priority (agents
    outside the group that roam take them last), files under ``drill/<run>/``. A drill agent that still claims
    some other subtask gives it back at once, untouched.
    """

    def __init__(self, server: str, admin_token: str, repo: str, work: Path, *, run_id: str | None = None,
                 log: Callable[[str], None] = lambda line: None, seed: int | None = None) -> None:
        self.server = server.rstrip("/")
        self.admin_token = admin_token
        self.admin = Client(self.server, admin_token, timeout=30)
        self.repo = repo
        self.work = work
        self.run_id = run_id or uuid.uuid4().hex[:8]
        self.group = f"drill-{self.run_id}"
        self.log = log
        self.rng = random.Random(seed)  # noqa: S311 (reproducible drills, not secrets)
        self.subtask_ids: set[int] = set()
        self.agent_names: list[str] = []
        self._counter = 0
        self._lock = threading.Lock()

    # -- set-up ------------------------------------------------------------------------------------------------

    def agents(self, n: int, *, until: float | None = None) -> list[Agent]:
        deadline = until or time.monotonic() + 60
        retry(lambda: self.admin.put(f"/api/v1/groups/{self.group}",
                                     {"description": "mergebot drill agents", "open": False}), until=deadline)
        out = []
        for _ in range(n):
            with self._lock:
                self._counter += 1
                name = f"drill-{self.run_id}-{self._counter}"
            got = retry(lambda name=name: self.admin.post("/api/v1/agents",  # type: ignore[misc]
                                                          {"name": name, "role": "agent"}), until=deadline)
            retry(lambda name=name: self.admin.put(f"/api/v1/assignments/{name}",  # type: ignore[misc]
                                                   {"group": self.group}), until=deadline)
            out.append(Agent(name, got["token"]))
            self.agent_names.append(name)
        return out

    def subtasks(self, n: int, title: str = "drill", *, until: float | None = None, tree: int = 0) -> list[int]:
        """``n`` drill subtasks; with ``tree`` > 0 they form a tree of that fan-out, each one (after the first)
        depending on its parent, so a subtask becomes ready only when its parent has landed."""
        deadline = until or time.monotonic() + 60
        ids: list[int] = []
        for i in range(n):
            key = f"{self.group}/{title}/{len(self.subtask_ids)}-{i}"
            deps = [ids[(i - 1) // tree]] if tree and i else []
            got = retry(lambda key=key, i=i, deps=deps: self.admin.post("/api/v1/subtasks", {  # type: ignore[misc]
                "title": f"mergebot drill {self.run_id}: {title} {i} (do not claim)", "group": self.group,
                "priority": -1_000_000, "idempotency_key": key, "depends_on": deps,
                # numbered drill work, alike by design (and like the landed work of earlier waves and runs)
                "allow_duplicate": True}), until=deadline)
            ids.append(got["subtask"]["id"])
        self.subtask_ids.update(ids)
        return ids

    def cancel_leftovers(self) -> list[int]:
        """Cancel this run's subtasks that did not land (after a failed drill), so nobody picks them up, and revoke
        the tokens of this run's agents."""
        for name in self.agent_names:
            with contextlib.suppress(ApiError, httpx.HTTPError):
                self.admin.post(f"/api/v1/agents/{name}/revoke")
        out = []
        for sid in sorted(self.subtask_ids):
            with contextlib.suppress(ApiError, httpx.HTTPError):
                if self.admin.get(f"/api/v1/subtasks/{sid}")["subtask"]["status"] in ("ready", "blocked", "failed",
                                                                                     "running"):
                    self.admin.post(f"/api/v1/subtasks/{sid}/cancel", {"reason": "mergebot drill finished"})
                    out.append(sid)
        return out

    # -- one agent -----------------------------------------------------------------------------------------

    def worktree(self, agent: Agent, *, via: str | None = None, until: float) -> Path:
        wt = self.work / agent.name
        url = f"{(via or self.server).rstrip('/')}/git/{self.repo}.git"
        header = basic_header(agent.token)
        if not (wt / ".git").exists():
            wt.mkdir(parents=True, exist_ok=True)

            def clone() -> None:
                out = _git(["-c", f"http.extraHeader={header}", "clone", "-q", "--single-branch", url, str(wt)],
                           wt.parent, check=False)
                if out.returncode != 0:
                    raise httpx.TransportError(out.stderr.strip())

            retry(clone, until=until)
        _git(["config", "http.extraHeader", header], wt)
        _git(["config", "remote.origin.url", url], wt)
        return wt

    def _fetch_main(self, wt: Path, until: float) -> str:
        branch = self._target(until)

        def fetch() -> str:
            out = _git(["fetch", "-q", "origin", f"+refs/heads/{branch}:refs/remotes/origin/{branch}"], wt, check=False)
            if out.returncode != 0:
                raise httpx.TransportError(out.stderr.strip())
            return f"origin/{branch}"

        return retry(fetch, until=until)

    def _target(self, until: float) -> str:
        if not hasattr(self, "_branch"):  # asked once, possibly while the drill has just killed the server
            repos = {r["name"]: r for r in retry(lambda: self.admin.get("/api/v1/repos")["repos"], until=until)}
            self._branch: str = repos[self.repo]["target_branch"]
        return self._branch

    def push_until_answered(self, agent: Agent, wt: Path, sid: int, version: int, *, until: float,
                            remote: str = "origin") -> Push:
        """Push HEAD to the claim's branch, again while the server gives no answer (restarting, unreachable)."""
        sha = _git(["rev-parse", "HEAD"], wt).stdout.strip()
        while True:
            outcome, said = push_head(wt, subtask_branch(sid, version), remote=remote)
            if outcome != "failed" or time.monotonic() > until:
                return Push(agent.name, sid, version, sha, outcome, said)
            time.sleep(0.3)

    def verdict(self, client: Client, push: Push, *, until: float) -> dict[str, Any] | None:
        """The final candidate of an accepted push (None if none within ``until``); ``{"status": "refused"}`` when
        there is no candidate and the subtask moved on (the claim changed after git's pre-receive step)."""
        while time.monotonic() < until:
            try:
                cands = client.get("/api/v1/candidates", subtask=push.subtask_id, limit=100)["candidates"]
                mine = [c for c in cands if c["claim_version"] == push.claim_version and c["sha"] == push.sha]
                if not mine:
                    sub = client.get(f"/api/v1/subtasks/{push.subtask_id}")["subtask"]
                    if sub["claim_version"] != push.claim_version or sub["status"] not in ("running", "submitted"):
                        return {"status": "refused", "reason": f"subtask {sub['id']} is {sub['status']} at claim "
                                f"version {sub['claim_version']}", "sha": push.sha}
                if mine:
                    last = max(mine, key=lambda c: c["id"])
                    if last["status"] in CANDIDATE_FINAL:
                        return dict(last)
                    got = client.get(f"/api/v1/candidates/{last['id']}", wait=5)
                    if got["status"] in CANDIDATE_FINAL:
                        return dict(got)
                    continue
            except (httpx.HTTPError, ApiError):
                pass
            time.sleep(0.3)
        return None
