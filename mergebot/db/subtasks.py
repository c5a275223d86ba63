"""The subtask store: who owns which subtask, decided by PostgreSQL — and the notes and announcements around it.

Rules (DESIGN.md, "Subtask lifecycle"):
  * A claim is one SQL statement (``subtask_claim``): FOR UPDATE SKIP LOCKED over a partial index of ready
    rows, highest priority first. The owner is the authenticated agent id passed in by the caller, never a
    value from the request body. The claim bumps ``claim_version``; ``(id, claim_version)`` is the handle.
  * Every owner write (heartbeat, release, note, submit) matches id, owner, claim_version and status. Zero
    rows changed means the claim is gone: ``ClaimSuperseded`` with the current version.
  * Leases are renewed by heartbeats; ``recover_expired`` hands back subtasks whose lease ran out more than
    a grace period ago, and fails them once their attempts are spent.
  * Landing one subtask releases its dependents in the same transaction (``mergebot.db.landing``); ``wait``
    tells waiters.
  * Allowed transitions and the event log are enforced by the database itself (triggers), so a bug here
    cannot skip them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from mergebot import messages as say
from mergebot import similar
from mergebot.db.base import Row, Sql, Tx, insert_event
from mergebot.db.waiter import FINISHED, READY, Waiter
from mergebot.errors import BeingLanded, ClaimSuperseded, Conflict, Invalid, InvalidTransition, MergebotError, NotFound
from mergebot.models import Handle, Subtask
from mergebot.tree import MAX_PATHS, Node

OPEN_TEXTS = 20_000  # open subtasks a new one is compared with, newest first
DONE = frozenset({"landed", "failed", "cancelled"})  # a subtask's statuses that end its story


class SubtaskStore:
    def __init__(self, sql: Sql, waiter: Waiter, *, lease_seconds: float = 120.0, duplicate_days: int = 30) -> None:
        self.sql = sql
        self.waiter = waiter
        self.lease_seconds = lease_seconds
        self.duplicate_days = duplicate_days  # a subtask landed within this many days still counts as a twin

    async def superseded(self, subtask_id: int, claim_version: int) -> MergebotError:
        """Explain why a fenced write changed nothing: what happened to the claim, who holds the subtask now and at
        which version, and what to do."""
        row = await self.sql.one("subtask_fence_state", id=subtask_id, claim_version=claim_version)
        if row is None:
            return NotFound(say.no_such_subtask(subtask_id), subtask_id=subtask_id)
        lapsed = row["lapsed_at"].isoformat(timespec="seconds") if row["lapsed_at"] else None
        return ClaimSuperseded(
            say.claim_superseded(subtask_id, claim_version, status=row["status"], current=row["claim_version"],
                                 holder=row["owner"], lapsed_at=lapsed),
            subtask_id=subtask_id, current_version=row["claim_version"], subtask_status=row["status"],
            holder=row["owner"], lapsed_at=lapsed)

    # -- creating ----------------------------------------------------------------------------------------

    async def create_subtask(self, *, actor_id: int | None, title: str, description: str = "", priority: int = 0,
                             parent_id: int | None = None, group_name: str | None = None,
                             depends_on: Sequence[int] = (), max_attempts: int = 3,
                             idempotency_key: str | None = None, paths: Sequence[str] = ()) -> tuple[Subtask, bool]:
        """Create a subtask, blocked until its dependencies land. Returns (subtask, created).

        With an idempotency key, a retry returns the first subtask and creates nothing; the same key with a
        different title, parent or group is a conflict, not a silent match.
        """
        async with self.sql.tx() as tx:
            sub, created = await self._create(tx, actor_id=actor_id, title=title, description=description,
                                              priority=priority, parent_id=parent_id, group_name=group_name,
                                              depends_on=depends_on, max_attempts=max_attempts,
                                              idempotency_key=idempotency_key, paths=paths)
        if created:
            sub.depends_on = sorted(set(depends_on))
        return sub, created

    @staticmethod
    async def _create(tx: Tx, *, actor_id: int | None, title: str, description: str, priority: int,
                      parent_id: int | None, group_name: str | None, depends_on: Sequence[int], max_attempts: int,
                      idempotency_key: str | None, paths: Sequence[str] = ()) -> tuple[Subtask, bool]:
        deps = sorted(set(depends_on))
        if group_name is not None:
            await tx.all("group_upsert", name=group_name, description=None)
        row = await tx.one("subtask_create", actor_id=actor_id, title=title, description=description,
                           priority=priority, parent_id=parent_id, group_name=group_name, depends_on=deps,
                           max_attempts=max_attempts, idempotency_key=idempotency_key, paths=list(paths))
        if row is not None:
            return Subtask.from_row(row), True
        if idempotency_key is not None:
            existing = await tx.one("subtask_by_idempotency_key", idempotency_key=idempotency_key)
            if existing is not None:
                sub = Subtask.from_row(existing)
                if (sub.title, sub.parent_id, sub.group_name) != (title, parent_id, group_name):
                    raise Conflict(
                        say.idempotency_key_reused(idempotency_key, sub.id),
                        field="idempotency_key", subtask_id=sub.id)
                return sub, False
        found = {r["id"] for r in await tx.all("subtasks_existing", ids=deps)}
        missing = [d for d in deps if d not in found]
        raise Invalid(say.unknown_dependencies(missing), field="depends_on")

    async def create_tree(self, *, actor_id: int | None, nodes: Sequence[Node],
                          key_prefix: str | None = None) -> dict[str, Subtask]:
        """Create a whole planned tree (see ``mergebot.tree.plan``) in one transaction: all or nothing.

        With ``key_prefix``, each node's idempotency key is ``prefix/key``, so loading the same file twice
        creates nothing new.
        """
        made: dict[str, Subtask] = {}
        async with self.sql.tx() as tx:
            for n in nodes:
                deps = [d if isinstance(d, int) else made[d].id for d in n.depends_on]
                parent = n.parent if isinstance(n.parent, int) or n.parent is None else made[n.parent].id
                sub, _ = await self._create(
                    tx, actor_id=actor_id, title=n.title, description=n.description, priority=n.priority,
                    parent_id=parent, group_name=n.group, depends_on=deps, max_attempts=n.max_attempts,
                    idempotency_key=f"{key_prefix}/{n.key}" if key_prefix else None, paths=n.paths)
                made[n.key] = sub
            for n in nodes:
                if n.children:
                    children = [made[c].id for c in n.children]
                    guard = await tx.one("subtask_dep_guard", id=made[n.key].id, depends_on=children)
                    assert guard is not None
                    if guard["unlanded"] and guard["status"] not in ("blocked", "ready"):
                        raise Conflict(say.cannot_wait_for_children(made[n.key].id, n.key, guard["status"]),
                                       field="children", subtask_id=made[n.key].id)
                    if await tx.all("subtask_add_deps", id=made[n.key].id, actor_id=actor_id, depends_on=children):
                        made[n.key].status = "blocked"  # the query returns the row only when it re-blocked it
        return made

    async def likely_twins(self, items: Sequence[tuple[str, str, str]],
                           key_prefix: str | None = None) -> list[dict[str, Any]]:
        """For subtasks about to be created, as (key, title, description): each pair of near-duplicates among them
        and with the open subtasks or those landed in the last ``duplicate_days`` (``mergebot.similar``), most
        alike first; a landed twin names its landed record. Items whose idempotency key exists
        already (``key_prefix/key``, or the key itself with a prefix of "": the same file loaded again, a retried
        create) are those subtasks, not twins of them."""
        if key_prefix is not None:
            def idem(k: str) -> str:
                return f"{key_prefix}/{k}" if key_prefix else k

            known = {r["idempotency_key"] for r in await self.sql.all("subtasks_by_keys",
                                                                     keys=[idem(k) for k, _, _ in items])}
            items = [i for i in items if idem(i[0]) not in known]
        if not items:
            return []
        lengths = [len(t) for _, t, _ in items]
        words = sorted(set().union(*(similar.words(t) for _, t, _ in items)))
        rows = {r["id"]: r for r in await self.sql.all(
            "subtasks_open_texts", limit=OPEN_TEXTS, words=words, landed_days=self.duplicate_days,
            shortest=int(min(lengths) * similar.TITLE_THRESHOLD) - 2,
            longest=int(max(lengths) / similar.TITLE_THRESHOLD) + 2)}
        titles = {k: t for k, t, _ in items}
        new = [similar.text(("new", k), t, d) for k, t, d in items]
        old = [similar.text(("old", i), r["title"], r["description"]) for i, r in rows.items()]
        out = []
        for a, b, score in similar.twins(new, old):
            key, (side, other) = a[1], b
            if side == "old":
                row = rows[other]
                twin = {"subtask_id": other, "title": row["title"], "status": row["status"]}
                if row["landed_id"] is not None:
                    twin |= {"landed_id": row["landed_id"], "landed_at": row["landed_at"].isoformat(timespec="seconds")}
            else:
                twin = {"key": other, "title": titles[other]}
            out.append({"key": key, "title": titles[key], "twin": twin, "similarity": score})
        return out

    # -- reading -----------------------------------------------------------------------------------------

    async def get_subtask(self, subtask_id: int) -> Subtask:
        row = await self.sql.one("subtask_get", id=subtask_id)
        if row is None:
            raise NotFound(say.no_such_subtask(subtask_id), subtask_id=subtask_id)
        return Subtask.from_row(row)

    async def list_subtasks(self, *, status: str | None = None, group_name: str | None = None,
                            owner_id: int | None = None, after_id: int = 0, limit: int = 100) -> list[Row]:
        return await self.sql.all("subtask_list", status=status, group_name=group_name, owner_id=owner_id,
                                  after_id=after_id, limit=limit)

    async def counts(self) -> dict[str, int]:
        return {r["status"]: r["n"] for r in await self.sql.all("subtask_counts")}

    async def statuses(self, ids: Sequence[int]) -> dict[int, str]:
        return {r["id"]: r["status"] for r in await self.sql.all("subtask_statuses", ids=list(ids))}

    async def wait(self, ids: Sequence[int], timeout: float) -> dict[int, str]:
        """Until every id is landed, failed or cancelled, or ``timeout`` passes; the statuses seen last."""
        ids = list(dict.fromkeys(ids))
        seen: dict[int, str] = {}

        async def done() -> bool:
            seen.clear()
            seen.update(await self.statuses(ids))
            missing = [i for i in ids if i not in seen]
            if missing:
                raise NotFound(say.no_such_subtasks(missing), field="ids")
            return all(s in DONE for s in seen.values())

        await self.waiter.until(FINISHED, ids, done, timeout)
        return seen

    # -- the owner's writes ------------------------------------------------------------------------------

    async def claim(self, *, agent_id: int, complete: Handle | None = None, sha: str | None = None,
                    wait: float = 0.0) -> Subtask | None:
        """Claim the best ready subtask for this agent, or None when nothing is ready.

        With ``complete``, first submit that claim (fenced, with ``sha``) in the same statement; if the
        completion does not hold, nothing is claimed and ``ClaimSuperseded`` is raised. With ``wait``, when
        nothing is ready, wait up to that many seconds for work (``Waiter.until_any``: one waiting claim is
        woken per subtask that becomes ready), so idle agents need not poll.
        """
        got = await self._claim_once(agent_id, complete, sha)
        if got is not None or wait <= 0:
            return got
        claimed: list[Subtask] = []

        async def try_again() -> bool:
            sub = await self._claim_once(agent_id, None, None)
            if sub is not None:
                claimed.append(sub)
            return sub is not None

        await self.waiter.until_any(READY, try_again, wait)
        return claimed[0] if claimed else None

    async def overlapping(self, subtask_id: int, paths: Sequence[str]) -> list[Row]:
        """The subtasks in flight (with their owners) whose footprints may overlap ``paths``."""
        if not paths:
            return []
        return await self.sql.all("subtasks_overlapping", id=subtask_id, paths=list(paths))

    async def touch(self, *, agent_id: int, handle: Handle, paths: Sequence[str]) -> Subtask:
        """Add the claimer's own estimate of the paths it will touch to the subtask's footprint (fenced)."""
        row = await self.sql.one("subtask_touch", id=handle.id, claim_version=handle.claim_version,
                                 agent_id=agent_id, paths=list(paths))
        if row is not None:
            return Subtask.from_row(row)
        sub = await self.get_subtask(handle.id)
        if sub.owner_id == agent_id and sub.claim_version == handle.claim_version \
                and sub.status in ("running", "submitted"):
            raise Invalid(say.footprint_too_large(handle.id, len(sub.paths), MAX_PATHS), field="paths")
        raise await self.superseded(handle.id, handle.claim_version)

    async def _claim_once(self, agent_id: int, complete: Handle | None, sha: str | None) -> Subtask | None:
        row = await self.sql.one(
            "subtask_claim", agent_id=agent_id, lease_seconds=self.lease_seconds,
            done_id=complete.id if complete else None,
            done_version=complete.claim_version if complete else None, done_sha=sha)
        assert row is not None
        if not row["done_ok"]:
            assert complete is not None
            raise await self.superseded(complete.id, complete.claim_version)
        return Subtask.from_row(row) if row["id"] is not None else None

    async def handoff(self, subtask_id: int) -> list[Row]:
        """What the next owner reads: the notes left on the subtask, oldest first."""
        return await self.notes(subtask_id=subtask_id, limit=200)

    async def _fenced(self, query: str, handle: Handle, **params: Any) -> Subtask:
        row = await self.sql.one(query, id=handle.id, claim_version=handle.claim_version, **params)
        if row is None:
            raise await self.superseded(handle.id, handle.claim_version)
        return Subtask.from_row(row)

    async def heartbeat(self, *, agent_id: int, handle: Handle) -> Subtask:
        return await self._fenced("subtask_heartbeat", handle, agent_id=agent_id, lease_seconds=self.lease_seconds)

    async def release(self, *, agent_id: int, handle: Handle, reason: str | None = None) -> Subtask:
        return await self._fenced("subtask_release", handle, agent_id=agent_id, reason=reason)

    async def submit(self, *, agent_id: int, handle: Handle, sha: str | None) -> Subtask:
        return await self._fenced("subtask_submit", handle, agent_id=agent_id, sha=sha)

    async def reject(self, *, handle: Handle, reason: str, actor_id: int | None = None,
                     sha: str | None = None) -> Subtask:
        """The landing path refused a submitted candidate (``sha``, if given): back to running for the owner."""
        return await self._fenced("subtask_reject", handle, sha=sha, reason=reason, lease_seconds=self.lease_seconds,
                                  actor_id=actor_id)

    # -- recovery and the lead's writes ------------------------------------------------------------------

    async def recover_expired(self, *, grace_seconds: float, limit: int = 1000) -> list[Row]:
        """Return subtasks whose lease lapsed more than ``grace_seconds`` ago to ready (or failed)."""
        return await self.sql.all("subtask_recover_expired", grace_seconds=grace_seconds, limit=limit)

    async def cancel(self, *, subtask_id: int, reason: str, actor_id: int | None) -> Subtask:
        """A lead's cancel: any status but landed or cancelled, and never while a candidate of the subtask is being
        landed (``BeingLanded``: wait for its verdict). The row is locked first, so a cancel racing a landing's
        intent (written with the subtask locked, ``LandingStore.begin_landing``) comes before it (the intent's fence
        refuses the candidate) or after it (refused here)."""
        async with self.sql.tx() as tx:
            await tx.all("subtask_lock", id=subtask_id)
            row = await tx.one("subtask_cancel", id=subtask_id, reason=reason, actor_id=actor_id)
            landing = await tx.one("candidate_landing_of", subtask_id=subtask_id) if row is None else None
        if landing is not None:
            raise BeingLanded(say.being_landed(subtask_id, landing["id"]), subtask_id=subtask_id,
                              candidate=landing["id"])
        if row is None:
            sub = await self.get_subtask(subtask_id)
            raise InvalidTransition(say.cannot_cancel(subtask_id, sub.status))
        return Subtask.from_row(row)

    async def _lead_move(self, query: str, subtask_id: int, reason: str, actor_id: int | None,
                         refused: Callable[[int, str], str]) -> Subtask:
        """Run a lead's move of one subtask; when it moves nothing, InvalidTransition says why: ``refused`` words
        it from the subtask's id and status."""
        row = await self.sql.one(query, id=subtask_id, reason=reason, actor_id=actor_id)
        if row is None:
            sub = await self.get_subtask(subtask_id)
            raise InvalidTransition(refused(subtask_id, sub.status))
        return Subtask.from_row(row)

    async def allow(self, *, subtask_id: int, actor_id: int | None, test_removal: bool | None = None,
                    check_changes: bool | None = None, behaviour_change: bool | None = None) -> Subtask:
        """A lead's or admin's permission on a subtask (the API checks the role; the owner never has it)."""
        async with self.sql.tx() as tx:
            row = await tx.one("subtask_allow", id=subtask_id, actor_id=actor_id, test_removal=test_removal,
                               check_changes=check_changes, behaviour_change=behaviour_change)
            if row is None:
                raise NotFound(say.no_subtask(subtask_id), field="subtask_id")
            await insert_event(tx, actor_id=actor_id, kind="allowed", subtask_id=subtask_id,
                               detail={"test_removal": row["allow_test_removal"],
                                       "check_changes": row["allow_check_changes"],
                                       "behaviour_change": row["allow_behaviour_change"]})
        return await self.get_subtask(subtask_id)

    async def set_acceptance(self, *, subtask_id: int, files: Sequence[tuple[str, bytes]],
                             actor_id: int | None) -> None:
        """Replace a subtask's acceptance tests (path, content) in one transaction."""
        async with self.sql.tx() as tx:
            if await tx.one("subtask_get", id=subtask_id) is None:
                raise NotFound(say.no_subtask(subtask_id), field="subtask_id")
            await tx.all("acceptance_clear", subtask_id=subtask_id)
            for path, content in files:
                await tx.all("acceptance_insert", subtask_id=subtask_id, path=path, content=content,
                             actor_id=actor_id)
            await insert_event(tx, actor_id=actor_id, kind="acceptance_set", subtask_id=subtask_id,
                               detail={"paths": [p for p, _ in files]})

    async def acceptance(self, subtask_id: int) -> list[tuple[str, bytes]]:
        """A subtask's acceptance tests: (path, content), by path."""
        return [(r["path"], bytes(r["content"])) for r in await self.sql.all("acceptance_get", subtask_id=subtask_id)]

    async def acceptance_paths(self, ids: Sequence[int]) -> dict[int, list[str]]:
        rows = await self.sql.all("acceptance_paths", ids=list(ids)) if ids else []
        return {r["subtask_id"]: list(r["paths"]) for r in rows}

    async def judging(self, ids: Sequence[int]) -> dict[int, Row]:
        """What judging their candidates reads of these subtasks, by id, in one query: ``allow_behaviour_change``,
        ``allow_test_removal``, ``allow_check_changes`` and ``acceptance`` (its acceptance tests' paths). A subtask
        that is gone is missing."""
        rows = await self.sql.all("subtasks_judging", ids=sorted(set(ids))) if ids else []
        return {int(r["id"]): r for r in rows}

    async def set_acceptance_probe(self, *, subtask_id: int, job_id: int, actor_id: int | None) -> None:
        await self.sql.all("acceptance_probe_set", subtask_id=subtask_id, job_id=job_id, actor_id=actor_id)

    async def retry(self, *, subtask_id: int, reason: str, actor_id: int | None) -> Subtask:
        return await self._lead_move("subtask_retry", subtask_id, reason, actor_id, say.nothing_to_retry)

    # -- notes, announcements, events --------------------------------------------------------------------

    async def add_note(self, *, author_id: int, body: str, subtask_id: int | None = None,
                       claim_version: int | None = None, group_name: str | None = None) -> Row:
        """A note. On a subtask with a claim version it is an owner write, fenced like the others."""
        if subtask_id is not None and claim_version is not None:
            row = await self.sql.one("note_insert_fenced", subtask_id=subtask_id, author_id=author_id,
                                     claim_version=claim_version, body=body)
            if row is None:
                raise await self.superseded(subtask_id, claim_version)
            return row
        row = await self.sql.one("note_insert", subtask_id=subtask_id, group_name=group_name, author_id=author_id,
                                 claim_version=None, body=body)
        assert row is not None
        return row

    async def notes(self, *, subtask_id: int | None = None, group_name: str | None = None, after_id: int = 0,
                    limit: int = 100) -> list[Row]:
        return await self.sql.all("note_list", subtask_id=subtask_id, group_name=group_name, after_id=after_id,
                                  limit=limit)

    async def announce(self, *, author_id: int | None, body: str, group_name: str | None = None) -> Row:
        row = await self.sql.one("announcement_insert", author_id=author_id, body=body, group_name=group_name)
        assert row is not None
        return row

    async def announcements(self, *, after_id: int = 0, limit: int = 100) -> list[Row]:
        return await self.sql.all("announcement_list", after_id=after_id, limit=limit)

    async def log_event(self, *, actor_id: int | None, kind: str, subtask_id: int | None = None,
                        claim_version: int | None = None, detail: dict[str, Any] | None = None) -> None:
        await insert_event(self.sql, actor_id=actor_id, kind=kind, subtask_id=subtask_id,
                           claim_version=claim_version, detail=detail)

    async def events(self, *, subtask_id: int | None = None, after_id: int = 0, limit: int = 100) -> list[Row]:
        return await self.sql.all("event_list", subtask_id=subtask_id, after_id=after_id, limit=limit)
