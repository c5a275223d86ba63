"""The reviewers' pages in process: :class:`Site` drives the app over ASGI with a cookie session, and records work
through the stores as the landing path does (no git, no verifier). The ``site`` fixture (conftest.py) gives one
with agents root, lead, ann, bob and rita and a repository ``app``; the pages', charts' and glance tests use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from mergebot.db.database import Database
from mergebot.db.landing import Unfenced
from mergebot.models import Agent, Evidence
from mergebot.web import session

BASE = "http://testserver"
SHA = "a" * 40


@dataclass
class Site:
    app: Any
    client: httpx.AsyncClient
    db: Database
    tokens: dict[str, str] = field(default_factory=dict)
    agents: dict[str, Agent] = field(default_factory=dict)
    priority: int = 10_000

    async def login(self, who: str) -> httpx.Response:
        self.client.cookies.clear()
        r = await self.client.post("/login", data={"token": self.tokens[who], "next": "/ui/landed"},
                                   headers={"Origin": BASE})
        assert r.status_code == 303, r.text
        return r

    async def get(self, path: str, **params: Any) -> httpx.Response:
        return await self.client.get(path, params=params)

    async def post(self, path: str, data: dict[str, str], origin: str | None = BASE) -> httpx.Response:
        return await self.client.post(path, data=data, headers={"Origin": origin} if origin else {})

    def csrf(self, who: str) -> str:
        return session.csrf_token(self.tokens[who])

    async def claimed(self, who: str, title: str, **kw: Any) -> int:
        """A subtask created and claimed by ``who`` (it outranks everything else that is ready)."""
        self.priority += 1
        sub, _ = await self.db.subtasks.create_subtask(actor_id=None, title=title, priority=self.priority, **kw)
        got = await self.db.subtasks.claim(agent_id=self.agents[who].id)
        assert got is not None and got.id == sub.id
        return sub.id

    async def land(self, who: str, title: str, *, repo: str = "app", base: str = SHA, merged: str | None = None,
                   verifier: dict[str, Any] | None = None) -> tuple[int, int, int]:
        """Through the landing path's own records (push, intent, landed row), without git: (subtask, candidate,
        landed id)."""
        sid = await self.claimed(who, title)
        merged = merged or f"{sid:040x}"
        cand = await self.db.landing.enqueue(superseded="a newer push", repo=repo, subtask_id=sid, claim_version=1,
                                             owner_id=self.agents[who].id, sha=f"{sid + 7:040x}",
                                             ref=f"refs/heads/subtasks/{sid}/v1")
        result = {"commit_sha": merged, "tree_sha": "", "command": "pytest -q", "outcome": "pass", "exit_code": 0,
                  "duration_ms": 1234, "log_head": f"log of {title}\n1 passed\n", "log_tail": "", "log_size": 20,
                  "log_digest": "d" * 64, "sandbox": "bwrap", **(verifier or {})}
        evidence = Evidence(sid, 1, self.agents[who].id, cand.sha, "merge", result, result["outcome"])
        intent = await self.db.landing.begin_landing(cand=cand, target_ref="refs/heads/main", old_sha=base,
                                                     new_sha=merged, tree_sha="b" * 40, evidence=evidence,
                                                     verdict=result)
        assert not isinstance(intent, Unfenced), intent  # claimed and pushed just now: it holds its fence
        done = await self.db.landing.finish_landing(intent)
        assert done is not None
        return sid, cand.id, done[0].id
