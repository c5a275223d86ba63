"""The model of the claim protocol's property test (``tests/test_properties.py``): what the database should say.

:class:`ClaimModel` is the state machine without its rules: it owns a fresh database (copied from the migrated
template) and an event loop, keeps a model of every subtask (:class:`Sub`) and every handle an agent ever held
(:class:`Held`), and carries out each operation against the stores with its outcome predicted from the model
(``do_claim``, ``do_write``, ``do_land``, ``do_reject``, ``do_recover``, ``force_lapse``). ``read_back`` takes
the model from the database after a burst whose interleaving is not ours; ``probe`` checks that every write with a
stale handle is refused. The rules, and the invariant that compares the database with the model, are the test's.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from hypothesis.stateful import RuleBasedStateMachine

from mergebot.auth import Role
from mergebot.db.connect import open_pool
from mergebot.db.database import Database
from mergebot.errors import ClaimSuperseded
from mergebot.models import Handle, Landing, Subtask
from mergebot.settings import Settings
from tests.support.pg import Server, with_db

T = TypeVar("T")

N_AGENTS = 5
MAX_SUBTASKS = 8
LEASE_SECONDS = 60.0  # never lapses on its own during an example; lapses are forced
IN_FLIGHT = frozenset({"running", "submitted"})
DEPS_LANDED = frozenset({"ready", "running", "submitted", "landed"})


@dataclass
class Sub:
    """The model of one subtask."""

    id: int
    priority: int
    max_attempts: int
    deps: list[int]
    status: str
    owner: int | None = None
    version: int = 0
    attempts: int = 0
    sha: str | None = None
    lapsed: bool = False


@dataclass(eq=False)
class Held:
    """A handle as an agent remembers it, with the candidate it last submitted under it."""

    agent: int
    id: int
    version: int
    sha: str | None = None
    probed: tuple[Any, ...] | None = field(default=None, repr=False)  # the subtask's fence when last probed

    @property
    def handle(self) -> Handle:
        return Handle(self.id, self.version)


class ClaimModel(RuleBasedStateMachine):
    """The claim protocol's model and operations on a fresh database (see the module's docstring)."""

    server: ClassVar[Server]

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dbname = self.server.fresh_db()
        try:
            self.url = with_db(self.server.url, self.dbname)
            cfg = Settings(database_url=self.url, pool_min_size=1, pool_max_size=N_AGENTS + 2)
            self.pool = self.run(open_pool(self.url, cfg, statement_timeout_ms=5000))
            self.db = Database(self.pool, lease_seconds=LEASE_SECONDS)
            self.agents = self.run(self._add_agents())
        except BaseException:
            if hasattr(self, "pool"):
                self.run(self.pool.close())
            self.loop.close()
            self.server.drop_db(self.dbname)
            raise
        self.subs: dict[int, Sub] = {}
        self.held: dict[int, list[Held]] = {a: [] for a in self.agents}  # per agent, oldest first
        self.max_version: dict[int, int] = {}
        self._shas = itertools.count(1)
        self.cancelled = 0

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    async def _add_agents(self) -> list[int]:
        out = []
        for i in range(N_AGENTS):
            agent, _ = await self.db.agents.add_agent(name=f"agent{i}", role=Role.AGENT)
            out.append(agent.id)
        return out

    def teardown(self) -> None:
        try:
            self.run(self.pool.close())
        finally:
            self.loop.close()
            self.server.drop_db(self.dbname)

    # -- model helpers ----------------------------------------------------------------------------------

    def sha(self) -> str:
        return f"{next(self._shas):040x}"

    def landing(self, h: Held, *, owner: int, candidate: str) -> Landing:
        """The landing path's evidence for landing ``candidate`` under handle ``h``."""
        return Landing(subtask_id=h.id, claim_version=h.version, owner_id=owner, repo="demo",
                       target_ref="refs/heads/main", candidate_sha=candidate, base_sha="b" * 40,
                       merged_sha=self.sha(), tree_sha="c" * 40, verifier_command="pytest",
                       verifier_result="pass", duration_ms=1, log_digest="d" * 64)

    def pick(self, n: int) -> Sub:
        ids = sorted(self.subs)
        return self.subs[ids[n % len(ids)]]

    def handle_of(self, agent: int, which: int) -> Held | None:
        """One of the handles of the agent-th agent among those holding any (so the rule does something)."""
        holders = [a for a in self.agents if self.held[a]]
        if not holders:
            return None
        mine = self.held[holders[agent % len(holders)]]
        return mine[-1] if which < 0 else mine[which % len(mine)]

    def all_held(self) -> list[Held]:
        return [h for hs in self.held.values() for h in hs]

    def candidate(self, which: int) -> Held | None:
        held = sorted(self.all_held(), key=lambda h: (h.id, h.version))
        if not held:
            return None
        if which < 0:
            current = [h for h in held if self.live(h, {"submitted"})]
            return current[0] if current else held[-1]
        return held[which % len(held)]

    def ready_in_claim_order(self) -> list[Sub]:
        ready = [s for s in self.subs.values() if s.status == "ready"]
        return sorted(ready, key=lambda s: (-s.priority, s.id))

    def live(self, h: Held, statuses: frozenset[str] | set[str]) -> bool:
        s = self.subs[h.id]
        return s.owner == h.agent and s.version == h.version and s.status in statuses

    def refused(self, err: ClaimSuperseded, h: Held) -> None:
        """A refusal names the subtask's current version and status."""
        s = self.subs[h.id]
        assert (err.detail["current_version"], err.detail["subtask_status"]) == (s.version, s.status), (
            err.detail, s)

    def took(self, s: Sub, agent: int, got: Subtask) -> None:
        """Model a successful claim of ``s`` by ``agent`` and check what the store returned."""
        assert s.status == "ready", f"claimed subtask {s.id} was {s.status}"
        s.status, s.owner, s.version, s.lapsed = "running", agent, s.version + 1, False
        s.attempts += 1
        assert (got.id, got.status, got.owner_id, got.claim_version, got.attempts) == (
            s.id, "running", agent, s.version, s.attempts)
        assert got.lease_expires_at is not None
        self.held[agent].append(Held(agent, s.id, s.version))

    def release_dependents(self, landed_id: int) -> set[int]:
        freed = set()
        for s in self.subs.values():
            if (s.status == "blocked" and landed_id in s.deps
                    and all(self.subs[d].status == "landed" for d in s.deps)):
                s.status = "ready"
                freed.add(s.id)
        return freed

    def create(self, priority: int, max_attempts: int, deps: list[int]) -> None:
        sub, created = self.run(self.db.subtasks.create_subtask(
            actor_id=None, title=f"t{len(self.subs)}", priority=priority, depends_on=deps,
            max_attempts=max_attempts))
        assert created
        status = "ready" if all(self.subs[d].status == "landed" for d in deps) else "blocked"
        assert sub.status == status, (sub.status, status)
        self.subs[sub.id] = Sub(sub.id, priority, max_attempts, sorted(set(deps)), status)

    # -- the operations, each with its outcome predicted from the model ------------------------------------

    def do_claim(self, agent: int) -> None:
        order = self.ready_in_claim_order()
        got = self.run(self.db.subtasks.claim(agent_id=agent))
        if not order:
            assert got is None, f"claimed {got} with nothing ready"
            return
        assert got is not None, "a subtask was ready but the claim returned nothing"
        assert got.id == order[0].id, f"claimed {got.id}, expected {order[0].id} (priority, then age)"
        self.took(order[0], agent, got)

    def do_write(self, write: str, h: Held, writer: int) -> None:
        """An owner write (heartbeat, release, submit, or the fused complete-and-claim) by ``writer`` with
        handle ``h``: it succeeds exactly when the handle is live for the writer, else ClaimSuperseded."""
        s = self.subs[h.id]
        allowed = IN_FLIGHT if write == "heartbeat" else frozenset({"running"})
        live = s.owner == writer and s.version == h.version and s.status in allowed
        sha = self.sha()
        order = self.ready_in_claim_order()
        call = {
            "heartbeat": lambda: self.db.subtasks.heartbeat(agent_id=writer, handle=h.handle),
            "release": lambda: self.db.subtasks.release(agent_id=writer, handle=h.handle, reason="handing off"),
            "submit": lambda: self.db.subtasks.submit(agent_id=writer, handle=h.handle, sha=sha),
            "complete": lambda: self.db.subtasks.claim(agent_id=writer, complete=h.handle, sha=sha),
        }[write]
        try:
            got = self.run(call())
        except ClaimSuperseded as e:
            assert not live, f"{write} by {writer} with live {h} refused: {e}"
            self.refused(e, h)
            return
        assert live, f"{write} by {writer} with stale {h} accepted (subtask was {s})"
        if write == "heartbeat":
            assert isinstance(got, Subtask) and (got.lease_expires_at is not None) == (s.status == "running")
            s.lapsed = False
        elif write == "release":
            s.status, s.owner, s.attempts, s.lapsed = "ready", None, max(s.attempts - 1, 0), False
            assert isinstance(got, Subtask) and (got.status, got.owner_id, got.attempts) == (
                "ready", None, s.attempts)
        else:
            s.status, s.sha, s.lapsed = "submitted", sha, False
            h.sha = sha
            if write == "submit":
                assert isinstance(got, Subtask)
                assert (got.status, got.candidate_sha, got.lease_expires_at) == ("submitted", sha, None)
            elif not order:  # complete: the claim that follows
                assert got is None, f"claimed {got} with nothing ready"
            else:
                assert got is not None and got.id == order[0].id, (got, order[0].id)
                self.took(order[0], writer, got)

    def do_land(self, h: Held, candidate: str, owner: int | None = None) -> None:
        """The landing path lands a verified candidate of this claim. Fenced by owner and claim version, not by
        sha: a newer push that raced the landing is superseded by what landed (queries/landing.sql, subtask_land).
        With ``owner``, the evidence names someone other than the handle's agent."""
        s = self.subs[h.id]
        owner = h.agent if owner is None else owner
        live = self.live(h, {"submitted"}) and owner == h.agent
        try:
            landed, released = self.run(self.db.landing.land(self.landing(h, owner=owner, candidate=candidate)))
        except ClaimSuperseded as e:
            assert not live, f"landing live {h} refused: {e}"
            return
        assert live, f"landing stale {h} accepted (subtask was {s})"
        assert (landed.subtask_id, landed.claim_version, landed.owner_id) == (s.id, s.version, h.agent)
        assert landed.candidate_sha == candidate
        s.status, s.owner, s.sha = "landed", None, candidate
        assert set(released) == self.release_dependents(s.id)
        assert len(released) == len(set(released))

    def do_reject(self, h: Held, sha: str | None) -> None:
        """The landing path refuses the candidate: back to running, same owner and version, new lease. With a
        sha, only that candidate is bounced (a newer push is not bounced for an old one)."""
        s = self.subs[h.id]
        live = s.status == "submitted" and s.version == h.version and (sha is None or s.sha == sha)
        try:
            got = self.run(self.db.subtasks.reject(handle=h.handle, reason="verifier: tests failed", sha=sha))
        except ClaimSuperseded as e:
            assert not live, f"reject of live {h} refused: {e}"
            self.refused(e, h)
            return
        assert live, f"reject with stale {h} (sha {sha}) accepted (subtask was {s})"
        s.status, s.lapsed = "running", False
        assert (got.status, got.owner_id, got.claim_version) == ("running", s.owner, s.version)
        assert got.lease_expires_at is not None

    def do_recover(self) -> None:
        got = self.run(self.db.subtasks.recover_expired(grace_seconds=0))
        want = {}
        for s in self.subs.values():
            if s.status == "running" and s.lapsed:
                s.status = "failed" if s.attempts >= s.max_attempts else "ready"
                s.owner, s.lapsed = None, False
                want[s.id] = (s.status, s.version)
        assert {r["id"]: (r["status"], r["claim_version"]) for r in got} == want

    def force_lapse(self, ids: list[int]) -> None:
        """Owners went silent: their leases ran out (forced into the past with a direct UPDATE)."""
        async def force() -> None:
            async with self.pool.connection() as conn:
                await conn.execute(
                    "UPDATE subtasks SET lease_expires_at = now() - interval '1 hour' "
                    "WHERE id = ANY(%s) AND status = 'running'", (ids,))

        self.run(force())
        for i in ids:
            self.subs[i].lapsed = True

    def read_back(self) -> None:
        """Take the model's state from the database (after a burst, whose interleaving is not ours)."""
        async def read() -> list[Any]:
            async with self.pool.connection() as conn:
                cur = await conn.execute(
                    "SELECT id, status::text, owner_id, claim_version, attempts, candidate_sha, "
                    "coalesce(lease_expires_at < now(), false) FROM subtasks")
                return await cur.fetchall()

        for i, status, owner, version, attempts, sha, lapsed in self.run(read()):
            s = self.subs[i]
            s.status, s.owner, s.version, s.attempts, s.sha, s.lapsed = (
                status, owner, version, attempts, sha, lapsed)

    # -- checks against the database --------------------------------------------------------------------

    async def _read(self) -> tuple[list[Any], ...]:
        async with self.pool.connection() as conn:
            subs = await (await conn.execute(
                "SELECT id, status::text, owner_id, claim_version, attempts, candidate_sha, "
                "lease_expires_at IS NOT NULL, coalesce(lease_expires_at < now(), false) "
                "FROM subtasks ORDER BY id")).fetchall()
            deps = await (await conn.execute(
                "SELECT subtask_id, depends_on_id FROM subtask_deps ORDER BY 1, 2")).fetchall()
            events = await (await conn.execute(
                "SELECT subtask_id, kind, from_status::text, to_status::text, claim_version FROM events "
                "WHERE subtask_id IS NOT NULL ORDER BY id")).fetchall()
            landed = await (await conn.execute(
                "SELECT subtask_id, claim_version, owner_id FROM landed ORDER BY subtask_id")).fetchall()
        return subs, deps, events, landed

    async def probe(self, h: Held, fence: tuple[Any, ...], writes: list[str]) -> None:
        """These writes with this handle must all be refused, naming the current version and status (land
        names neither). A handle is probed when it goes stale, and again whenever its subtask's fence changes
        (e.g. its agent claimed it again at a newer version: what a missing version check would let through);
        a live handle of a submitted subtask is probed with the writes only a running claim may make, and a
        landing whose evidence names another owner."""

        other = self.agents[(self.agents.index(h.agent) + 1) % N_AGENTS]
        for name in writes:
            call = {
                "heartbeat": lambda: self.db.subtasks.heartbeat(agent_id=h.agent, handle=h.handle),
                "submit": lambda: self.db.subtasks.submit(agent_id=h.agent, handle=h.handle, sha=self.sha()),
                "release": lambda: self.db.subtasks.release(agent_id=h.agent, handle=h.handle),
                "complete": lambda: self.db.subtasks.claim(agent_id=h.agent, complete=h.handle, sha=self.sha()),
                "note": lambda: self.db.subtasks.add_note(author_id=h.agent, subtask_id=h.id, claim_version=h.version,
                                                          body="still mine?"),
                "land": lambda: self.db.landing.land(self.landing(h, owner=h.agent, candidate=self.sha())),
                "land_other_owner": lambda: self.db.landing.land(self.landing(h, owner=other, candidate=self.sha())),
                "reject": lambda: self.db.subtasks.reject(handle=h.handle, reason="stale verdict"),
            }[name]
            # An owner's last word: its note holds after the claim ended until someone claims the subtask again.
            last_word = name == "note" and fence[1] is None and fence[2] == h.version and fence[0] in (
                "landed", "ready", "failed")
            try:
                await call()
            except ClaimSuperseded as e:
                assert not last_word, f"the last note of {h} was refused ({fence})"
                if not name.startswith("land"):
                    assert (e.detail["subtask_status"], e.detail["current_version"]) == (fence[0], fence[2]), (
                        name, e.detail)
            else:
                if not last_word:
                    raise AssertionError(f"{name} with {h} accepted (subtask status, owner, version: {fence})")
