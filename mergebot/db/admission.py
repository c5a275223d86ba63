"""Admission control at claim time and each agent's cap on work in progress, as the database keeps them: each lane's
measurements and last state (``admission_lanes``), the refusals counted for ``/metrics``, what an agent holds. The
decisions are ``mergebot.landing.intake.admission``'s; ``mergebot.landing.intake.admit`` carries them out."""

from __future__ import annotations

from mergebot.db.base import Row, Sql


class AdmissionStore:
    def __init__(self, sql: Sql) -> None:
        self.sql = sql

    async def measure(self, *, window: float) -> list[Row]:
        """Each lane's measurements and last state (``admission_measure``); its run length is the database's one
        prediction (``predicted_run``), the fair order's too."""
        return await self.sql.all("admission_measure", window=window)

    async def flip(self, *, repo: str, admitting: bool, backlog: float, threshold: float) -> bool:
        """Record a lane's new state; True when it changed here (another replica may have been first)."""
        return await self.sql.one("admission_flip", repo=repo, admitting=admitting, backlog=backlog,
                                  threshold=threshold) is not None

    async def standing(self, agent_id: int, *, d: float) -> Row | None:
        """The agent against the line of agents waiting (``admission_standing``): its claims, what it was served
        (verifier-seconds, a claim not yet run as ``d``), the agents ahead of it, the least any other waiting was."""
        return await self.sql.one("admission_standing", agent_id=agent_id, d=d)

    async def take(self, *, repo: str, since: object, freed: int) -> bool:
        """Take one of a refusing lane's free slots; False when another claim took the last one first."""
        return await self.sql.one("admission_take", repo=repo, since=since, freed=freed) is not None

    async def write_off(self, *, repo: str, since: object, freed: int) -> None:
        """A refusing lane over its threshold: the slots its departures freed so far are not given."""
        await self.sql.one("admission_write_off", repo=repo, since=since, freed=freed)

    async def claimed(self, agent_id: int, *, subtask_id: int, repo: str | None) -> None:
        """A claim let in: one more to its agent's account, and its lane (None: none named) kept for rule 8."""
        await self.sql.one("admission_claimed", agent_id=agent_id, subtask_id=subtask_id, repo=repo)

    async def waits(self, agent_id: int, *, hold: float) -> None:
        """The agent stays in line for ``hold`` seconds more."""
        await self.sql.one("admission_waits", agent_id=agent_id, hold=hold)

    async def refused(self, repo: str) -> None:
        await self.sql.one("admission_refused", repo=repo)

    async def refusals(self) -> dict[str, int]:
        """Claims each lane refused for want of capacity, ever."""
        return {r["repo"]: int(r["refusals"]) for r in await self.sql.all("admission_refusals")}

    async def wip_refused(self) -> None:
        await self.sql.one("wip_refused")

    async def wip_refusals(self) -> int:
        row = await self.sql.one("wip_refusals")
        return int(row["n"]) if row else 0

    async def holds(self, agent_id: int, *, limit: int = 1000) -> list[Row]:
        """The subtasks the agent owns, running or submitted, each with its live candidates' ids."""
        return await self.sql.all("agent_holds", agent_id=agent_id, limit=limit)

    async def ready_count(self) -> int:
        row = await self.sql.one("subtasks_ready_count")
        return int(row["n"]) if row else 0
