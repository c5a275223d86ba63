"""Who may act: agents and their tokens, groups and assignments (the 1,000-agent run's ``assign`` table).

Rules:
  * A token is shown once, when it is made; only its SHA-256 is stored, and ``authenticate`` compares in
    constant time. A revoked token, or one rotated away, stops working at the next request (nothing caches it).
  * Moving an agent to another group changes where its next claim looks first; a claim in flight stays.
  * Every change here is written to the event log.
"""

from __future__ import annotations

import re
from typing import Any

from mergebot import auth
from mergebot import messages as say
from mergebot.db.base import Row, Sql, insert_event
from mergebot.errors import Conflict, Invalid, NotFound
from mergebot.models import Agent

BOT_NAME = "mergebot"  # the bot's own agent: the owner of the reverts it lands
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # schema.sql's CHECK on agents.name, told before it refuses


class AgentStore:
    def __init__(self, sql: Sql) -> None:
        self.sql = sql

    async def add_agent(self, *, name: str, role: auth.Role) -> tuple[Agent, str]:
        """Create an agent; return it and its token (shown once, stored only as a hash)."""
        if not NAME.fullmatch(name):
            raise Invalid(say.agent_name_malformed(name), field="name")
        token = auth.new_token()
        try:
            row = await self.sql.one("agent_create", name=name, role=role.value, token_hash=auth.hash_token(token))
        except Conflict:
            raise Conflict(f"an agent named {name!r} already exists: choose another name, or give it a new token "
                           f"with `mergebot agent rotate {name}`", field="name") from None
        assert row is not None
        await insert_event(self.sql, actor_id=None, kind="agent_added", detail={"agent": name, "role": role.value})
        return Agent.from_row(row), token

    async def rotate_token(self, *, name: str) -> tuple[Agent, str]:
        token = auth.new_token()
        row = await self.sql.found("agent_rotate_token", NotFound(f"no agent named {name!r}"), name=name,
                                   token_hash=auth.hash_token(token))
        await insert_event(self.sql, actor_id=None, kind="token_rotated", detail={"agent": name})
        return Agent.from_row(row), token

    async def revoke_agent(self, *, name: str) -> Agent:
        row = await self.sql.found("agent_revoke", NotFound(f"no active agent named {name!r}"), name=name)
        await insert_event(self.sql, actor_id=None, kind="agent_revoked", detail={"agent": name})
        return Agent.from_row(row)

    async def authenticate(self, token: str) -> Agent | None:
        digest = auth.hash_token(token)
        row = await self.sql.one("agent_by_token", token_hash=digest)
        if row is None or not auth.same_hash(bytes(row["token_hash"]), digest):
            return None
        return Agent.from_row(row)

    async def bot_id(self) -> int:
        """The bot's own agent, which owns the reverts it lands (made on first use). Its token is revoked at once:
        nobody can act as it, it acts only through the queue."""
        for _ in range(2):
            try:
                return (await self.agent_by_name(BOT_NAME)).id
            except NotFound:
                pass
            try:
                agent, _token = await self.add_agent(name=BOT_NAME, role=auth.Role.REVIEWER)
            except Conflict:  # made by another replica meanwhile
                continue
            await self.revoke_agent(name=BOT_NAME)
            return agent.id
        return (await self.agent_by_name(BOT_NAME)).id

    async def agent_by_name(self, name: str) -> Agent:
        row = await self.sql.found("agent_by_name", NotFound(f"no agent named {name!r}", field="agent"), name=name)
        return Agent.from_row(row)

    async def list_agents(self) -> list[Row]:
        return await self.sql.all("agent_list")

    # -- groups and assignments --------------------------------------------------------------------------

    async def upsert_group(self, *, name: str, description: str | None = None) -> Row:
        row = await self.sql.one("group_upsert", name=name, description=description)
        assert row is not None
        return row

    async def set_group_open(self, *, name: str, open: bool, actor_id: int | None) -> Row:
        row = await self.sql.found("group_set_open", NotFound(f"no group named {name!r}", field="group"), name=name,
                                   open=open)
        await insert_event(self.sql, actor_id=actor_id, kind="group_opened" if open else "group_closed",
                           detail={"group": name})
        return row

    async def list_groups(self) -> list[Row]:
        return await self.sql.all("group_list")

    async def assign(self, *, agent_name: str, group_name: str, group_role: str = "helper",
                     actor_id: int | None) -> dict[str, Any]:
        """Put an agent in a group (creating the group if needed). A claim in flight is not touched."""
        agent = await self.agent_by_name(agent_name)
        async with self.sql.tx() as tx:
            await tx.all("group_upsert", name=group_name, description=None)
            row = await tx.one("assignment_set", agent_id=agent.id, group_name=group_name, group_role=group_role,
                               assigned_by=actor_id)
            await insert_event(tx, actor_id=actor_id, kind="assigned",
                               detail={"agent": agent_name, "group": group_name, "role": group_role})
        assert row is not None
        return row

    async def list_assignments(self) -> list[Row]:
        return await self.sql.all("assignment_list")
