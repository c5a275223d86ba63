"""The claim cost ladder's rungs (``python -m bench.claims.cost``): each step from a round trip to the fused claim, and
the template database with the switches that take the schema apart rung by rung.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from bench.claims.databases import SHA, build_mergebot_template
from bench.common import harness
from mergebot import auth
from mergebot.db.queries import QUERIES

LEASE_SECONDS = 120.0  # Store's default lease

BARE_UPDATE = (
    "UPDATE subtasks SET status = 'running', owner_id = %(agent)s, claim_version = claim_version + 1, "
    "lease_expires_at = now() + make_interval(secs => %(lease)s), updated_by = %(agent)s WHERE id = %(id)s")
HOT_UPDATE = "UPDATE subtasks SET claim_version = claim_version + 1 WHERE id = %(id)s"
EVENT_INSERT = (  # what subtasks_on_update appends for a ready -> running claim
    "INSERT INTO events (actor_id, kind, subtask_id, from_status, to_status, claim_version, detail) "
    "VALUES (%(agent)s, 'status', %(id)s, 'ready', 'running', 1, jsonb_strip_nulls(jsonb_build_object("
    "'owner', %(agent)s::bigint, 'previous_owner', NULL::bigint, 'reason', NULL::text, 'sha', NULL::text)))")

Step = Callable[[int], bool]  # runs statement number i (each i touches its own row); True if it did its work


@dataclass
class Ctx:
    agent_id: int
    first_subtask: int  # subtask ids first_subtask, first_subtask + 1, ... are ready in the template
    first_t: int


@dataclass
class Rung:
    key: str
    label: str
    alter: tuple[str, ...] = ()  # "no_trigger", "no_fks", "no_checks", "no_indexes", applied in this order
    table: str | None = None  # the table whose updates are counted for the HOT column
    make: Callable[[psycopg.Connection[Any], Ctx], Step] = field(default=lambda conn, ctx: lambda i: True)


# -- the statements ------------------------------------------------------------------------------------------


def step_sql(query: str) -> Callable[[psycopg.Connection[Any], Ctx], Step]:
    def make(conn: psycopg.Connection[Any], ctx: Ctx) -> Step:
        cur = conn.cursor()

        def step(i: int) -> bool:
            cur.execute(query)
            return True

        return step

    return make


def step_update_t(conn: psycopg.Connection[Any], ctx: Ctx) -> Step:
    cur = conn.cursor()

    def step(i: int) -> bool:
        cur.execute("UPDATE t SET n = n + 1 WHERE id = %s", (ctx.first_t + i,))
        return cur.rowcount == 1

    return step


def step_claim(*, fused: bool) -> Callable[[psycopg.Connection[Any], Ctx], Step]:
    """``subtask_claim`` with the parameters Store.claim passes; fused: complete the previous claim too."""

    def make(conn: psycopg.Connection[Any], ctx: Ctx) -> Step:
        cur = conn.cursor(row_factory=dict_row)
        query = QUERIES["subtask_claim"]
        prev: list[tuple[int, int]] = []  # the claim in hand (fused)

        def step(i: int) -> bool:
            done = prev.pop() if fused and prev else None
            cur.execute(query, {"agent_id": ctx.agent_id, "lease_seconds": LEASE_SECONDS,
                                "done_id": done[0] if done else None, "done_version": done[1] if done else None,
                                "done_sha": SHA if done else None})
            row = cur.fetchone()
            if row is None or row["id"] is None or not row["done_ok"]:
                return False
            if fused:
                prev.append((row["id"], row["claim_version"]))
            return done is None or row["done_id"] == done[0]

        return step

    return make


def step_subtask(query: str) -> Callable[[psycopg.Connection[Any], Ctx], Step]:
    def make(conn: psycopg.Connection[Any], ctx: Ctx) -> Step:
        cur = conn.cursor()

        def step(i: int) -> bool:
            cur.execute(query, {"id": ctx.first_subtask + i, "agent": ctx.agent_id, "lease": LEASE_SECONDS})
            return cur.rowcount == 1

        return step

    return make


COMMIT_FLOOR = "SELECT pg_logical_emit_message(true, 'mergebot-bench', '')"
NO_TRIGGER = ("no_trigger",)
NO_FKS = ("no_trigger", "no_fks")
BARE = ("no_trigger", "no_fks", "no_checks")
BARER = ("no_trigger", "no_fks", "no_checks", "no_indexes")

RUNGS: list[Rung] = [
    Rung("1", "SELECT 1 (round trip floor)", make=step_sql("SELECT 1")),
    Rung("1b", "1 + a WAL record and its commit flush", make=step_sql(COMMIT_FLOOR)),
    Rung("2", "UPDATE t SET n = n + 1 WHERE id = $1 (baseline)", table="t", make=step_update_t),
    Rung("3", "fused cycle: subtask_claim completing the previous", table="subtasks", make=step_claim(fused=True)),
    Rung("4", "claim alone: subtask_claim, done_id NULL", table="subtasks", make=step_claim(fused=False)),
    Rung("5", "bare update by id: ready -> running, owner, lease", table="subtasks",
         make=step_subtask(BARE_UPDATE)),
    Rung("6", "5 without the subtasks_on_update trigger", NO_TRIGGER, "subtasks", step_subtask(BARE_UPDATE)),
    Rung("7a", "6 without foreign keys (to and from subtasks)", NO_FKS, "subtasks", step_subtask(BARE_UPDATE)),
    Rung("7", "6 without foreign keys and check constraints", BARE, "subtasks", step_subtask(BARE_UPDATE)),
    Rung("8", "7 without secondary indexes (primary key only)", BARER, "subtasks", step_subtask(BARE_UPDATE)),
    Rung("9", "8, update of no indexed column (version + 1)", BARER, "subtasks", step_subtask(HOT_UPDATE)),
    Rung("10", "events INSERT alone (the trigger's row)", make=step_subtask(EVENT_INSERT)),
]


# -- databases -----------------------------------------------------------------------------------------------


def build_template(server: harness.PgServer, *, rows: int) -> tuple[str, Ctx]:
    """The claim benchmark's Mergebot template with ``rows`` ready subtasks, plus one agent and the table t; its URL."""
    url = build_mergebot_template(server, ready=rows, history=0)
    with psycopg.connect(url, autocommit=True) as conn:
        agent = conn.execute("INSERT INTO agents (name, role, token_hash) VALUES ('cost', 'agent', %s) "
                             "RETURNING id", (auth.hash_token(auth.new_token()),)).fetchone()
        first = conn.execute("SELECT min(id), count(*) FROM subtasks WHERE status = 'ready'").fetchone()
        assert agent is not None and first is not None and first[1] >= rows
        conn.execute("CREATE TABLE t (id bigint PRIMARY KEY, n bigint NOT NULL DEFAULT 0)")
        conn.execute("INSERT INTO t (id) SELECT g FROM generate_series(1, %s) g", (rows,))
        conn.execute("VACUUM (FREEZE, ANALYZE)")
    return url, Ctx(agent_id=agent[0], first_subtask=first[0], first_t=1)


def alter(conn: psycopg.Connection[Any], what: str) -> int:
    """Apply one of a rung's removals to subtasks; returns how many objects it removed."""
    if what == "no_trigger":
        conn.execute("ALTER TABLE subtasks DISABLE TRIGGER subtasks_on_update")
        return 1
    if what in ("no_fks", "no_checks"):  # foreign keys from and to subtasks; its check constraints
        where = ("(c.conrelid = 'subtasks'::regclass OR c.confrelid = 'subtasks'::regclass) AND c.contype = 'f'"
                 if what == "no_fks" else "c.conrelid = 'subtasks'::regclass AND c.contype = 'c'")
        rows = conn.execute(
            sql.SQL("SELECT n.nspname, r.relname, c.conname FROM pg_constraint c "
                    "JOIN pg_class r ON r.oid = c.conrelid JOIN pg_namespace n ON n.oid = r.relnamespace "
                    "WHERE {} ORDER BY 1, 2, 3").format(sql.SQL(where))).fetchall()
        for nsp, rel, con in rows:
            conn.execute(sql.SQL("ALTER TABLE {}.{} DROP CONSTRAINT {}").format(
                sql.Identifier(nsp), sql.Identifier(rel), sql.Identifier(con)))
        return len(rows)
    if what == "no_indexes":
        rows = conn.execute(
            "SELECT n.nspname, c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE i.indrelid = 'subtasks'::regclass AND NOT i.indisprimary ORDER BY 2").fetchall()
        for nsp, idx in rows:
            conn.execute(sql.SQL("DROP INDEX {}.{}").format(sql.Identifier(nsp), sql.Identifier(idx)))
        return len(rows)
    raise ValueError(what)


def table_stats(conn: psycopg.Connection[Any]) -> dict[str, tuple[int, int, int]]:
    """{table: (n_tup_ins, n_tup_upd, n_tup_hot_upd)}, this session's counts flushed first."""
    with contextlib.suppress(psycopg.Error):
        conn.execute("SELECT pg_stat_force_next_flush()")  # flushed when the session goes idle, i.e. now
    conn.execute("SELECT pg_stat_clear_snapshot()")
    rows = conn.execute("SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables").fetchall()
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


def may_emit(url: str) -> bool:
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(COMMIT_FLOOR)
    except psycopg.Error:
        return False
    return True
