"""Failure drills over the wire, and the one invariant check that the drill tests and ``mergebot drill`` share.

The invariant check (``check``) is pure given a ``Snapshot``: main's history read with pygit2, the landed rows,
the subtasks, the candidates of the subtasks that matter, the tips of the subtask branches, and (optionally) the
pushes a drill made and what git answered. It returns a list of ``Violation``; an empty list means:

  * every commit on main's first-parent chain after the repository's root is explained by exactly one landed
    row (the segment from the row's ``merged_sha`` down to its ``base_sha``), and the chain reaches the root;
  * every landed row's merged commit is on that chain, carries the tree the verifier passed on, contains the
    candidate, and its verifier result is a pass (``pass`` or ``flaky``);
  * every subtask is in a legal state: owner iff running or submitted, lease iff running, landed iff a landed
    row says so (at its claim version), at most one landed candidate per (subtask, claim version);
  * no accepted push was lost: every push git reported accepted has a candidate, and once the queue is settled
    that candidate ended landed, or refused (rejected, superseded, cancelled, parked) with a recorded reason;
    every subtask branch at its subtask's current claim version has a candidate for its tip.

``gather`` builds a snapshot from a running server with any token (a reviewer's is enough): git over HTTP for
main and the subtask branches, the JSON API for the rest. ``Drill`` runs the over-the-wire drills with an
admin token: a stream of pushes from several agents at once, the lease-expiry race (the old owner's push is
held on a slow link until its lease is gone), and a webhook redelivery storm. ``run`` is ``mergebot drill``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import hmac
import json
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx
import pygit2

from mergebot.client import ApiError, Client

T = TypeVar("T")
Row = Mapping[str, Any]

SUBTASK_STATUSES = frozenset({"blocked", "ready", "running", "submitted", "landed", "failed", "cancelled"})
CANDIDATE_FINAL = frozenset({"landed", "rejected", "superseded", "cancelled", "parked"})
CANDIDATE_LIVE = frozenset({"queued", "verifying", "landing", "parked"})
PASSING = frozenset({"pass", "flaky"})
_SUBTASK_REF = re.compile(r"^refs/heads/subtasks/([0-9]+)/v([0-9]+)$")


@dataclass(frozen=True)
class Violation:
    kind: str
    subject: str
    message: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


@dataclass
class Push:
    """One ``git push`` a drill made, and what git answered."""

    agent: str
    subtask_id: int
    claim_version: int
    sha: str
    outcome: str  # "accepted", "refused" (a hook or git said no) or "failed" (no answer: transport)
    message: str = ""

    @property
    def accepted(self) -> bool:
        return self.outcome == "accepted"


@dataclass
class Snapshot:
    repo: dict[str, Any]
    git_dir: Path
    head: str | None
    tips: dict[str, str]  # refs/heads/subtasks/<id>/v<version> -> sha
    landed: list[dict[str, Any]]  # every repository's rows (subtask checks need them all)
    subtasks: list[dict[str, Any]]
    candidates: dict[int, list[dict[str, Any]]]  # subtask id -> its candidates (for the subtasks that matter)
    refusals: dict[int, list[dict[str, Any]]] = field(default_factory=dict)  # subtask id -> its push_refused events


# -- the invariant check (pure given its inputs) --------------------------------------------------------------


def check_history(repo: pygit2.Repository, head: str | None, root_sha: str, landed: Sequence[Row],
                  limit: int = 1_000_000) -> list[Violation]:
    """main's first-parent chain against the repository's landed rows (``landed``: this repository's only)."""
    out: list[Violation] = []
    if head is None:
        return [Violation("no_main", "main", "the target branch does not exist")]
    chain: list[str] = []
    index: dict[str, int] = {}
    cur = head
    reached_root = False
    while len(chain) < limit:
        if cur not in repo:
            out.append(Violation("missing_commit", cur, f"commit {cur} on main's chain is missing"))
            break
        commit = repo[cur].peel(pygit2.Commit)
        index[cur] = len(chain)
        chain.append(cur)
        if cur == root_sha:
            reached_root = True
            break
        if not commit.parent_ids:
            out.append(Violation("root_not_reached", cur, f"main's first-parent chain ends at {cur[:12]}, not at "
                                 f"the repository's root {root_sha[:12]}: its history was rewritten"))
            break
        cur = str(commit.parent_ids[0])
    explained: dict[str, list[int]] = {}
    by_merged: dict[str, list[int]] = {}
    for row in landed:
        by_merged.setdefault(row["merged_sha"], []).append(row["id"])
    for sha, ids in by_merged.items():
        if len(ids) > 1:
            out.append(Violation("landed_twice", sha, f"{len(ids)} landed rows ({ids}) name merged commit {sha[:12]}"))
    for row in landed:
        merged, base = row["merged_sha"], row["base_sha"]
        who = f"landed row {row['id']} (subtask {row['subtask_id']} v{row['claim_version']})"
        if merged not in index:
            out.append(Violation("landed_not_on_main", merged, f"{who}: merged commit {merged[:12]} is not on "
                                 "main's first-parent chain"))
            continue
        if base not in index or index[base] <= index[merged]:
            out.append(Violation("landed_base_not_below", merged, f"{who}: base {base[:12]} is not below "
                                 f"{merged[:12]} on main's first-parent chain"))
            continue
        for i in range(index[merged], index[base]):
            explained.setdefault(chain[i], []).append(row["id"])
        tree = str(repo[merged].peel(pygit2.Commit).tree_id)
        if row["tree_sha"] != tree:
            out.append(Violation("tree_mismatch", merged, f"{who}: main has tree {tree[:12]} at {merged[:12]}, the "
                                 f"verifier passed tree {str(row['tree_sha'])[:12]}"))
        if row["verifier_result"] not in PASSING:
            out.append(Violation("unverified_landing", merged, f"{who}: verifier result is "
                                 f"{row['verifier_result']!r}, not a pass"))
        cand = row["candidate_sha"]
        if cand not in repo or not (cand == merged or repo.descendant_of(merged, cand)):
            out.append(Violation("candidate_not_landed", merged, f"{who}: candidate {cand[:12]} is not in "
                                 f"{merged[:12]}"))
    for sha in chain[:-1] if reached_root else chain:
        ids = explained.get(sha, [])
        if not ids:
            out.append(Violation("unexplained_commit", sha, f"commit {sha[:12]} on main is explained by no landed "
                                 "row"))
        elif len(ids) > 1:
            out.append(Violation("explained_twice", sha, f"commit {sha[:12]} on main is explained by landed rows "
                                 f"{ids}"))
    return out


def check_subtasks(subtasks: Sequence[Row], landed: Sequence[Row], candidates: Mapping[int, Sequence[Row]],
                   tips: Mapping[str, str], *, settled: bool) -> list[Violation]:
    """Every subtask in a legal state; at most one landing per claim version; no subtask branch forgotten."""
    out: list[Violation] = []
    rows_of: dict[int, list[Row]] = {}
    for row in landed:
        rows_of.setdefault(row["subtask_id"], []).append(row)
    by_id = {s["id"]: s for s in subtasks}
    for sid, rows in rows_of.items():
        if len(rows) > 1:
            out.append(Violation("landed_twice", f"subtask {sid}", f"subtask {sid} has {len(rows)} landed rows"))
        if sid in by_id and by_id[sid]["status"] != "landed":
            out.append(Violation("landed_row_without_landing", f"subtask {sid}", f"subtask {sid} has a landed row "
                                 f"but is {by_id[sid]['status']}"))
    for s in subtasks:
        sid, status = s["id"], s["status"]
        subject = f"subtask {sid}"
        if status not in SUBTASK_STATUSES:
            out.append(Violation("illegal_status", subject, f"subtask {sid} has status {status!r}"))
        owned = s.get("owner") is not None or s.get("owner_id") is not None
        if owned != (status in ("running", "submitted")):
            out.append(Violation("illegal_owner", subject, f"subtask {sid} is {status} and "
                                 f"{'has' if owned else 'has no'} owner"))
        if (s.get("lease_expires_at") is not None) != (status == "running"):
            out.append(Violation("illegal_lease", subject, f"subtask {sid} is {status} and "
                                 f"{'has' if s.get('lease_expires_at') else 'has no'} lease"))
        if status in ("running", "submitted", "landed") and s["claim_version"] < 1:
            out.append(Violation("illegal_claim", subject, f"subtask {sid} is {status} at claim version "
                                 f"{s['claim_version']}"))
        if status == "landed":
            rows = rows_of.get(sid, [])
            if not rows:
                out.append(Violation("landed_without_row", subject, f"subtask {sid} is landed but no landed row "
                                     "says where"))
            elif rows[0]["claim_version"] != s["claim_version"]:
                out.append(Violation("landed_wrong_claim", subject, f"subtask {sid} landed at claim version "
                                     f"{rows[0]['claim_version']} but is at {s['claim_version']}"))
        cands = candidates.get(sid, [])
        per_version: dict[int, int] = {}
        for c in cands:
            if c["status"] == "landed":
                per_version[c["claim_version"]] = per_version.get(c["claim_version"], 0) + 1
        for version, n in per_version.items():
            if n > 1:
                out.append(Violation("landed_twice", subject, f"subtask {sid} has {n} landed candidates at claim "
                                     f"version {version}"))
        if settled and status == "submitted":
            current = [c for c in cands if c["claim_version"] == s["claim_version"]]
            if current and not any(c["status"] in CANDIDATE_LIVE for c in current):
                out.append(Violation("stuck_submitted", subject, f"subtask {sid} is submitted at claim version "
                                     f"{s['claim_version']} but none of its candidates is still in the queue"))
    if settled:
        for ref, sha in tips.items():
            m = _SUBTASK_REF.match(ref)
            if m is None:
                continue
            sid, version = int(m.group(1)), int(m.group(2))
            sub = by_id.get(sid)
            if sub is None or sub["claim_version"] != version or sub["status"] not in ("running", "submitted"):
                continue
            if not any(c["claim_version"] == version and c["sha"] == sha for c in candidates.get(sid, [])):
                out.append(Violation("orphan_push", ref, f"{ref} is at {sha[:12]}, a push at the current claim "
                                     "version that never became a candidate"))
    return out


def check_pushes(pushes: Iterable[Push], candidates: Mapping[int, Sequence[Row]], *, settled: bool,
                 refusals: Mapping[int, Sequence[Row]] | None = None) -> list[Violation]:
    """No accepted push lost: each has a candidate, or a recorded refusal (the claim changed between git's
    pre-receive and post-receive steps: ``push_refused`` at stage post-receive); once settled, its candidate ended
    landed or refused with a reason."""
    out: list[Violation] = []
    refused = {(sid, e.get("claim_version"), (e.get("detail") or {}).get("sha"))
               for sid, events in (refusals or {}).items() for e in events
               if e.get("kind") == "push_refused" and (e.get("detail") or {}).get("message")}
    seen: set[tuple[int, int, str]] = set()
    for p in pushes:
        key = (p.subtask_id, p.claim_version, p.sha)
        if not p.accepted or key in seen:
            continue
        seen.add(key)
        subject = f"push {p.sha[:12]} (subtask {p.subtask_id} v{p.claim_version} by {p.agent})"
        mine = [c for c in candidates.get(p.subtask_id, []) if c["claim_version"] == p.claim_version
                and c["sha"] == p.sha]
        if not mine:
            if settled and key not in refused:
                out.append(Violation("lost_push", subject, f"{subject}: git reported it accepted, but it never "
                                     "became a candidate"))
            continue
        last = max(mine, key=lambda c: c["id"])
        if not settled:
            continue
        if last["status"] not in CANDIDATE_FINAL:
            out.append(Violation("push_not_settled", subject, f"{subject}: candidate {last['id']} is still "
                                 f"{last['status']}"))
        elif last["status"] != "landed" and not (last.get("reason") or "").strip():
            out.append(Violation("silent_refusal", subject, f"{subject}: candidate {last['id']} ended "
                                 f"{last['status']} without a recorded reason"))
    return out


def check(snap: Snapshot, pushes: Iterable[Push] = (), *, settled: bool = True) -> list[Violation]:
    """Every invariant at once, on one snapshot."""
    name = snap.repo["name"]
    mine = [r for r in snap.landed if r["repo"] == name]
    git_repo = pygit2.Repository(str(snap.git_dir))
    return (check_history(git_repo, snap.head, snap.repo["root_sha"], mine)
            + check_subtasks(snap.subtasks, snap.landed, snap.candidates, snap.tips, settled=settled)
            + check_pushes(pushes, snap.candidates, settled=settled, refusals=snap.refusals))


# -- reading a running server ----------------------------------------------------------------------------------


def basic_header(token: str) -> str:
    return "Authorization: Basic " + base64.b64encode(f"drill:{token}".encode()).decode()


def _git(args: Sequence[str], cwd: Path | None = None, *, check: bool = True, timeout: float = 300,
         env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "GIT_TERMINAL_PROMPT": "0", **(env or {})}
    out = subprocess.run(["git", "-c", "user.name=Mergebot Drill", "-c", "user.email=drill@mergebot.invalid", *args],
                         cwd=cwd, capture_output=True, text=True, env=full, check=False, timeout=timeout)
    if check and out.returncode != 0:
        raise RuntimeError(f"git {' '.join(args[:3])} failed: {out.stderr.strip()[-2000:]}")
    return out


def _paged(fetch: Callable[[int | None], list[dict[str, Any]]], key: str, limit: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cursor: int | None = None
    while True:
        page = fetch(cursor)
        out += page
        if len(page) < limit:
            return out
        cursor = page[-1][key]


def gather(client: Client, server: str, token: str, repo_name: str, cache: Path,
           extra_subtasks: Iterable[int] = ()) -> Snapshot:
    """Read everything the check needs from a running server. main is read before the rows, so a landing in
    between shows up as a row whose commit is not on main yet (``stable_check`` retries that away)."""
    repos = {r["name"]: r for r in client.get("/api/v1/repos")["repos"]}
    if repo_name not in repos:
        raise ValueError(f"no repository named {repo_name!r} on {server}")
    repo = repos[repo_name]
    branch = repo["target_branch"]
    git_dir = cache / f"{repo_name}.git"
    if not git_dir.exists():
        git_dir.parent.mkdir(parents=True, exist_ok=True)
        _git(["init", "-q", "--bare", str(git_dir)])
    url = f"{server.rstrip('/')}/git/{repo_name}.git"
    _git(["-c", f"http.extraHeader={basic_header(token)}", "--git-dir", str(git_dir), "fetch", "-q", "--prune",
          "--no-tags", url, f"+refs/heads/{branch}:refs/heads/{branch}",
          "+refs/heads/subtasks/*:refs/heads/subtasks/*"])
    bare = pygit2.Repository(str(git_dir))
    head = str(bare.references[f"refs/heads/{branch}"].target) if f"refs/heads/{branch}" in bare.references \
        else None
    tips = {ref: str(bare.references[ref].target) for ref in bare.references if _SUBTASK_REF.match(ref)}
    landed = _paged(lambda before: client.get("/api/v1/landed", before=before, limit=1000)["landed"], "id", 1000)
    subtasks = _paged(lambda after: client.get("/api/v1/subtasks", after=after or 0, limit=1000)["subtasks"], "id",
                      1000)
    want = {s["id"] for s in subtasks if s["status"] in ("running", "submitted")} | set(extra_subtasks)
    candidates = {sid: client.get("/api/v1/candidates", subtask=sid, limit=1000)["candidates"] for sid in sorted(want)}
    refusals = {sid: [e for e in _paged(lambda after, sid=sid: client.get(  # type: ignore[misc]
        f"/api/v1/subtasks/{sid}/events", after=after or 0, limit=1000)["events"], "id", 1000)
        if e["kind"] == "push_refused"] for sid in sorted(set(extra_subtasks))}
    return Snapshot(repo, git_dir, head, tips, landed, subtasks, candidates, refusals)


def stable_check(client: Client, server: str, token: str, repo_name: str, cache: Path, pushes: Sequence[Push] = (),
                 *, settled: bool = True, attempts: int = 5, pause: float = 1.0) -> list[Violation]:
    """``check`` on a live server: a violation counts only if it is seen on every attempt (a landing caught between
    reading main and reading the rows is not one). Returns the violations of the last attempt that persisted."""
    persistent: set[tuple[str, str]] | None = None
    last: list[Violation] = []
    for i in range(attempts):
        snap = gather(client, server, token, repo_name, cache, {p.subtask_id for p in pushes})
        last = check(snap, pushes, settled=settled)
        keys = {(v.kind, v.subject) for v in last}
        persistent = keys if persistent is None else persistent & keys
        if not persistent:
            return []
        if i + 1 < attempts:
            time.sleep(pause)
    return [v for v in last if (v.kind, v.subject) in (persistent or set())]


# -- driving a server as a fleet of agents -----------------------------------------------------------------------


def retry(fn: Callable[[], T], *, until: float, pause: float = 0.3) -> T:
    """Call ``fn`` until it answers: a server that is restarting or whose database is away (503) is waited for;
    any other refusal is raised."""
    while True:
        try:
            return fn()
        except (httpx.HTTPError, ApiError) as e:
            if isinstance(e, ApiError) and e.status < 500:
                raise
            if time.monotonic() > until:
                raise
            time.sleep(pause)


def push_head(wt: Path, branch: str, *, remote: str = "origin", timeout: float = 300) -> tuple[str, str]:
    """``git push`` HEAD to ``branch``: ("accepted" | "refused" | "failed", what git and the bot said)."""
    try:
        out = _git(["push", "--porcelain", "--force", remote, f"HEAD:refs/heads/{branch}"], wt, check=False,
                   timeout=timeout)
    except subprocess.TimeoutExpired:
        return "failed", f"git push took longer than {timeout:g} s"
    said = "\n".join(line for line in (out.stdout + out.stderr).splitlines() if line.strip())
    if out.returncode == 0:
        return "accepted", said
    if "[remote rejected]" in out.stdout or "[rejected]" in out.stdout:
        return "refused", said
    return "failed", said


def commit_file(wt: Path, path: str, text: str, message: str) -> str:
    (wt / path).parent.mkdir(parents=True, exist_ok=True)
    (wt / path).write_text(text)
    _git(["add", "--", path], wt)
    _git(["commit", "-q", "-m", message], wt)
    return _git(["rev-parse", "HEAD"], wt).stdout.strip()


@dataclass
class Agent:
    name: str
    token: str


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


class HoldingProxy:
    """A loopback TCP proxy in front of the bot that holds every ``git-receive-pack`` POST until ``release()``:
    a push that is under way (its pack on a slow link) while the pusher's lease runs out."""

    def __init__(self, target: str) -> None:
        parts = urlsplit(target)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 80)
        self._listen = socket.create_server(("127.0.0.1", 0))
        self.port = self._listen.getsockname()[1]
        self.url = urlunsplit((parts.scheme, f"127.0.0.1:{self.port}", "", "", ""))
        self.held = threading.Event()
        self.released = threading.Event()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="drill-proxy").start()

    def release(self) -> None:
        self.released.set()

    def close(self) -> None:
        self._closed = True
        self.released.set()
        with contextlib.suppress(OSError):
            self._listen.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listen.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=30)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, outbound: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if outbound and not self.released.is_set() and b"POST " in data and b"git-receive-pack" in data:
                    self.held.set()
                    self.released.wait(600)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()


class Drill:
    """Over-the-wire drills against one repository of a running server, with an admin token.

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

    def subtasks(self, n: int, title: str = "drill", *, until: float | None = None) -> list[int]:
        deadline = until or time.monotonic() + 60
        ids = []
        for i in range(n):
            key = f"{self.group}/{title}/{len(self.subtask_ids)}-{i}"
            got = retry(lambda key=key, i=i: self.admin.post("/api/v1/subtasks", {  # type: ignore[misc]
                "title": f"mergebot drill {self.run_id}: {title} {i} (do not claim)", "group": self.group,
                "priority": -1_000_000, "idempotency_key": key}), until=deadline)
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
            outcome, said = push_head(wt, f"subtasks/{sid}/v{version}", remote=remote)
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
                stop: threading.Event | None = None) -> None:
        """One agent: claim drill subtasks until none is ready; for each, commit, push (sometimes twice), and follow
        the verdict; a rejected candidate is fixed and pushed again (up to three times)."""
        client = Client(self.server, agent.token, timeout=30)
        wt = self.worktree(agent, until=until)
        while time.monotonic() < until and not (stop and stop.is_set()):
            held = self._held(client, agent, until)
            if held is None:
                got = retry(lambda: client.post("/api/v1/subtasks/claim"), until=until)
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
        branch = f"subtasks/{sid}/v{version}"
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

    def stream(self, agents: Sequence[Agent], *, until: float, double_push: float = 0.3,
               stop: threading.Event | None = None) -> tuple[StreamResult, list[threading.Thread]]:
        """Start every agent on its own thread; returns the shared result and the threads (join them)."""
        result = StreamResult()

        def run(agent: Agent) -> None:
            try:
                self.work_on(agent, result, until=until, double_push=double_push, stop=stop)
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
            _git(["checkout", "-q", "-B", f"subtasks/{sid}/v{race.old_version}", self._fetch_main(wt, until)], wt)
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
            _git(["checkout", "-q", "-B", f"subtasks/{sid}/v{race.new_version}", self._fetch_main(new_wt, until)],
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


# -- webhook deliveries ---------------------------------------------------------------------------------------------


def github_push_body(repo_full_name: str, ref: str, before: str, after: str, sender: str) -> bytes:
    return json.dumps({"ref": ref, "before": before, "after": after, "created": set(before) == {"0"},
                       "deleted": False, "forced": False, "repository": {"full_name": repo_full_name},
                       "sender": {"login": sender}, "pusher": {"name": sender}}).encode()


def signed_headers(forge: str, secret: str, body: bytes, delivery: str, event: str = "push") -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    if forge == "github":
        return {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": f"sha256={digest}",
                "Content-Type": "application/json"}
    prefix = "X-Forgejo" if forge == "forgejo" else "X-Gitea"
    return {f"{prefix}-Event": event, f"{prefix}-Delivery": delivery, f"{prefix}-Signature": digest,
            "X-Gitea-Signature": digest, "Content-Type": "application/json"}


def redelivery_storm(server: str, forge: str, secret: str, body: bytes, *, copies: int = 50,
                     same_id: bool = True, workers: int = 50) -> list[tuple[int, dict[str, Any]]]:
    """The same delivery ``copies`` times at once (same id, as a forge's redelivery; or a fresh id each time, as
    a replay). Returns every (status, body) answer."""
    endpoint = "github" if forge == "github" else "gitea"
    first = str(uuid.uuid4())

    def one(i: int) -> tuple[int, dict[str, Any]]:
        delivery = first if same_id else f"{first}-{i}"
        r = httpx.post(f"{server.rstrip('/')}/webhooks/{endpoint}", content=body,
                       headers=signed_headers(forge, secret, body, delivery), timeout=60)
        try:
            data = r.json()
        except ValueError:
            data = {"text": r.text[:500]}
        return r.status_code, data

    with ThreadPoolExecutor(min(workers, copies)) as pool:
        return list(pool.map(one, range(copies)))


# -- mergebot drill ---------------------------------------------------------------------------------------------


def _print(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run(args: argparse.Namespace, token: str, server: str) -> int:
    """``mergebot drill``: the over-the-wire drills against a running server, then the invariant check."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mergebot-drill-") as tmp:
        work = Path(tmp)
        client = Client(server, token, timeout=30)
        pushes: list[Push] = []
        report: dict[str, Any] = {"repo": args.repo, "server": server}
        failed = False
        if not args.check_only:
            drill = Drill(server, token, args.repo, work, log=_print, seed=args.seed)
            report["run_id"] = drill.run_id
            until = time.monotonic() + args.timeout
            skip = set(args.skip or [])
            try:
                if "stream" not in skip:
                    agents = drill.agents(args.agents, until=until)
                    ids = drill.subtasks(args.subtasks, "push stream", until=until)
                    _print(f"drill {drill.run_id}: {len(agents)} agents push {len(ids)} subtasks at once")
                    result, threads = drill.stream(agents, until=until)
                    for t in threads:
                        t.join(max(0.0, until - time.monotonic()))
                    pushes += result.pushes
                    landed = {sid for sid in ids if retry(lambda sid=sid: client.get(  # type: ignore[misc]
                        f"/api/v1/subtasks/{sid}")["subtask"]["status"], until=until + 60) == "landed"}
                    stream = {"subtasks": len(ids), "landed": len(landed),
                              "pushes": len(result.pushes),
                              "accepted": sum(p.accepted for p in result.pushes), "errors": result.errors,
                              "foreign_claims_given_back": result.foreign}
                    report["stream"] = stream
                    if result.errors or landed != set(ids):
                        failed = True
                    _print(f"push stream: {stream}")
                if "lease" not in skip:
                    old, new = drill.agents(2, until=until)
                    _print("lease race: holding the old owner's push until its lease lapses (lease + grace)")
                    race = drill.lease_race(old, new, until=until)
                    pushes += [p for p in (race.held_push, race.new_push, *race.late_pushes) if p is not None]
                    report["lease_race"] = {"subtask": race.subtask_id, "old_version": race.old_version,
                                            "new_version": race.new_version, "verdict": race.verdict,
                                            "heartbeat_after_expiry": race.heartbeat_after_expiry,
                                            "held_push": race.held_push and {
                                                "outcome": race.held_push.outcome,
                                                "message": race.held_push.message[-1000:]},
                                            "late_pushes": [p.outcome for p in race.late_pushes],
                                            "problems": race.problems}
                    failed = failed or bool(race.problems)
                    _print(f"lease race: {report['lease_race']}")
                if "storm" not in skip:
                    report["storm"] = _cli_storm(args, client, server, token)
                    failed = failed or bool(report["storm"].get("problems"))
            finally:
                report["cancelled_leftovers"] = drill.cancel_leftovers()
        violations = stable_check(client, server, token, args.repo, work / "check", pushes,
                                  settled=not args.check_only or args.settled, attempts=args.attempts)
        report["violations"] = [{"kind": v.kind, "subject": v.subject, "message": v.message} for v in violations]
        report["seconds"] = round(time.monotonic() - started, 1)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        for v in violations:
            print(f"VIOLATION {v}")
        print(f"{len(violations)} violation(s) on {args.repo}" + ("" if args.check_only else
              f"; drills {'FAILED' if failed else 'passed'}") + f" in {report['seconds']} s")
    return 1 if violations or failed else 0


def _cli_storm(args: argparse.Namespace, client: Client, server: str, token: str) -> dict[str, Any]:
    """A redelivery storm needs a forge repository, the webhook secret, and an agent a forge login is linked to."""
    repo = next(r for r in client.get("/api/v1/repos")["repos"] if r["name"] == args.repo)
    if not repo.get("forge"):
        return {"skipped": "not a forge repository"}
    secret = os.environ.get(repo.get("webhook_secret_env") or "MERGEBOT_WEBHOOK_SECRET", "")
    if not (secret and args.forge_login and args.forge_agent_token):
        return {"skipped": f"needs ${repo.get('webhook_secret_env')}, --forge-login and --forge-agent-token"}
    until = time.monotonic() + args.timeout
    with tempfile.TemporaryDirectory(prefix="mergebot-storm-") as tmp:
        drill = Drill(server, token, args.repo, Path(tmp), log=_print)
        try:
            return _storm(args, client, server, repo, secret, drill, until)
        finally:
            drill.cancel_leftovers()


def _storm(args: argparse.Namespace, client: Client, server: str, repo: dict[str, Any], secret: str, drill: Drill,
           until: float) -> dict[str, Any]:
    from mergebot.git import mirror

    sid = drill.subtasks(1, "redelivery storm", until=until)[0]
    agent = Client(server, args.forge_agent_token, timeout=30)
    got = agent.post("/api/v1/subtasks/claim")
    problems: list[str] = []
    if got is None or got["handle"]["id"] != sid:
        if got is not None:  # not ours: give it back untouched
            with contextlib.suppress(ApiError, httpx.HTTPError):
                agent.post(f"/api/v1/subtasks/{got['handle']['id']}/release",
                           {"claim_version": got["handle"]["claim_version"], "reason": "claimed by a mergebot drill"})
        return {"skipped": f"the forge agent did not get the drill subtask: {got and got['handle']}"}
    version = got["handle"]["claim_version"]
    remote = mirror.remote_for(repo["forge_git_url"], repo.get("forge_token_env"))
    wt = drill.work / "storm"
    _git(["clone", "-q", "--single-branch", "--branch", repo["target_branch"], remote.url, str(wt)], drill.work,
         env=remote.env())
    sha = commit_file(wt, f"drill/{drill.run_id}/storm.txt", "storm\n", "drill: redelivery storm")
    ref = f"refs/heads/subtasks/{sid}/v{version}"
    _git(["push", "-q", remote.url, f"HEAD:{ref}"], wt, env=remote.env())
    body = github_push_body(repo["forge_repo"], ref, "0" * 40, sha, args.forge_login)
    answers = redelivery_storm(server, repo["forge"], secret, body, copies=args.copies)
    queued = [b for s, b in answers if s == 202]
    if len(queued) != 1 or any(s not in (200, 202, 503) for s, _ in answers):
        problems.append(f"answers: {sorted(s for s, _ in answers)}")
    v = drill.verdict(agent, Push("forge", sid, version, sha, "accepted"), until=until)
    cands = client.get("/api/v1/candidates", subtask=sid)["candidates"]
    if v is None or v["status"] != "landed" or len(cands) != 1:
        problems.append(f"verdict {v and v['status']}, {len(cands)} candidate(s)")
    return {"subtask": sid, "copies": args.copies, "statuses": sorted({s for s, _ in answers}),
            "candidates": len(cands), "problems": problems}


def add_arguments(sp: argparse.ArgumentParser) -> None:
    """``mergebot drill``'s options (the parser lives in ``mergebot.cli``)."""
    sp.add_argument("--url", help="the server (same as --server; default MERGEBOT_URL)")
    sp.add_argument("--repo", required=True, help="the repository to drill: use a scratch one, drills land commits")
    sp.add_argument("--check-only", action="store_true", dest="check_only",
                    help="only the invariant check (any role's token); exit 1 on a violation")
    sp.add_argument("--settled", action="store_true", help="with --check-only: the queue is idle, so also check "
                    "that no subtask branch or submitted subtask was left behind")
    sp.add_argument("--agents", type=int, default=4, help="agents pushing at once in the push stream")
    sp.add_argument("--subtasks", type=int, default=8, help="subtasks the push stream lands")
    sp.add_argument("--skip", action="append", choices=["stream", "lease", "storm"], help="leave a drill out "
                    "(repeatable); the lease race waits for the server's lease plus its grace period")
    sp.add_argument("--timeout", type=float, default=900.0, help="seconds for all the drills together")
    sp.add_argument("--attempts", type=int, default=5, help="a violation counts if seen on this many reads in a row")
    sp.add_argument("--seed", type=int, help="seed of the drill's random choices")
    sp.add_argument("--copies", type=int, default=50, help="deliveries in the redelivery storm")
    sp.add_argument("--forge-login", dest="forge_login", help="storm: a forge login linked to the agent below")
    sp.add_argument("--forge-agent-token", dest="forge_agent_token", help="storm: that agent's token")
