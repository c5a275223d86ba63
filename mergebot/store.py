"""The subtask store: who owns which subtask, decided by PostgreSQL.

Rules (DESIGN.md, "Subtask lifecycle"):
  * A claim is one SQL statement (``subtask_claim``): FOR UPDATE SKIP LOCKED over a partial index of ready
    rows, highest priority first. The owner is the authenticated agent id passed in by the caller, never a
    value from the request body. The claim bumps ``claim_version``; ``(id, claim_version)`` is the handle.
  * Every owner write (heartbeat, release, note, submit) matches id, owner, claim_version and status. Zero
    rows changed means the claim is gone: ``ClaimSuperseded`` with the current version.
  * Leases are renewed by heartbeats; ``recover_expired`` hands back subtasks whose lease ran out more than
    a grace period ago, and fails them once their attempts are spent.
  * Landing one subtask releases its dependents in the same transaction; ``wait`` tells waiters.
  * Allowed transitions and the event log are enforced by the database itself (triggers), so a bug here
    cannot skip them.

One method per named query, keyword arguments only, and one place (``_wrap``) that turns psycopg errors
into Mergebot errors.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, LiteralString

import psycopg
from psycopg import errors as pgerr
from psycopg import pq
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from mergebot import auth
from mergebot.db.queries import QUERIES
from mergebot.errors import (
    ClaimSuperseded,
    Conflict,
    Invalid,
    InvalidTransition,
    MergebotError,
    NotFound,
    Unavailable,
)
from mergebot.models import Agent, Handle, Landed, Landing, Subtask
from mergebot.tree import Node

FINISHED = frozenset({"landed", "failed", "cancelled"})
NOTIFY_CHANNEL = "mergebot_finished"
CANDIDATE_CHANNEL = "mergebot_candidate"  # every candidate status change (migration 0007)


# Our triggers raise with their own SQLSTATEs (see the migrations).
_OUR_CODES: dict[str, tuple[type[MergebotError], dict[str, Any]]] = {
    "MB001": (InvalidTransition, {}),  # subtasks_on_update: a transition the table does not allow
    "MB002": (Conflict, {}),  # events is append-only
    "MB003": (Invalid, {"field": "depends_on"}),  # subtask_deps_acyclic: a dependency cycle
}


def _returns_rows(cur: psycopg.AsyncCursor[Any]) -> bool:
    """``cur.description`` without building its columns: whether the statement returned a result set."""
    res = cur.pgresult
    return res is not None and (res.nfields > 0 or res.status == pq.ExecStatus.TUPLES_OK)


@contextlib.contextmanager
def _wrap() -> Any:
    """Translate database errors into errors a caller can act on. The one place that does so."""
    try:
        yield
    except psycopg.Error as e:
        raise _translate(e) from e


def _translate(e: psycopg.Error) -> MergebotError:
    if e.sqlstate in _OUR_CODES:
        cls, extra = _OUR_CODES[e.sqlstate]
        return cls(e.diag.message_primary or str(e), **extra)
    constraint = e.diag.constraint_name
    if isinstance(e, pgerr.UniqueViolation):
        return Conflict(f"already exists: {e.diag.message_detail or constraint}", field=_field_of(constraint))
    if isinstance(e, pgerr.ForeignKeyViolation):
        return Invalid(f"refers to something that does not exist: {e.diag.message_detail}",
                       field=_field_of(constraint))
    if isinstance(e, pgerr.CheckViolation):
        return Invalid(f"value not allowed ({constraint})", field=_field_of(constraint))
    if isinstance(e, pgerr.QueryCanceled):
        return Unavailable("the database took too long; nothing was changed, try again")
    if isinstance(e, psycopg.DataError):  # SQLSTATE 22 (and a NUL in text): the caller's value, not ours
        return Invalid(f"a value cannot be stored: {(str(e).splitlines() or [''])[0]}", field="body")
    if isinstance(e, psycopg.OperationalError | psycopg.InterfaceError):
        return Unavailable("the database is unreachable; nothing was changed, try again")
    return MergebotError(f"database error {e.sqlstate}: {str(e).splitlines()[0] if str(e) else ''}")


def _field_of(constraint: str | None) -> str:
    # Constraint names follow PostgreSQL's default "<table>_<column>_check/fkey" pattern.
    if not constraint:
        return "body"
    for table in ("subtasks_", "agents_", "groups_", "notes_", "announcements_", "assignments_"):
        if constraint.startswith(table):
            constraint = constraint[len(table):]
            break
    for suffix in ("_check", "_fkey", "_key"):
        if constraint.endswith(suffix):
            return constraint[: -len(suffix)]
    return constraint


class Store:
    def __init__(self, pool: AsyncConnectionPool[Any], *, lease_seconds: float = 120.0) -> None:
        self.pool = pool
        self.lease_seconds = lease_seconds

    @property
    def url(self) -> str:
        """The pool's connection string, for the few connections that must not come from the pool."""
        return str(self.pool.conninfo)

    # -- plumbing ---------------------------------------------------------------------------------------

    async def _all(self, query: str, /, **params: Any) -> list[dict[str, Any]]:
        with _wrap():
            async with self.pool.connection() as conn:
                cur = conn.cursor(row_factory=dict_row)
                await cur.execute(QUERIES[query], params)
                return await cur.fetchall() if _returns_rows(cur) else []

    async def _one(self, query: str, /, **params: Any) -> dict[str, Any] | None:
        rows = await self._all(query, **params)
        return rows[0] if rows else None

    @contextlib.asynccontextmanager
    async def _tx(self) -> AsyncIterator[psycopg.AsyncCursor[dict[str, Any]]]:
        with _wrap():
            async with self.pool.connection() as conn, conn.transaction():
                yield conn.cursor(row_factory=dict_row)

    @staticmethod
    async def _q(cur: psycopg.AsyncCursor[dict[str, Any]], query: str, /, **params: Any) -> list[dict[str, Any]]:
        q: LiteralString = QUERIES[query]
        await cur.execute(q, params)
        return await cur.fetchall() if _returns_rows(cur) else []

    async def _superseded(self, subtask_id: int, claim_version: int) -> MergebotError:
        """Explain why a fenced write changed nothing."""
        row = await self._one("subtask_fence_state", id=subtask_id)
        if row is None:
            return NotFound(f"subtask {subtask_id} does not exist", subtask_id=subtask_id)
        return ClaimSuperseded(
            f"claim superseded: subtask {subtask_id} is {row['status']} at claim version "
            f"{row['claim_version']}; your claim version {claim_version} no longer owns it. Stop work on it "
            "and claim again.",
            subtask_id=subtask_id,
            current_version=row["claim_version"],
            subtask_status=row["status"],
        )

    async def ping(self) -> None:
        await self._all("ping")

    # -- agents and auth ---------------------------------------------------------------------------------

    async def add_agent(self, *, name: str, role: auth.Role) -> tuple[Agent, str]:
        """Create an agent; return it and its token (shown once, stored only as a hash)."""
        token = auth.new_token()
        row = await self._one("agent_create", name=name, role=role.value, token_hash=auth.hash_token(token))
        assert row is not None
        await self.log_event(actor_id=None, kind="agent_added", detail={"agent": name, "role": role.value})
        return Agent.from_row(row), token

    async def rotate_token(self, *, name: str) -> tuple[Agent, str]:
        token = auth.new_token()
        row = await self._one("agent_rotate_token", name=name, token_hash=auth.hash_token(token))
        if row is None:
            raise NotFound(f"no agent named {name!r}")
        await self.log_event(actor_id=None, kind="token_rotated", detail={"agent": name})
        return Agent.from_row(row), token

    async def revoke_agent(self, *, name: str) -> Agent:
        row = await self._one("agent_revoke", name=name)
        if row is None:
            raise NotFound(f"no active agent named {name!r}")
        await self.log_event(actor_id=None, kind="agent_revoked", detail={"agent": name})
        return Agent.from_row(row)

    async def authenticate(self, token: str) -> Agent | None:
        digest = auth.hash_token(token)
        row = await self._one("agent_by_token", token_hash=digest)
        if row is None or not auth.same_hash(bytes(row["token_hash"]), digest):
            return None
        return Agent.from_row(row)

    async def agent_by_name(self, name: str) -> Agent:
        row = await self._one("agent_by_name", name=name)
        if row is None:
            raise NotFound(f"no agent named {name!r}", field="agent")
        return Agent.from_row(row)

    async def list_agents(self) -> list[dict[str, Any]]:
        return await self._all("agent_list")

    async def log_event(self, *, actor_id: int | None, kind: str, subtask_id: int | None = None,
                        claim_version: int | None = None, detail: dict[str, Any] | None = None) -> None:
        await self._all("event_insert", actor_id=actor_id, kind=kind, subtask_id=subtask_id,
                        claim_version=claim_version, detail=Jsonb(detail or {}))

    async def events(self, *, subtask_id: int | None = None, after_id: int = 0,
                     limit: int = 100) -> list[dict[str, Any]]:
        return await self._all("event_list", subtask_id=subtask_id, after_id=after_id, limit=limit)

    # -- groups and assignments --------------------------------------------------------------------------

    async def upsert_group(self, *, name: str, description: str | None = None) -> dict[str, Any]:
        row = await self._one("group_upsert", name=name, description=description)
        assert row is not None
        return row

    async def set_group_open(self, *, name: str, open: bool, actor_id: int | None) -> dict[str, Any]:
        row = await self._one("group_set_open", name=name, open=open)
        if row is None:
            raise NotFound(f"no group named {name!r}", field="group")
        await self.log_event(actor_id=actor_id, kind="group_opened" if open else "group_closed",
                             detail={"group": name})
        return row

    async def list_groups(self) -> list[dict[str, Any]]:
        return await self._all("group_list")

    async def assign(self, *, agent_name: str, group_name: str, group_role: str = "helper",
                     actor_id: int | None) -> dict[str, Any]:
        """Put an agent in a group (creating the group if needed). A claim in flight is not touched."""
        agent = await self.agent_by_name(agent_name)
        async with self._tx() as cur:
            await self._q(cur, "group_upsert", name=group_name, description=None)
            rows = await self._q(cur, "assignment_set", agent_id=agent.id, group_name=group_name,
                                 group_role=group_role, assigned_by=actor_id)
            await self._q(cur, "event_insert", actor_id=actor_id, kind="assigned", subtask_id=None,
                          claim_version=None,
                          detail=Jsonb({"agent": agent_name, "group": group_name, "role": group_role}))
        return rows[0]

    async def list_assignments(self) -> list[dict[str, Any]]:
        return await self._all("assignment_list")

    # -- subtasks ----------------------------------------------------------------------------------------

    async def create_subtask(
        self,
        *,
        actor_id: int | None,
        title: str,
        description: str = "",
        priority: int = 0,
        parent_id: int | None = None,
        group_name: str | None = None,
        depends_on: Sequence[int] = (),
        max_attempts: int = 3,
        idempotency_key: str | None = None,
    ) -> tuple[Subtask, bool]:
        """Create a subtask, blocked until its dependencies land. Returns (subtask, created).

        With an idempotency key, a retry returns the first subtask and creates nothing; the same key with a
        different title, parent or group is a conflict, not a silent match.
        """
        async with self._tx() as cur:
            sub, created = await self._create(cur, actor_id=actor_id, title=title, description=description,
                                              priority=priority, parent_id=parent_id, group_name=group_name,
                                              depends_on=depends_on, max_attempts=max_attempts,
                                              idempotency_key=idempotency_key)
        if created:
            sub.depends_on = sorted(set(depends_on))
        return sub, created

    async def _create(self, cur: psycopg.AsyncCursor[dict[str, Any]], *, actor_id: int | None, title: str,
                      description: str, priority: int, parent_id: int | None, group_name: str | None,
                      depends_on: Sequence[int], max_attempts: int,
                      idempotency_key: str | None) -> tuple[Subtask, bool]:
        deps = sorted(set(depends_on))
        if group_name is not None:
            await self._q(cur, "group_upsert", name=group_name, description=None)
        rows = await self._q(cur, "subtask_create", actor_id=actor_id, title=title, description=description,
                             priority=priority, parent_id=parent_id, group_name=group_name, depends_on=deps,
                             max_attempts=max_attempts, idempotency_key=idempotency_key)
        if rows:
            return Subtask.from_row(rows[0]), True
        if idempotency_key is not None:
            existing = await self._q(cur, "subtask_by_idempotency_key", idempotency_key=idempotency_key)
            if existing:
                sub = Subtask.from_row(existing[0])
                if (sub.title, sub.parent_id, sub.group_name) != (title, parent_id, group_name):
                    raise Conflict(
                        f"idempotency key {idempotency_key!r} was used for subtask {sub.id} with a different "
                        "title, parent or group",
                        field="idempotency_key", subtask_id=sub.id)
                return sub, False
        found = {r["id"] for r in await self._q(cur, "subtasks_existing", ids=deps)}
        missing = [d for d in deps if d not in found]
        raise Invalid(f"depends_on names subtasks that do not exist: {missing}", field="depends_on")

    async def create_tree(self, *, actor_id: int | None, nodes: Sequence[Node],
                          key_prefix: str | None = None) -> dict[str, Subtask]:
        """Create a whole planned tree (see ``mergebot.tree.plan``) in one transaction: all or nothing.

        With ``key_prefix``, each node's idempotency key is ``prefix/key``, so loading the same file twice
        creates nothing new.
        """
        made: dict[str, Subtask] = {}
        async with self._tx() as cur:
            for n in nodes:
                deps = [d if isinstance(d, int) else made[d].id for d in n.depends_on]
                parent = n.parent if isinstance(n.parent, int) or n.parent is None else made[n.parent].id
                sub, _ = await self._create(
                    cur, actor_id=actor_id, title=n.title, description=n.description, priority=n.priority,
                    parent_id=parent, group_name=n.group, depends_on=deps, max_attempts=n.max_attempts,
                    idempotency_key=f"{key_prefix}/{n.key}" if key_prefix else None)
                made[n.key] = sub
            for n in nodes:
                if n.children:
                    children = [made[c].id for c in n.children]
                    guard = (await self._q(cur, "subtask_dep_guard", id=made[n.key].id, depends_on=children))[0]
                    if guard["unlanded"] and guard["status"] not in ("blocked", "ready"):
                        raise Conflict(f"subtask {made[n.key].id} ({n.key!r}) is {guard['status']}; it cannot wait "
                                       "for new children that have not landed. Give them another parent.",
                                       field="children", subtask_id=made[n.key].id)
                    if await self._q(cur, "subtask_add_deps", id=made[n.key].id, actor_id=actor_id,
                                     depends_on=children):
                        made[n.key].status = "blocked"  # the query returns the row only when it re-blocked it
        return made

    async def get_subtask(self, subtask_id: int) -> Subtask:
        row = await self._one("subtask_get", id=subtask_id)
        if row is None:
            raise NotFound(f"subtask {subtask_id} does not exist", subtask_id=subtask_id)
        return Subtask.from_row(row)

    async def list_subtasks(self, *, status: str | None = None, group_name: str | None = None,
                            owner_id: int | None = None, after_id: int = 0,
                            limit: int = 100) -> list[dict[str, Any]]:
        return await self._all("subtask_list", status=status, group_name=group_name, owner_id=owner_id,
                               after_id=after_id, limit=limit)

    async def counts(self) -> dict[str, int]:
        return {r["status"]: r["n"] for r in await self._all("subtask_counts")}

    async def claim(self, *, agent_id: int, complete: Handle | None = None,
                    sha: str | None = None) -> Subtask | None:
        """Claim the best ready subtask for this agent, or None when nothing is ready.

        With ``complete``, first submit that claim (fenced, with ``sha``) in the same statement; if the
        completion does not hold, nothing is claimed and ``ClaimSuperseded`` is raised.
        """
        row = await self._one(
            "subtask_claim", agent_id=agent_id, lease_seconds=self.lease_seconds,
            done_id=complete.id if complete else None,
            done_version=complete.claim_version if complete else None, done_sha=sha)
        assert row is not None
        if not row["done_ok"]:
            assert complete is not None
            raise await self._superseded(complete.id, complete.claim_version)
        return Subtask.from_row(row) if row["id"] is not None else None

    async def handoff(self, subtask_id: int) -> list[dict[str, Any]]:
        """What the next owner reads: the notes left on the subtask, oldest first."""
        return await self.notes(subtask_id=subtask_id, limit=200)

    async def heartbeat(self, *, agent_id: int, handle: Handle) -> Subtask:
        row = await self._one("subtask_heartbeat", id=handle.id, agent_id=agent_id,
                              claim_version=handle.claim_version, lease_seconds=self.lease_seconds)
        if row is None:
            raise await self._superseded(handle.id, handle.claim_version)
        return Subtask.from_row(row)

    async def release(self, *, agent_id: int, handle: Handle, reason: str | None = None) -> Subtask:
        row = await self._one("subtask_release", id=handle.id, agent_id=agent_id,
                              claim_version=handle.claim_version, reason=reason)
        if row is None:
            raise await self._superseded(handle.id, handle.claim_version)
        return Subtask.from_row(row)

    async def submit(self, *, agent_id: int, handle: Handle, sha: str | None) -> Subtask:
        row = await self._one("subtask_submit", id=handle.id, agent_id=agent_id,
                              claim_version=handle.claim_version, sha=sha)
        if row is None:
            raise await self._superseded(handle.id, handle.claim_version)
        return Subtask.from_row(row)

    async def recover_expired(self, *, grace_seconds: float, limit: int = 1000) -> list[dict[str, Any]]:
        """Return subtasks whose lease lapsed more than ``grace_seconds`` ago to ready (or failed)."""
        return await self._all("subtask_recover_expired", grace_seconds=grace_seconds, limit=limit)

    async def reject(self, *, handle: Handle, reason: str, actor_id: int | None = None,
                     sha: str | None = None) -> Subtask:
        """The landing path refused a submitted candidate (``sha``, if given): back to running for the owner."""
        row = await self._one("subtask_reject", id=handle.id, claim_version=handle.claim_version, sha=sha,
                              reason=reason, lease_seconds=self.lease_seconds, actor_id=actor_id)
        if row is None:
            raise await self._superseded(handle.id, handle.claim_version)
        return Subtask.from_row(row)

    async def land(self, landing: Landing, *, actor_id: int | None = None, intent_id: int | None = None,
                   candidate_id: int | None = None) -> tuple[Landed, list[int]]:
        """In one transaction: mark the fenced candidate landed, write its landed row, release dependents, and
        (for the landing path) resolve its intent and close its queue entry.

        Returns the landed row and the ids of subtasks that became ready.
        """
        async with self._tx() as cur:
            landed, released = await self._land_in(cur, landing, actor_id=actor_id, candidate_id=candidate_id)
            if intent_id is not None:
                await self._q(cur, "intent_resolve", id=intent_id, status="done")
        return landed, released

    async def _land_in(self, cur: psycopg.AsyncCursor[dict[str, Any]], landing: Landing, *, actor_id: int | None,
                       candidate_id: int | None) -> tuple[Landed, list[int]]:
        """``land``'s steps inside the caller's transaction (a batch lands several in one)."""
        rows = await self._q(
            cur, "subtask_land", id=landing.subtask_id, owner_id=landing.owner_id,
            claim_version=landing.claim_version, candidate_sha=landing.candidate_sha,
            repo=landing.repo, target_ref=landing.target_ref, base_sha=landing.base_sha,
            merged_sha=landing.merged_sha, tree_sha=landing.tree_sha,
            verifier_command=landing.verifier_command, verifier_result=landing.verifier_result,
            duration_ms=landing.duration_ms, log_digest=landing.log_digest, actor_id=actor_id,
            main_sha=landing.main_sha, batch_size=landing.batch_size)
        if not rows:
            raise ClaimSuperseded(
                f"subtask {landing.subtask_id} is no longer submitted at claim version "
                f"{landing.claim_version} with candidate {landing.candidate_sha}; nothing landed",
                subtask_id=landing.subtask_id)
        locked = [r["id"] for r in await self._q(cur, "dependents_lock", id=landing.subtask_id)]
        released = []
        if locked:
            released = [r["id"] for r in await self._q(cur, "dependents_release", ids=locked, actor_id=actor_id)]
        if candidate_id is not None:
            await self._q(cur, "candidate_finish", id=candidate_id, status="landed", reason=None,
                          base_sha=landing.base_sha, merged_sha=landing.merged_sha, verifier=None)
        return Landed.from_row(rows[0]), released

    async def cancel(self, *, subtask_id: int, reason: str, actor_id: int | None) -> Subtask:
        row = await self._one("subtask_cancel", id=subtask_id, reason=reason, actor_id=actor_id)
        if row is None:
            sub = await self.get_subtask(subtask_id)
            raise InvalidTransition(f"subtask {subtask_id} is {sub.status} and cannot be cancelled")
        return Subtask.from_row(row)

    async def retry(self, *, subtask_id: int, reason: str, actor_id: int | None) -> Subtask:
        row = await self._one("subtask_retry", id=subtask_id, reason=reason, actor_id=actor_id)
        if row is None:
            sub = await self.get_subtask(subtask_id)
            raise InvalidTransition(f"subtask {subtask_id} is {sub.status}, not failed; nothing to retry")
        return Subtask.from_row(row)

    # -- notes, announcements, landed --------------------------------------------------------------------

    async def add_note(self, *, author_id: int, body: str, subtask_id: int | None = None,
                       claim_version: int | None = None, group_name: str | None = None) -> dict[str, Any]:
        """A note. On a subtask with a claim version it is an owner write, fenced like the others."""
        if subtask_id is not None and claim_version is not None:
            row = await self._one("note_insert_fenced", subtask_id=subtask_id, author_id=author_id,
                                  claim_version=claim_version, body=body)
            if row is None:
                raise await self._superseded(subtask_id, claim_version)
            return row
        row = await self._one("note_insert", subtask_id=subtask_id, group_name=group_name,
                              author_id=author_id, claim_version=None, body=body)
        assert row is not None
        return row

    async def notes(self, *, subtask_id: int | None = None, group_name: str | None = None,
                    after_id: int = 0, limit: int = 100) -> list[dict[str, Any]]:
        return await self._all("note_list", subtask_id=subtask_id, group_name=group_name,
                               after_id=after_id, limit=limit)

    async def announce(self, *, author_id: int | None, body: str, group_name: str | None = None) -> dict[str, Any]:
        row = await self._one("announcement_insert", author_id=author_id, body=body, group_name=group_name)
        assert row is not None
        return row

    async def announcements(self, *, after_id: int = 0, limit: int = 100) -> list[dict[str, Any]]:
        return await self._all("announcement_list", after_id=after_id, limit=limit)

    async def landed(self, *, repo: str | None = None, subtask_id: int | None = None,
                     owner: str | None = None, before_id: int | None = None,
                     limit: int = 100) -> list[Landed]:
        rows = await self._all("landed_list", repo=repo, subtask_id=subtask_id, owner=owner,
                               before_id=before_id, limit=limit)
        return [Landed.from_row(r) for r in rows]

    async def statuses(self, ids: Sequence[int]) -> dict[int, str]:
        return {r["id"]: r["status"] for r in await self._all("subtask_statuses", ids=list(ids))}


class Waiter:
    """Wait for subtasks to finish (landed, failed or cancelled), or for a candidate's status to change, with
    LISTEN/NOTIFY, losing nothing.

    One connection LISTENs for the whole process and fans notifications out to every waiting call.
    A call registers its ids *before* reading their current status (listen, then drain), so a change that
    happens between the two is caught by one or the other. The status lives in the table, so a waiter that
    restarts and waits on the same ids returns at once for those already finished.
    """

    def __init__(self, url: str, store: Store, *, channels: Sequence[str] = ()) -> None:
        self.url = url
        self.store = store
        self.channels = (NOTIFY_CHANNEL, CANDIDATE_CHANNEL, *channels)  # channels' payloads start with an id
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._task: asyncio.Task[None] | None = None
        self._waiting: dict[tuple[str, int], set[asyncio.Event]] = {}
        self._ready = asyncio.Event()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._listen(), name="mergebot-waiter")
        await asyncio.wait_for(self._ready.wait(), timeout=30)

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def _listen(self) -> None:
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
                    for channel in self.channels:
                        await conn.execute(f"LISTEN {channel}")
                    self._ready.set()
                    self._wake_all()  # anything finished while we were reconnecting: waiters re-drain
                    async for note in conn.notifies():
                        key = (note.channel, int(note.payload.split(":", 1)[0]))
                        for ev in self._waiting.get(key, ()):
                            ev.set()
            except asyncio.CancelledError:
                raise
            except Exception:
                await asyncio.sleep(0.5)

    def _wake_all(self) -> None:
        for evs in self._waiting.values():
            for ev in evs:
                ev.set()

    def _register(self, keys: list[tuple[str, int]], ev: asyncio.Event) -> None:
        for key in keys:
            self._waiting.setdefault(key, set()).add(ev)

    def _unregister(self, keys: list[tuple[str, int]], ev: asyncio.Event) -> None:
        for key in keys:
            evs = self._waiting.get(key)
            if evs is not None:
                evs.discard(ev)
                if not evs:
                    del self._waiting[key]

    async def wait_until(self, channel: str, ids: Sequence[int], done: Callable[[], Awaitable[bool]],
                         timeout: float) -> None:
        """Until ``done()`` is true or ``timeout`` passes, re-checking whenever one of ``ids`` is announced on
        ``channel`` (listen, then drain). The verify jobs' waits share this connection instead of opening
        one each."""
        keys = [(channel, i) for i in dict.fromkeys(ids)]
        ev = asyncio.Event()
        self._register(keys, ev)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            while True:
                ev.clear()
                if await done():  # drain, after registering
                    return
                left = deadline - loop.time()
                if left <= 0:
                    return
                with contextlib.suppress(TimeoutError):  # a bounded sleep: polls if the listener is down
                    await asyncio.wait_for(ev.wait(), timeout=min(left, 2.0))
        finally:
            self._unregister(keys, ev)

    async def wait_candidate(self, cand_id: int, read: Callable[[], Awaitable[str]], final: frozenset[str],
                             timeout: float) -> str:
        """Until candidate ``cand_id``'s status (as ``read`` gives it) is in ``final``, or ``timeout`` passes;
        returns the status seen last. An agent's push waits for its verdict with this, in one request."""
        keys = [(CANDIDATE_CHANNEL, cand_id)]
        ev = asyncio.Event()
        self._register(keys, ev)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            while True:
                ev.clear()
                status = await read()  # drain, after registering
                left = deadline - loop.time()
                if status in final or left <= 0:
                    return status
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ev.wait(), timeout=left)
        finally:
            self._unregister(keys, ev)

    async def wait(self, ids: Sequence[int], timeout: float) -> dict[int, str]:
        """Block until every id is finished or ``timeout`` passes; return the statuses seen last."""
        ids = list(dict.fromkeys(ids))
        ev = asyncio.Event()
        keys = [(NOTIFY_CHANNEL, i) for i in ids]
        self._register(keys, ev)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            while True:
                ev.clear()
                statuses = await self.store.statuses(ids)  # drain, after registering
                missing = [i for i in ids if i not in statuses]
                if missing:
                    raise NotFound(f"no such subtasks: {missing}", field="ids")
                if all(s in FINISHED for s in statuses.values()):
                    return statuses
                left = deadline - loop.time()
                if left <= 0:
                    return statuses
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ev.wait(), timeout=left)
        finally:
            self._unregister(keys, ev)
