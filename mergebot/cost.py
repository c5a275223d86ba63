"""What a landing cost, and what each agent's work cost: verifier seconds, pushes and rejections over a window.

A repository's named checks (issue 43) run as one job each: ``checks`` adds up each check's runs and seconds (by
repository and check name), whatever they were charged to.

Pure: it adds up the rows ``db.views.cost`` reads (``view_cost_runs``, ``view_cost_pushes``, ``view_cost_landed``
in ``mergebot/db/queries/views.sql``, which says where each run is charged). Every run's seconds are charged
exactly once, so ``charged_to_landings + thrown_away + other == total`` for any window.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

Row = Mapping[str, Any]
LANDING_CHARGES = ("landing_run", "rework", "main_check")


@dataclass
class LandingCost:
    landed_id: int
    subtask_id: int | None
    agent: str | None
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(LANDING_CHARGES, 0.0))
    runs: int = 0
    pushes: int = 0
    rejections: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(self.seconds.values())


@dataclass
class AgentCost:
    agent: str
    landings: int = 0
    pushes: int = 0
    rejections: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0  # verifier seconds charged to its landings, and spent on its pushes that did not land
    thrown_away: float = 0.0  # of which: on pushes of subtasks that have not landed

    @property
    def pushes_per_landing(self) -> float | None:
        return self.pushes / self.landings if self.landings else None

    @property
    def seconds_per_landing(self) -> float | None:
        return self.seconds / self.landings if self.landings else None


@dataclass
class Costs:
    landings: dict[int, LandingCost]
    agents: dict[str, AgentCost]
    total: float  # every run that finished in the window
    thrown_away: float
    other: float
    runs: int
    checks: dict[tuple[str, str], list[float]] = field(default_factory=dict)  # (repo, check): [runs, seconds]

    @property
    def charged_to_landings(self) -> float:
        return sum(c.total for c in self.landings.values())

    def as_json(self, *, landings: int | None = None) -> dict[str, Any]:
        """Totals and agents in full; the ``landings`` costliest landings (all when None), costliest first."""
        costliest = sorted(self.landings.values(), key=lambda c: (-c.total, c.landed_id))[:landings]
        return {
            "total_seconds": round(self.total, 3), "runs": self.runs,
            "charged_to_landings_seconds": round(self.charged_to_landings, 3),
            "thrown_away_seconds": round(self.thrown_away, 3), "other_seconds": round(self.other, 3),
            "landings_total": len(self.landings),
            "landings": [{**asdict(c), "total_seconds": round(c.total, 3),
                          "seconds": {k: round(v, 3) for k, v in c.seconds.items()}} for c in costliest],
            "agents": [{**asdict(a), "seconds": round(a.seconds, 3), "thrown_away": round(a.thrown_away, 3),
                        "pushes_per_landing": a.pushes_per_landing,
                        "seconds_per_landing": a.seconds_per_landing}
                       for a in sorted(self.agents.values(), key=lambda a: (-a.seconds, a.agent))],
            "checks": [{"repo": repo, "check": name, "runs": int(n), "seconds": round(sec, 3)}
                       for (repo, name), (n, sec) in sorted(self.checks.items(), key=lambda kv: (-kv[1][1], kv[0]))],
        }


def add_up(runs: Sequence[Row], pushes: Sequence[Row], landed: Sequence[Row]) -> Costs:
    """The costs of a window: ``runs`` charged rows, ``pushes`` the candidates queued, ``landed`` the landings."""
    landings: dict[int, LandingCost] = {}
    agents: dict[str, AgentCost] = {}

    def agent(name: str) -> AgentCost:
        return agents.setdefault(name, AgentCost(name))

    for row in landed:
        landings[row["id"]] = LandingCost(row["id"], row["subtask_id"], row["agent"])
        agent(row["agent"]).landings += 1
    by_subtask: dict[int, list[LandingCost]] = defaultdict(list)
    for c in landings.values():
        if c.subtask_id is not None:
            by_subtask[c.subtask_id].append(c)
    for row in pushes:
        a = agent(row["agent"])
        a.pushes += 1
        kind = row.get("rejected_as")
        if kind:
            a.rejections[kind] = a.rejections.get(kind, 0) + 1
        for c in by_subtask.get(row["subtask_id"], [])[-1:]:  # what its standing landing took on the way
            c.pushes += 1
            if kind:
                c.rejections[kind] = c.rejections.get(kind, 0) + 1
    total = thrown = other = 0.0
    counted: Counter[int] = Counter()
    check_runs: dict[tuple[str, str], set[int]] = defaultdict(set)
    check_seconds: dict[tuple[str, str], float] = defaultdict(float)
    for row in runs:
        seconds = float(row["seconds"])
        total += seconds
        counted[row["run_id"]] += 1
        if row.get("check_name"):  # a named check's run (its seconds may be split between a batch's members)
            key = (str(row.get("repo") or ""), str(row["check_name"]))
            check_runs[key].add(int(row["run_id"]))
            check_seconds[key] += seconds
        charge = row["charge"]
        if charge == "other":
            other += seconds
            continue
        if row.get("agent"):
            agent(row["agent"]).seconds += seconds
        if charge == "thrown_away":
            thrown += seconds
            if row.get("agent"):
                agent(row["agent"]).thrown_away += seconds
            continue
        if row["landed_id"] not in landings:  # a landing outside the window still carries the run's charge
            landings[row["landed_id"]] = LandingCost(row["landed_id"], row.get("subtask_id"), row.get("agent"))
        charged = landings[row["landed_id"]]
        charged.seconds[charge] += seconds
        charged.runs += 1
    return Costs(landings, agents, total, thrown, other, len(counted),
                 {k: [float(len(v)), check_seconds[k]] for k, v in check_runs.items()})


STAGES = (("pushed → queued", "pushed_at", "queued_at"), ("queued → merged", "queued_at", "merged_at"),
          ("merged → run created", "merged_at", "run_created"), ("run created → started", "run_created", "run_started"),
          ("run", "run_started", "run_finished"), ("run finished → decided", "run_finished", "decided_at"))


def stages(row: Row | None) -> list[tuple[str, float]]:
    """One candidate's stages (``page_candidate_stages``) as (stage, seconds), in order; a stage whose ends are
    not both known (a candidate never merged, a run not yet finished) is left out. The run's own share that the
    check took is shown apart (``the check``)."""
    if row is None:
        return []
    out = []
    for name, start, end in STAGES:
        if row.get(start) is not None and row.get(end) is not None:
            out.append((name, (row[end] - row[start]).total_seconds()))
            if name == "run" and row.get("check_s") is not None:
                out.append(("the check", float(row["check_s"])))
    return out
