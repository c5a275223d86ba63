"""The offered-load fleet's agents (``python -m bench.fleet --offered F``): OS threads, one per agent, that work at a
chosen pace, keep their claims alive, and honour the claim route's typed refusals.

Rules:

* **Pace.** Each agent thinks (works on its claim) for an exponentially distributed time of mean ``think`` seconds
  (its own RNG, seeded by ``--seed`` and the agent), then commits and pushes. ``think`` is chosen so the fleet
  offers ``F`` times the verifier's capacity: ``agents x D / think = F x W`` verifier-seconds per second (D the
  check, W the workers; ``--greedy SHARE:G`` makes a share of the agents think G times faster at the same total).
  The agents start spread over one think time, so the claims arrive at the offered rate, not in one burst.
* **Pipelining.** An agent keeps up to ``--pipeline K`` claims (each in its own clone): after a push it claims the
  next piece of work without waiting for the verdict, until K are held; then it waits for a verdict first. A
  rejected candidate is fixed and pushed again under the same claim; a push refused with "rebase onto" is rebased.
* **Heartbeats, as the keeper does** (``mergebot.agent.keeper``): every claim is renewed at a third of the lease
  from the moment the claim is answered (while the worktree is still being prepared) until it lands. One keeper
  thread per 250 claims beats for the agents, each heartbeat with the agent's own token. ``--heartbeat off`` sends
  none (what the issue measured: claims then lapse while their agents work).
* **Typed refusals** (HTTP 429/503 with a JSON ``kind``): on ``capacity`` the agent claims the other work the answer
  offers, once, or else sleeps ``retry_after`` (5 s when none is given); on ``wip_limit`` it finishes work first
  (waits for a verdict) before it claims again. Every refusal, at claim or push time, is recorded with its kind and
  whether it named a next step.
* **Verdicts** are read by one watcher thread from the database every half second, not by a long poll per agent,
  so the client's own waiting does not load the server it measures; a landed claim's keeper stops there.
"""

from __future__ import annotations

import contextlib
import queue
import random
import ssl
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from bench.common.gitenv import run_git
from bench.fleet.agents import REPO
from bench.fleet.offered_figures import Event, Refusal, claim_gone, typed_refusal
from mergebot import agent
from mergebot.client import ApiError, Client
from mergebot.errors import MergebotError

FINAL = ("landed", "rejected", "superseded", "cancelled")
IDLE_WAIT = 20.0  # seconds an idle agent's claim waits for work (the claim route's long poll)


@dataclass
class Log:
    """What every agent saw, shared by all (appends are atomic under the GIL)."""

    events: list[Event] = field(default_factory=list)
    refusals: list[Refusal] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    claim_at: dict[tuple[int, int], float] = field(default_factory=dict)

    def event(self, agent_no: int, kind: str, sid: int, cv: int, detail: str = "") -> None:
        self.events.append(Event(time.time(), agent_no, kind, sid, cv, detail))


class Keepers:
    """Heartbeats for every held claim at a third of the lease, spread over a few threads (a keeper each)."""

    def __init__(self, url: str, lease: float, log: Log, stop: threading.Event, *, on: bool = True,
                 per_thread: int = 250, agents: int = 1) -> None:
        self.url, self.interval, self.log, self.stop, self.on = url, max(0.5, lease / 3), log, stop, on
        self.lock = threading.Lock()
        self.held: list[dict[tuple[int, int], tuple[int, str, float]]] = [
            {} for _ in range(max(1, -(-agents // per_thread)))]
        self.lost: set[tuple[int, int]] = set()
        self.threads = [threading.Thread(target=self._run, args=(i,), name=f"keeper-{i}", daemon=True)
                        for i in range(len(self.held))]
        for t in self.threads:
            t.start()

    def keep(self, agent_no: int, token: str, sid: int, cv: int) -> None:
        if self.on:
            with self.lock:
                self.held[sid % len(self.held)][(sid, cv)] = (agent_no, token, time.monotonic() + self.interval)

    def drop(self, sid: int, cv: int) -> None:
        with self.lock:
            self.held[sid % len(self.held)].pop((sid, cv), None)

    def _run(self, shard: int) -> None:
        with httpx.Client(base_url=self.url, timeout=30.0, verify=tls()) as http:
            while not self.stop.wait(0.25):
                now = time.monotonic()
                with self.lock:
                    due = [(k, v) for k, v in self.held[shard].items() if v[2] <= now]
                for (sid, cv), (agent_no, token, _) in due:
                    try:
                        r = http.post(f"/api/v1/subtasks/{sid}/heartbeat", json={"claim_version": cv},
                                      headers={"Authorization": f"Bearer {token}"})
                    except httpx.HTTPError as e:
                        self.log.errors.append(f"heartbeat {sid} v{cv}: {type(e).__name__}")
                        continue
                    with self.lock:
                        if (sid, cv) not in self.held[shard]:
                            continue
                        if r.status_code == 200:
                            self.held[shard][(sid, cv)] = (agent_no, token, time.monotonic() + self.interval)
                            continue
                        if r.status_code >= 500:
                            continue  # the server is busy: beat again next round
                        self.held[shard].pop((sid, cv), None)
                        self.lost.add((sid, cv))
                    self.log.event(agent_no, "beat_refused", sid, cv, r.text[:200])


class Watcher:
    """The verdicts of the agents' candidates, read from the database every half second and handed to each agent."""

    def __init__(self, db_url: str, stop: threading.Event, keepers: Keepers, log: Log) -> None:
        self.db_url, self.stop, self.keepers, self.log = db_url, stop, keepers, log
        self.lock = threading.Lock()
        self.watched: dict[int, tuple[int, queue.Queue[dict[str, Any]]]] = {}
        self.thread = threading.Thread(target=self._run, name="verdicts", daemon=True)
        self.thread.start()

    def watch(self, cand_id: int, agent_no: int, inbox: queue.Queue[dict[str, Any]]) -> None:
        with self.lock:
            self.watched[cand_id] = (agent_no, inbox)

    def _run(self) -> None:
        with contextlib.suppress(psycopg.Error), psycopg.connect(self.db_url, autocommit=True) as conn:
            while not self.stop.wait(0.5):
                with self.lock:
                    ids = list(self.watched)
                if not ids:
                    continue
                rows = conn.execute("SELECT id, subtask_id, claim_version, status::text, coalesce(reason, ''), "
                                    "coalesce(verdict->>'kind', '') FROM candidates WHERE id = ANY(%s) "
                                    "AND status::text = ANY(%s)", (ids, list(FINAL))).fetchall()
                for cid, sid, cv, status, reason, kind in rows:
                    with self.lock:
                        found = self.watched.pop(cid, None)
                    if found is None:
                        continue
                    agent_no, inbox = found
                    if status == "landed":  # the claim is done: its keeper stops now, not when the agent looks
                        self.keepers.drop(sid, cv)
                        self.log.event(agent_no, "landed", sid, cv, str(cid))
                    inbox.put({"id": cid, "subtask": sid, "claim_version": cv, "status": status, "reason": reason,
                               "kind": kind})


_TLS: list[ssl.SSLContext] = []


def tls() -> ssl.SSLContext:
    """One TLS context for every agent's client (made once; a list append is atomic under the GIL)."""
    if not _TLS:
        _TLS.append(ssl.create_default_context())
    return _TLS[0]


class AgentClient(Client):
    """The agent's client, which hands every claim to its keeper the moment the server answers it (before the
    worktree is prepared), as ``mergebot start`` leaves its keeper beside the claim."""

    def __init__(self, url: str, token: str, on_claim: Callable[[int, int], None]) -> None:
        # ``Client``'s own, with one TLS context for the whole fleet: each client making its own costs ~30 ms of
        # CPU and ~1 MB, which at 1,000 agents was half a minute of start-up and a gigabyte
        self.http = httpx.Client(base_url=url.rstrip("/"), headers={"Authorization": f"Bearer {token}"},
                                 timeout=120.0, verify=tls())
        self.on_claim = on_claim
        self.last: tuple[int, int] | None = None  # the last claim answered

    def post(self, path: str, json: Any = None) -> Any:
        out = super().post(path, json)
        if path == "/api/v1/subtasks/claim" and isinstance(out, dict) and "handle" in out:
            self.last = (int(out["handle"]["id"]), int(out["handle"]["claim_version"]))
            self.on_claim(*self.last)
        return out


@dataclass
class Held:
    sid: int
    cv: int
    wt: Path
    pushes: int = 0


@dataclass
class Fleet:
    """What the agents share: the server, the keepers, the watcher, the log and the run's stop."""

    url: str
    keepers: Keepers
    watcher: Watcher
    log: Log
    stop: threading.Event
    deadline: float
    seed: int
    max_pushes: int = 10


def offered_agent(fleet: Fleet, no: int, token: str, wts: list[Path], *, think: float, p: float,
                  start: threading.Event) -> None:
    """One agent: claim (honouring typed refusals), think, push, keep up to ``len(wts)`` claims, until the run
    stops; with nothing ready and nothing held, its claims wait for work (a lapsed claim comes back to ready)."""
    rng = random.Random(f"{fleet.seed}:agent:{no}")

    def claimed(sid: int, cv: int) -> None:
        fleet.keepers.keep(no, token, sid, cv)
        fleet.log.claim_at[(sid, cv)] = time.time()
        fleet.log.event(no, "claim", sid, cv)

    client = AgentClient(fleet.url, token, claimed)
    idle = False  # found nothing ready last time: the next claim waits for work (the long poll)
    inbox: queue.Queue[dict[str, Any]] = queue.Queue()
    held: dict[int, Held] = {}  # candidate id -> the claim it was pushed under, until its verdict
    free = list(wts)
    start.wait()
    fleet.stop.wait(rng.uniform(0, think))
    try:
        while not fleet.stop.is_set() and time.time() < fleet.deadline:
            while not inbox.empty():  # verdicts that came in meanwhile
                _verdict(fleet, no, client, inbox.get(), held, free, inbox)
            if not free:
                _wait_verdict(fleet, no, client, inbox, held, free)
                continue
            got = _claim(fleet, no, client, token, free[-1], rng, wait=IDLE_WAIT if idle and not held else 0.0)
            idle = got is None
            if got == "wip_limit":  # finish work first: a verdict, or (holding none here) a while
                if held:
                    _wait_verdict(fleet, no, client, inbox, held, free)
                else:
                    fleet.stop.wait(5.0)
                continue
            if got == "retry":
                continue
            if got is None:  # nothing ready: wait for a verdict, or for work (a lapsed claim comes back)
                if held:
                    _wait_verdict(fleet, no, client, inbox, held, free)
                continue
            assert isinstance(got, agent.Claim)
            wt = free.pop()
            if fleet.stop.wait(rng.expovariate(1.0 / think) if think > 0 else 0.0):
                break  # the run ended while it thought
            _work(fleet, no, client, Held(got.subtask_id, got.claim_version, wt), held, free, inbox, p)
    except Exception as e:  # an agent's crash is a figure, not the end of the run
        if not fleet.stop.is_set():
            fleet.log.errors.append(f"agent {no}: {type(e).__name__}: {str(e)[:300]}")
    finally:
        client.close()


def _claim(fleet: Fleet, no: int, client: AgentClient, token: str, wt: Path, rng: random.Random, *, wait: float = 0.0,
           prefer_now: bool = False) -> agent.Claim | str | None:
    """A claim into ``wt`` (the keeper was handed it as soon as it was answered); ``"retry"`` after a capacity answer
    was honoured, ``"wip_limit"`` to finish work first."""
    client.last = None
    try:
        got = agent.start(client, fleet.url, token, REPO, wt, wait=wait)
    except ApiError as e:  # every answer that refused a claim is a refusal, typed or not
        kind, retry_after, named, offered, message = typed_refusal(e.status, e.body)
        fleet.log.refusals.append(Refusal("claim", kind, named, message or e.message))
        if e.status not in (429, 503):
            fleet.log.errors.append(f"agent {no} claim: {e.status} {e.code}: {e.message[:200]}")
            fleet.stop.wait(1.0)
            return "retry"
        if kind == "wip_limit":
            return "wip_limit"
        if kind == "capacity" and offered and not prefer_now:
            return _claim(fleet, no, client, token, wt, rng, prefer_now=True)  # the other work, once
        wait = retry_after if retry_after is not None else 5.0
        fleet.stop.wait(min(60.0, wait) * rng.uniform(0.9, 1.1))
        return "retry"
    except (RuntimeError, httpx.HTTPError, OSError, MergebotError) as e:
        if fleet.stop.is_set():  # the run is over and the server going: nothing to count, nothing to tidy
            return "retry"
        fleet.log.errors.append(f"agent {no} start: {type(e).__name__}: {str(e)[:200]}")
        if client.last is not None:  # claimed, then the worktree could not be prepared: start released it
            fleet.keepers.drop(*client.last)
            fleet.log.event(no, "given_up", *client.last)
        with contextlib.suppress(RuntimeError):  # a clone left on other work goes back to main
            run_git(["reset", "-q", "--hard", "origin/main"], wt)
        fleet.stop.wait(1.0)
        return "retry"
    return None if got is None else got[0]


def _work(fleet: Fleet, no: int, client: Client, h: Held, held: dict[int, Held], free: list[Path],
          inbox: queue.Queue[dict[str, Any]], p: float) -> None:
    """Write the subtask's file (and, with probability ``p``, its failing marker), commit and push."""
    fail = random.Random(f"{fleet.seed}:{h.sid}").random() < p
    (h.wt / "work" / f"{h.sid}.txt").write_text(f"subtask {h.sid}, claim v{h.cv}\n")
    if fail:
        (h.wt / "work" / f"{h.sid}.fail").write_text("this candidate fails the check\n")
    run_git(["add", "-A"], h.wt)
    run_git(["commit", "-q", "-m", f"subtask {h.sid}"], h.wt)
    _push(fleet, no, client, h, held, free, inbox)


def _push(fleet: Fleet, no: int, client: Client, h: Held, held: dict[int, Held], free: list[Path],
          inbox: queue.Queue[dict[str, Any]]) -> None:
    while h.pushes < fleet.max_pushes:
        h.pushes += 1
        res = agent.push(client, h.wt, wait=0, progress=False)
        if res["status"] != "refused":
            if res.get("id") is None:
                fleet.log.errors.append(f"agent {no} subtask {h.sid}: {res['status']}: {str(res.get('reason'))[:200]}")
                break
            held[int(res["id"])] = h
            fleet.log.event(no, "pushed", h.sid, h.cv, str(res["id"]))
            fleet.watcher.watch(int(res["id"]), no, inbox)
            return
        verdict = res.get("verdict") or {}
        kind, text = str(verdict.get("kind") or "push_failed"), str(res.get("reason") or "")
        fleet.log.refusals.append(Refusal("push", kind, bool(verdict.get("next")), text))
        fleet.log.event(no, "push_refused", h.sid, h.cv, f"{kind}:{text[:300]}")
        if claim_gone(kind, text):
            break  # the claim is gone: the work is lost, whoever claims the subtask next does it again
        if "rebase onto" not in text:
            break
        _rebase(h)
    _let_go(fleet, no, h, free)


def _rebase(h: Held) -> None:
    run_git(["fetch", "-q", "origin"], h.wt)
    if subprocess.run(["git", "rebase", "-q", "origin/main"], cwd=h.wt, capture_output=True,
                      check=False).returncode != 0:
        subprocess.run(["git", "rebase", "--abort"], cwd=h.wt, capture_output=True, check=False)
        run_git(["reset", "-q", "--hard", "origin/main"], h.wt)
        (h.wt / "work" / f"{h.sid}.txt").write_text(f"subtask {h.sid}, rebased\n")
        run_git(["add", "-A"], h.wt)
        run_git(["commit", "-q", "-m", f"subtask {h.sid} (rebased)"], h.wt)


def _let_go(fleet: Fleet, no: int, h: Held, free: list[Path]) -> None:
    """Stop holding a claim that will not land from here: its clone goes back to main for the next claim."""
    fleet.keepers.drop(h.sid, h.cv)
    fleet.log.event(no, "given_up", h.sid, h.cv)
    with contextlib.suppress(RuntimeError):
        run_git(["fetch", "-q", "origin"], h.wt)
        run_git(["reset", "-q", "--hard", "origin/main"], h.wt)
    free.append(h.wt)


def _wait_verdict(fleet: Fleet, no: int, client: Client, inbox: queue.Queue[dict[str, Any]], held: dict[int, Held],
                  free: list[Path]) -> None:
    with contextlib.suppress(queue.Empty):
        _verdict(fleet, no, client, inbox.get(timeout=1.0), held, free, inbox)


def _verdict(fleet: Fleet, no: int, client: Client, v: dict[str, Any], held: dict[int, Held], free: list[Path],
             inbox: queue.Queue[dict[str, Any]]) -> None:
    h = held.pop(int(v["id"]), None)
    if h is None:
        return
    if v["status"] == "landed":  # the watcher stopped its keeper and recorded it
        free.append(h.wt)
        return
    if v["status"] != "rejected":  # superseded or cancelled: not this bench's path
        fleet.log.errors.append(f"agent {no} subtask {h.sid}: {v['status']}: {v['reason'][:200]}")
        _let_go(fleet, no, h, free)
        return
    fleet.log.event(no, "rejected", h.sid, h.cv, v["kind"])
    if "conflicts with" in v["reason"]:  # not expected (disjoint files); do what an agent would
        _rebase(h)
    else:
        marker = h.wt / "work" / f"{h.sid}.fail"
        if marker.exists():
            marker.unlink()
        run_git(["add", "-A"], h.wt)
        run_git(["commit", "-q", "--allow-empty", "-m", f"subtask {h.sid}: fix the check"], h.wt)
    _push(fleet, no, client, h, held, free, inbox)
