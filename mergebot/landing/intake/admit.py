"""Admission control and caps on work in progress, carried out: measure, ask ``admission``, answer the claim.

Rules (what to decide is ``mergebot.landing.intake.admission``'s; this module gathers and records):
  * Each replica measures the lanes at most once per ``MERGEBOT_ADMISSION_CACHE_SECONDS`` (one query,
    ``admission_measure``) and decides for every lane; a lane whose decision differs from its recorded state is
    written (``admission_flip``: only the change is written, and logged), so every replica continues from it.
  * A stale lane admits, with a warning logged at most once a minute per lane.
  * A claim is checked against its agent's cap first (``MERGEBOT_AGENT_WIP``: never waited out, since only the
    agent can free it), then against capacity; a claim with ``wait`` polls capacity until it is admitted or its
    wait ends, then answers with the refusal. Each refusal is counted where ``/metrics`` reads it.
  * A refusing lane's free slots (rules 5 and 6) go to the waiting agents in line: the agent's place is read
    (``admission_standing``), ``turn`` decides, and the slot is taken in one statement that holds the lane's count
    (``admission_take``), so two replicas never give one slot twice. A claim let in, through a slot or an admitting
    lane, counts one to its agent (``claimed``, after the claim was made); a refused one keeps its agent in line.
  * A claim a lane would let in is held back while the lane's claims in flight fill what its verifiers need (rule
    8, ``flight_wait``): the measured count, plus the claims this replica let in since it measured (``claimed``
    counts them), so a burst between two measurements is held too (another replica's show at its next one).
  * ``MERGEBOT_ADMISSION=off`` admits every claim without measuring (the cap still holds).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from mergebot import messages as say
from mergebot.db.database import Database
from mergebot.errors import Capacity, Refused, WipLimit
from mergebot.landing.intake.admission import (
    LINE_GRACE,
    WINDOW,
    Decision,
    Lane,
    Standing,
    cap_for,
    caps,
    decide,
    flight_wait,
    turn,
)
from mergebot.settings import Settings

log = logging.getLogger(__name__)

POLL = 2.0  # a waiting claim looks again at least this often
WARN_EVERY = 60.0  # seconds between two warnings of one stale lane


@dataclass
class Refusal:
    """A claim not admitted: ``error`` words it (``completed``: a subtask the same request submitted)."""

    kind: str
    facts: dict[str, Any] = field(default_factory=dict)

    def error(self, completed: int | None = None) -> Refused:
        f = self.facts
        extra = {"completed": completed} if completed is not None else {}
        if self.kind == "wip_limit":
            return WipLimit(say.wip_limit_reached(f["agent"], f["cap"], f["holds"], completed=completed),
                            **f, **extra)
        if f.get("reason") == "in_flight":
            return Capacity(say.capacity_in_flight(f["lane"], in_flight=f["in_flight"], cap=f["in_flight_cap"],
                                                   push_seconds=f["push_seconds"], retry_after=f["retry_after"],
                                                   completed=completed), **f, **extra)
        if f.get("reason") == "fair_share":
            return Capacity(say.capacity_fair_share(f["lane"], in_line=f["in_line"], served=f["served"],
                                                    least=f["least_waiting"], retry_after=f["retry_after"],
                                                    completed=completed), **f, **extra)
        return Capacity(say.capacity_refused(f["lanes"], retry_after=f["retry_after"],
                                             elsewhere=[e["lane"] for e in f["elsewhere"]], ready=f["ready"],
                                             completed=completed), **f, **extra)


class Admission:
    def __init__(self, settings: Settings) -> None:
        self.on = settings.admission == "on"
        self.factor = settings.admission_factor
        self.min_runs = settings.admission_min_runs
        self.min_claims = settings.admission_min_claims
        self.ttl = settings.admission_cache_seconds
        self.caps = caps(settings.agent_wip)
        self._cache: tuple[float, list[Decision]] | None = None
        self._since: dict[str, tuple[Any, int]] = {}  # per lane, as measured: since when it refuses, freed since
        self._let_in: dict[str, int] = {}  # per lane: claims let in since it was measured (rule 8)
        self._warned: dict[str, float] = {}

    async def decisions(self, db: Database, *, record: bool = True) -> list[Decision]:
        """Every lane's decision now (measured at most once per ``ttl``), its state recorded when it changed; a
        read view asks without ``record``, and writes nothing."""
        now = time.monotonic()
        if self._cache is not None and now - self._cache[0] < self.ttl:
            return self._cache[1]
        out = []
        for r in await db.admission.measure(window=WINDOW):
            lane = Lane(repo=r["repo"], candidates=r["candidates"], weight=r["weight"], run_seconds=r["run_seconds"],
                        slots=r["slots"], last_run_age=r["last_run_age"], window=r["speculation_window"],
                        admitting=r["admitting"], per_run=r["cleared"] / r["runs"] if r["runs"] else 1.0,
                        freed=r["freed"], admitted=r["admitted"], in_flight=r["in_flight"],
                        push_seconds=r["push_seconds"],
                        cleared_rate=r["cleared"] / r["cleared_over"] if r["cleared_over"] else None)
            d = decide(lane, factor=self.factor, min_runs=self.min_runs, min_claims=self.min_claims)
            self._since[lane.repo] = (r["changed_at"], r["freed"])
            self._let_in[lane.repo] = 0
            if not record:
                out.append(d)
                continue
            if d.stale and lane.candidates and now - self._warned.get(lane.repo, -WARN_EVERY) >= WARN_EVERY:
                self._warned[lane.repo] = now
                log.warning(say.admission_stale(lane.repo, lane.last_run_age), extra={"kind": "admission_stale"})
            if d.spent:
                await db.admission.write_off(repo=lane.repo, since=r["changed_at"], freed=lane.freed)
            if d.admit != lane.admitting and await db.admission.flip(
                    repo=lane.repo, admitting=d.admit, backlog=d.backlog_seconds, threshold=d.threshold_seconds):
                log.info(say.admission_flipped(lane.repo, d.admit, d.backlog_seconds, d.threshold_seconds,
                                               d.low_seconds), extra={"kind": "admission"})
            out.append(d)
        if record:
            self._cache = (now, out)
        return out

    async def view(self, db: Database) -> dict[str, Any]:
        """What the status, the queue page and ``/metrics`` show: each lane's decision, the refusals counted."""
        lanes = await self.decisions(db, record=False)
        refusals = await db.admission.refusals()
        return {"on": self.on, "factor": self.factor,
                "lanes": [{**d.as_json(), "admitting": d.admit or not self.on, "refusals": refusals.get(d.repo, 0)}
                          for d in lanes],
                "wip_refusals": await db.admission.wip_refusals()}

    async def wip(self, db: Database, *, agent_id: int, name: str, role: str) -> Refusal | None:
        cap = cap_for(self.caps, name=name, role=role)
        if cap is None:
            return None
        holds = await db.admission.holds(agent_id, limit=cap + 1)
        if len(holds) < cap:
            return None
        await db.admission.wip_refused()
        held = [{"id": h["id"], "key": h["key"], "title": h["title"], "status": h["status"],
                 "claim_version": h["claim_version"], "candidates": list(h["candidates"] or [])} for h in holds]
        return Refusal("wip_limit", {"agent": name, "cap": cap, "holds": held, "retry_after": 0,
                                     "next": say.WIP_NEXT})

    async def capacity(self, db: Database, repo: str | None, agent_id: int) -> Refusal | None:
        """The refusal of a claim for ``repo`` (None: for any lane), or None when it is admitted."""
        if not self.on:
            return None
        decisions = await self.decisions(db)
        mine = [d for d in decisions if repo is None or d.repo == repo]
        if not mine:
            return None
        row = await db.admission.standing(agent_id, d=max(d.run_seconds for d in mine))
        standing = Standing(claims=int(row["claims"]), ahead=int(row["ahead"]), served=float(row["served"]),
                            least=None if row["least"] is None else float(row["least"])) if row else Standing()
        retries = []
        flight: list[Decision] = []  # lanes that would let it in but for their claims in flight (rule 8)
        for d in sorted(mine, key=lambda d: (not d.admit, -d.free)):
            now, retry_after = turn(d, standing)
            held = flight_wait(d, let_in=self._let_in.get(d.repo, 0), ahead=standing.ahead) if now else None
            if held is not None:
                flight.append(d)
                retries.append(held)
                continue
            if now and d.admit:
                return None
            since, freed = self._since[d.repo]
            if now and since is not None and await db.admission.take(repo=d.repo, since=since, freed=freed):
                return None
            retries.append(retry_after)
        retry = min(retries)
        await db.admission.waits(agent_id, hold=retry + LINE_GRACE)
        if flight:  # rule 8: the work it would add is already out, claimed and not yet pushed
            d = flight[0]
            return await _capacity(db, d.repo, mine, retry, standing, reason="in_flight", in_flight=d.in_flight,
                                   in_flight_cap=round(d.flight_cap or 0.0, 1),
                                   push_seconds=None if d.push_seconds is None else round(d.push_seconds, 1))
        if any(d.admit for d in mine):  # rule 7: room, but for the less served agents waiting first
            return await _capacity(db, mine[0].repo, mine, retry, standing, reason="fair_share",
                                   claims=standing.claims, served=round(standing.served, 1),
                                   least_waiting=None if standing.least is None else round(standing.least, 1))
        first = mine[0]
        elsewhere = [{"lane": d.repo, "backlog_seconds": round(d.backlog_seconds, 1),
                      "threshold_seconds": round(d.threshold_seconds, 1)} for d in decisions if d.admit]
        return await _capacity(db, first.repo, mine, retry, standing, elsewhere=elsewhere,
                               backlog_seconds=round(first.backlog_seconds, 1), candidates=first.candidates,
                               threshold_seconds=round(first.threshold_seconds, 1), capacity=first.capacity)

    async def claimed(self, db: Database, agent_id: int, *, subtask_id: int, repo: str | None) -> None:
        """A claim let in was made: one more to its agent's account (counted as a run until a run charges its work:
        rule 6's line is ordered by what each agent was served), and one more
        in flight for its lane (rule 8) until the lane is measured again."""
        if self.on:
            await db.admission.claimed(agent_id, subtask_id=subtask_id, repo=repo)
            for lane in self._let_in if repo is None else [repo]:
                self._let_in[lane] = self._let_in.get(lane, 0) + 1

    async def admit(self, db: Database, *, agent_id: int, name: str, role: str, repo: str | None,
                    wait: float = 0.0) -> tuple[Refusal | None, float]:
        """Whether a claim is admitted: (None, seconds waited) when it is, else (the refusal, seconds waited)."""
        refused = await self.wip(db, agent_id=agent_id, name=name, role=role)
        if refused is not None:
            return refused, 0.0
        loop = asyncio.get_running_loop()
        start = loop.time()
        while True:
            refused = await self.capacity(db, repo, agent_id)
            waited = loop.time() - start
            if refused is None:
                return None, waited
            left = wait - waited
            if left <= 0:
                for lane in refused.facts["lanes"]:
                    await db.admission.refused(lane["lane"])
                return refused, waited
            await asyncio.sleep(min(float(refused.facts["retry_after"]), left, POLL))


async def _capacity(db: Database, lane: str, mine: list[Decision], retry: int, standing: Standing, *,
                    elsewhere: list[dict[str, Any]] | None = None, **facts: Any) -> Refusal:
    """A ``capacity`` refusal: the lane that refused, why (``facts``: rule 8's claims in flight, rule 7's fair share,
    or the backlog over its threshold), when to come back, the agent's place in line, every lane it asked, the
    lanes that admit (``elsewhere``) and the ready work there is, and what to do next."""
    return Refusal("capacity", {"lane": lane, **facts, "retry_after": retry, "in_line": standing.ahead + 1,
                                "lanes": [d.as_json() for d in mine], "elsewhere": elsewhere or [],
                                "ready": await db.admission.ready_count(), "next": say.CAPACITY_NEXT})
