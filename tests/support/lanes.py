"""Admission control's test site (``tests/test_admission*.py``): the site fixture's app measuring on every claim,
with helpers that make a lane's backlog and its verifiers' record through the stores (a real push and check would
take seconds each)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from mergebot.api import create_app
from mergebot.auth import Role
from mergebot.db.database import Database
from mergebot.rules import Rules
from mergebot.settings import Settings
from tests.support.site import BASE, SHA, Site


async def _at(owner: Database, sql: str, *args: object) -> None:
    """Times set by hand, as the database's owner (the app's role may not rewrite history)."""
    async with owner.pool.connection() as conn:
        await conn.execute(sql, args)


class Lanes(Site):
    """The site with helpers that make a lane's backlog and its verifiers' record through the stores."""

    owner: Database | None = None

    @property
    def services(self) -> Any:
        return self.app.state.services

    async def runs(self, seconds: float, n: int = 2, *, ago: float = 5.0, repo: str = "app") -> None:
        """``n`` candidate runs of ``seconds`` each, at once, that finished ``ago`` seconds ago: the run length and
        the capacity (``n`` runs at once) the lane measures."""
        end = datetime.now(UTC) - timedelta(seconds=ago)
        for _ in range(n):
            job = await self.db.jobs.enqueue_job(repo=repo, commit_sha="c" * 40, command="pytest -q", timeout_s=60,
                                                 purpose="candidate")
            assert self.owner is not None
            await _at(self.owner, "UPDATE verify_jobs SET status = 'done', outcome = 'pass', started_at = %s, "
                      "finished_at = %s WHERE id = %s", end - timedelta(seconds=seconds), end, job.id)

    async def group(self, seconds: float, checks: int, *, ago: float = 5.0, repo: str = "app") -> None:
        """A candidate run of ``checks`` named checks of ``seconds`` each, side by side, that finished ``ago`` seconds
        ago: ``seconds`` of wall time, ``checks`` x ``seconds`` verifier-seconds (its parent never starts)."""
        end = datetime.now(UTC) - timedelta(seconds=ago)
        kids = [{"name": f"check{i}", "command": "pytest -q", "timeout_s": 60, "required": True, "sandbox": {}}
                for i in range(checks)]
        job = await self.db.jobs.enqueue_job(repo=repo, commit_sha="c" * 40, command="checks", timeout_s=60,
                                             purpose="candidate", children=kids)
        assert self.owner is not None
        await _at(self.owner, "UPDATE verify_jobs SET status = 'done', outcome = 'pass', started_at = %s, "
                  "finished_at = %s WHERE parent_id = %s", end - timedelta(seconds=seconds), end, job.id)
        await _at(self.owner, "UPDATE verify_jobs SET status = 'done', outcome = 'pass', finished_at = %s "
                  "WHERE id = %s", end, job.id)

    async def predicted(self, repo: str = "app") -> tuple[float, int]:
        """The database's one prediction of a run (``predicted_run``): its seconds, and how many runs it is of."""
        assert self.owner is not None
        async with self.owner.pool.connection() as conn:
            row = await (await conn.execute("SELECT seconds, runs FROM predicted_run(%s)", (repo,))).fetchone()
        assert row is not None
        return row[0], row[1]

    async def backlog(self, repo: str = "app") -> float:
        """The lane's backlog in verifier-seconds, as admission control counts it now."""
        [got] = [d for d in await self.services.admission.decisions(self.db, record=False) if d.repo == repo]
        return got.backlog_seconds

    async def served(self, repo: str = "app") -> float:
        """What the fair order has charged the lead in ``repo`` so far (its account)."""
        assert self.owner is not None
        async with self.owner.pool.connection() as conn:
            row = await (await conn.execute("SELECT served FROM fair_accounts WHERE repo = %s AND owner_id = %s",
                                            (repo, self.agents["lead"].id))).fetchone()
        assert row is not None
        return float(row[0])

    async def queue(self, n: int, repo: str = "app", *, risk: float | None = None) -> list[int]:
        """``n`` candidates of the lead's, queued (with that failure estimate)."""
        out = []
        for i in range(n):
            sid = await self.claimed("lead", f"backlog {repo} {i} {self.priority}")
            cand = await self.db.landing.enqueue(superseded="newer", repo=repo, subtask_id=sid, claim_version=1,
                                                 owner_id=self.agents["lead"].id, sha=f"{sid + 99:040x}",
                                                 ref=f"refs/heads/subtasks/{sid}/v1",
                                                 risk=(risk, {"p": risk}) if risk is not None else None)
            out.append(cand.id)
        return out

    async def done(self, *cands: int) -> None:
        for c in cands:
            await self.db.landing.finish_candidate(c, "cancelled", "drained")

    async def claim(self, who: str, **body: Any) -> httpx.Response:
        return await self.client.post("/api/v1/subtasks/claim", json=body or None,
                                      headers={"Authorization": f"Bearer {self.tokens[who]}"})

    async def api(self, who: str, path: str) -> httpx.Response:
        return await self.client.get(path, headers={"Authorization": f"Bearer {self.tokens[who]}"})


@asynccontextmanager
async def lane_site(settings: Settings, db: Database) -> AsyncIterator[Lanes]:
    """The site fixture's app (agents root, lead, ann, bob, rita; repository ``app``), measuring on every claim, with
    a cap of two subtasks for agents and one for ann."""
    settings.admission_cache_seconds = 0.0
    settings.admission_min_claims = 0.0  # and a few claims out are already the lanes' floor (rule 8)
    settings.admission_min_runs = 0.0  # the lanes below hold a few candidates of 10 s: over 2 windows, under 8 runs
    settings.agent_wip = "agent=2,ann=1,lead=0"
    app = create_app(settings, run_recovery=False, run_queue=False)
    async with (app.router.lifespan_context(app),
                httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as client):
        s = Lanes(app, client, app.state.services.db)
        s.owner = db
        for name, role in (("root", Role.ADMIN), ("lead", Role.LEAD), ("ann", Role.AGENT), ("bob", Role.AGENT),
                           ("rita", Role.REVIEWER)):
            s.agents[name], s.tokens[name] = await s.db.agents.add_agent(name=name, role=role)
        await s.db.repos.create_repo(name="app", root_sha=SHA, rules=Rules.of(
            target_branch="main", verifier_command="pytest -q", verifier_timeout_s=60, protected_paths=[],
            max_push_bytes=1 << 20, max_file_bytes=1 << 20))
        yield s
