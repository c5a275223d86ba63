"""The migrations build exactly the declared schema (``mergebot/db/schema.sql``), on every server we test on.

Two empty databases per server: one built by ``migrate`` step by step, one by running ``schema.sql`` in one
go. Their catalogs (the ``public`` schema, without the ``schema_migrations`` bookkeeping table) must agree:
relations and their storage options, columns in their order with types, defaults, collations and identity,
constraints by name, indexes, triggers, functions (their whole definition), views (their query), sequences,
types and enum labels, privileges (tables, columns, functions, types, the schema, default privileges), comments,
policies, rules, extended statistics, and every row an empty database starts with (the seeds). A second test
alters one database in many small ways and checks that each alteration shows in the snapshot, so the comparison
cannot pass vacuously.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any, LiteralString

import psycopg
import pytest
from psycopg import sql

from mergebot.db.migrate import declared_schema, list_migrations, migrate
from tests.support.pg import Server, with_db

BOOKKEEPING = "schema_migrations"

# Each entry: a section of the snapshot and the query that fills it. Every query reads only the public schema
# and leaves out the bookkeeping table (and everything that hangs off it). Rows come back sorted, so the
# snapshot does not depend on creation order, except for columns (ordinal order is observable: SELECT *,
# INSERT without a column list) and enum labels (their order is their meaning). Names count everywhere: a
# constraint or index is found, dropped and reported by its name. Privileges are compared as aclitem text (the
# owner is the same role in both databases).
_SNAPSHOT: dict[str, LiteralString] = {
    "relations": """
        SELECT c.relname, c.relkind, c.relpersistence, c.reloptions, c.relacl::text AS acl, c.relreplident,
               c.relrowsecurity, c.relforcerowsecurity
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND c.relname NOT LIKE 'schema_migrations%'
        ORDER BY c.relname""",
    "columns": """
        SELECT c.relname,
               row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum) AS position,
               a.attname, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid) AS default_expr, a.attidentity, a.attgenerated,
               a.attcollation::regcollation::text AS collation, a.attacl::text AS acl
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
          AND c.relname <> 'schema_migrations' AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY c.relname, a.attnum""",
    "constraints": """
        SELECT coalesce(c.relname, '') AS on_table, k.conname, k.contype,
               pg_get_constraintdef(k.oid, true) AS definition, k.condeferrable, k.condeferred
        FROM pg_constraint k
        JOIN pg_namespace n ON n.oid = k.connamespace
        LEFT JOIN pg_class c ON c.oid = k.conrelid
        WHERE n.nspname = 'public' AND coalesce(c.relname, '') <> 'schema_migrations'
        ORDER BY 1, 2, 4""",
    "indexes": """
        SELECT tablename, indexname, indexdef FROM pg_indexes
        WHERE schemaname = 'public' AND tablename <> 'schema_migrations'
        ORDER BY tablename, indexname""",
    "triggers": """
        SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid, true) AS definition, t.tgenabled
        FROM pg_trigger t
        JOIN pg_class c ON c.oid = t.tgrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND NOT t.tgisinternal AND c.relname <> 'schema_migrations'
        ORDER BY c.relname, t.tgname""",
    "functions": """
        SELECT p.proname, pg_get_function_identity_arguments(p.oid) AS args,
               pg_get_function_result(p.oid) AS result, l.lanname, p.prokind, p.provolatile,
               p.prosecdef, p.prosrc, p.proacl::text AS acl,
               CASE WHEN p.prokind <> 'a' THEN pg_get_functiondef(p.oid) END AS definition
        FROM pg_proc p
        JOIN pg_namespace n ON n.oid = p.pronamespace
        JOIN pg_language l ON l.oid = p.prolang
        WHERE n.nspname = 'public'
        ORDER BY 1, 2""",
    "types": """
        SELECT t.typname, t.typtype, format_type(t.typbasetype, t.typtypmod) AS base, t.typnotnull,
               t.typacl::text AS acl
        FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
        WHERE n.nspname = 'public' AND t.typrelid = 0 AND t.typcategory <> 'A'
        ORDER BY t.typname""",
    "enums": """
        SELECT t.typname, array_agg(e.enumlabel::text ORDER BY e.enumsortorder) AS labels
        FROM pg_enum e
        JOIN pg_type t ON t.oid = e.enumtypid
        JOIN pg_namespace n ON n.oid = t.typnamespace
        WHERE n.nspname = 'public'
        GROUP BY t.typname
        ORDER BY t.typname""",
    "views": """
        SELECT c.relname, pg_get_viewdef(c.oid, true) AS definition
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND c.relkind IN ('v', 'm')
        ORDER BY c.relname""",
    "sequences": """
        SELECT c.relname, format_type(s.seqtypid, NULL) AS type, s.seqstart, s.seqincrement, s.seqmin, s.seqmax,
               s.seqcache, s.seqcycle
        FROM pg_sequence s
        JOIN pg_class c ON c.oid = s.seqrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND c.relname NOT LIKE 'schema_migrations%'
        ORDER BY c.relname""",
    "privileges": """
        SELECT 'schema public' AS object, n.nspacl::text AS acl FROM pg_namespace n WHERE n.nspname = 'public'
        UNION ALL
        SELECT 'default for ' || d.defaclobjtype::text || coalesce(' in ' || n.nspname, ''), d.defaclacl::text
        FROM pg_default_acl d LEFT JOIN pg_namespace n ON n.oid = d.defaclnamespace
        ORDER BY 1, 2""",
    "comments": """
        SELECT pg_describe_object(d.classoid, d.objoid, d.objsubid) AS object, d.description
        FROM pg_description d
        WHERE d.objoid >= 16384  -- made by a user, not built in
          AND pg_describe_object(d.classoid, d.objoid, d.objsubid) NOT LIKE '%schema_migrations%'
        ORDER BY 1, 2""",
    "policies": """
        SELECT tablename, policyname, permissive, roles::text, cmd, qual, with_check FROM pg_policies
        WHERE schemaname = 'public'
        ORDER BY tablename, policyname""",
    "rules": """
        SELECT tablename, rulename, definition FROM pg_rules
        WHERE schemaname = 'public' AND tablename <> 'schema_migrations'
        ORDER BY tablename, rulename""",
    "statistics": """
        SELECT s.stxname, pg_get_statisticsobjdef(s.oid) AS definition
        FROM pg_statistic_ext s JOIN pg_namespace n ON n.oid = s.stxnamespace
        WHERE n.nspname = 'public'
        ORDER BY s.stxname""",
    "extensions": "SELECT extname FROM pg_extension ORDER BY extname",
}

# Sections an identical pair of databases may both leave empty (the schema has none of these).
MAY_BE_EMPTY = {"extensions", "comments", "policies", "rules", "statistics"}

_TABLES: LiteralString = """
    SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND c.relname <> 'schema_migrations'
    ORDER BY c.relname"""


def snapshot(conn: psycopg.Connection[Any]) -> dict[str, list[tuple[Any, ...]]]:
    """A normalized picture of the public schema and its seed data, comparable across databases."""
    snap = {name: [tuple(r) for r in conn.execute(q).fetchall()] for name, q in _SNAPSHOT.items()}
    snap["seed rows"] = _seed_rows(conn)
    return snap


def _seed_rows(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    """Every row of every table that has any, as sorted JSON text: in an empty database, the seeds."""
    found: list[tuple[Any, ...]] = []
    for (table,) in conn.execute(_TABLES).fetchall():
        query = sql.SQL("SELECT to_jsonb(t)::text FROM public.{} t ORDER BY 1").format(sql.Identifier(table))
        rows = [r[0] for r in conn.execute(query).fetchall()]
        if rows:
            found.append((table, rows))
    return found


def snapshot_of(url: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return snapshot(conn)


def apply_declared(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        conn.execute(declared_schema())  # type: ignore[arg-type]  # a trusted file, run as one script



@pytest.fixture
def empty_dbs(server: Server) -> Iterator[Callable[[], str]]:
    """Make empty databases (from template0, so nothing migrated) on the server; drop them afterwards."""
    made: list[str] = []

    def make() -> str:
        name = f"mb_mig_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
        made.append(name)
        return with_db(server.url, name)

    yield make
    for name in made:
        server.drop_db(name)


def _migration_rows(url: str) -> list[tuple[int, str]]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT version, name FROM schema_migrations ORDER BY version").fetchall()
    return [(v, n) for v, n in rows]


def _expected_rows() -> list[tuple[int, str]]:
    return [(m.version, m.name) for m in list_migrations()]


def test_migrations_build_the_declared_schema(empty_dbs: Callable[[], str]) -> None:
    migrated, declared = empty_dbs(), empty_dbs()
    assert migrate(migrated) == [m.version for m in list_migrations()]
    apply_declared(declared)
    got, want = snapshot_of(migrated), snapshot_of(declared)
    # Not vacuous: the snapshot sees the whole schema, and the bookkeeping table is left out of it.
    tables = {r[0] for r in want["relations"] if r[1] == "r"}
    assert tables >= {"agents", "groups", "assignments", "subtasks", "subtask_deps", "notes", "announcements",
                      "landed", "events", "subtask_transitions"}
    assert all(want[k] for k in want if k not in MAY_BE_EMPTY), "a section of the snapshot is empty"
    assert {r[0] for r in want["seed rows"]} >= {"subtask_transitions", "metric_totals"}
    assert BOOKKEEPING not in {r[0] for r in got["relations"]}
    for section in want:
        assert got[section] == want[section], f"migrations and schema.sql disagree on {section}"
    assert got == want


def test_migrate_twice_applies_nothing_the_second_time(empty_dbs: Callable[[], str]) -> None:
    url = empty_dbs()
    assert migrate(url) == [m.version for m in list_migrations()]
    before = snapshot_of(url)
    assert migrate(url) == []
    assert _migration_rows(url) == _expected_rows()
    assert snapshot_of(url) == before


def test_concurrent_migrate_applies_each_migration_once(empty_dbs: Callable[[], str]) -> None:
    url = empty_dbs()
    n = 8
    barrier = threading.Barrier(n)
    applied: list[list[int]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run() -> None:
        try:
            barrier.wait(timeout=30)
            got = migrate(url)
            with lock:
                applied.append(got)
        except BaseException as e:
            with lock:
                errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "migrate hung"
    assert errors == []
    versions = [m.version for m in list_migrations()]
    assert len(applied) == n
    # Exactly one caller applied everything (the first to take the lock); the rest found nothing to do.
    assert sorted(v for got in applied for v in got) == versions
    assert sum(1 for got in applied if got) == 1
    assert _migration_rows(url) == _expected_rows()
    declared = empty_dbs()
    apply_declared(declared)
    assert snapshot_of(url) == snapshot_of(declared)


# Each alteration must show in the snapshot: if one did not, the equality test above could miss that kind of
# drift. They run in a transaction that is rolled back, on one migrated database.
ALTERATIONS: dict[str, LiteralString] = {
    "add column": "ALTER TABLE agents ADD COLUMN extra integer",
    "column type": "ALTER TABLE landed ALTER COLUMN duration_ms TYPE bigint",
    "nullability": "ALTER TABLE agents ALTER COLUMN revoked_at SET NOT NULL",
    "default": "ALTER TABLE groups ALTER COLUMN description SET DEFAULT 'x'",
    "drop default": "ALTER TABLE events ALTER COLUMN at DROP DEFAULT",
    "identity": "ALTER TABLE notes ALTER COLUMN id DROP IDENTITY",
    "drop check": "ALTER TABLE subtasks DROP CONSTRAINT lease_iff_running",
    "change check": (
        "ALTER TABLE subtasks DROP CONSTRAINT subtasks_max_attempts_check, "
        "ADD CONSTRAINT subtasks_max_attempts_check CHECK (max_attempts BETWEEN 1 AND 50)"
    ),
    "drop unique": "ALTER TABLE landed DROP CONSTRAINT landed_repo_merged_sha_key",
    "drop index": "DROP INDEX subtasks_lease",
    "change index": (
        "DROP INDEX subtasks_ready_any; "
        "CREATE INDEX subtasks_ready_any ON subtasks (priority, id) WHERE status = 'ready'"
    ),
    "add index": "CREATE INDEX notes_created ON notes (created_at)",
    "drop trigger": "DROP TRIGGER subtask_deps_acyclic ON subtask_deps",
    "change trigger": (
        "DROP TRIGGER subtasks_on_update ON subtasks; CREATE TRIGGER subtasks_on_update BEFORE INSERT OR UPDATE "
        "ON subtasks FOR EACH ROW EXECUTE FUNCTION subtasks_on_update()"
    ),
    "function body": (
        "CREATE OR REPLACE FUNCTION events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ "
        "BEGIN RAISE EXCEPTION 'events are append-only' USING ERRCODE = 'MB002'; END $$"
    ),
    "add function": "CREATE FUNCTION one() RETURNS integer LANGUAGE sql AS 'SELECT 1'",
    "enum label": "ALTER TYPE agent_role ADD VALUE 'guest'",
    "enum order": "ALTER TYPE agent_role ADD VALUE 'guest' BEFORE 'admin'",
    "enum rename": "ALTER TYPE subtask_status RENAME VALUE 'landed' TO 'merged'",
    "domain": "CREATE DOMAIN sha AS text CHECK (VALUE ~ '^[0-9a-f]{40}$')",
    "view": "CREATE VIEW ready AS SELECT id FROM subtasks WHERE status = 'ready'",
    "unlogged": "ALTER TABLE announcements SET UNLOGGED",
    "seed row gone": "DELETE FROM subtask_transitions WHERE from_status = 'failed' AND to_status = 'blocked'",
    "seed row added": "INSERT INTO subtask_transitions VALUES ('landed', 'ready')",
    "other seed row": "UPDATE metric_totals SET n = 1",
    "row in an empty table": "INSERT INTO groups (name) VALUES ('g')",
    "column order": "ALTER TABLE groups DROP COLUMN open, ADD COLUMN open boolean NOT NULL DEFAULT false",
    "constraint name": (
        "ALTER TABLE landed RENAME CONSTRAINT landed_once_per_claim TO landed_subtask_id_claim_version_key"
    ),
    "deferrable": "ALTER TABLE notes ALTER CONSTRAINT notes_author_id_fkey DEFERRABLE",
    "foreign key action": (
        "ALTER TABLE notes DROP CONSTRAINT notes_subtask_id_fkey, ADD CONSTRAINT notes_subtask_id_fkey "
        "FOREIGN KEY (subtask_id) REFERENCES subtasks (id) ON DELETE CASCADE"
    ),
    "collation": "ALTER TABLE reconcile_findings ALTER COLUMN kind TYPE text COLLATE \"C\"",
    "trigger disabled": "ALTER TABLE events DISABLE TRIGGER events_append_only",
    "view body": (
        "DO $$ BEGIN EXECUTE 'CREATE OR REPLACE VIEW run_charges AS ' "
        "|| rtrim(pg_get_viewdef('run_charges'::regclass), ';') || ' LIMIT 1'; END $$"
    ),
    "function parallel": "ALTER FUNCTION footprint_prefixes(text[]) PARALLEL UNSAFE",
    "function strict": "ALTER FUNCTION metric_below(float8) STRICT",
    "function setting": "ALTER FUNCTION claim_free(text, boolean) SET search_path = public",
    "sequence": "ALTER TABLE notes ALTER COLUMN id SET INCREMENT BY 2",
    "storage parameter": "ALTER TABLE subtasks SET (fillfactor = 80)",
    "replica identity": "ALTER TABLE events REPLICA IDENTITY FULL",
    "row security": "ALTER TABLE notes ENABLE ROW LEVEL SECURITY",
    "policy": "CREATE POLICY everyone ON notes USING (true)",
    "rule": "CREATE RULE keep_notes AS ON DELETE TO notes DO INSTEAD NOTHING",
    "statistics": "CREATE STATISTICS subtasks_group_status ON group_name, status FROM subtasks",
    "comment": "COMMENT ON TABLE agents IS 'who may act'",
    "table grant": "GRANT SELECT ON agents TO PUBLIC",
    "column grant": "GRANT UPDATE (main_status) ON landed TO PUBLIC",
    "function grant": "REVOKE EXECUTE ON FUNCTION refusal_reason(text, jsonb) FROM PUBLIC",
    "type grant": "REVOKE USAGE ON TYPE agent_role FROM PUBLIC",
    "schema grant": "REVOKE USAGE ON SCHEMA public FROM PUBLIC",
    "default privileges": "ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO PUBLIC",
}


def test_snapshot_sees_every_kind_of_drift(server: Server) -> None:
    db = server.fresh_db()  # a copy of the migrated template
    try:
        with psycopg.connect(with_db(server.url, db), autocommit=True) as conn:
            base = snapshot(conn)
            unchanged = []
            for label, ddl in ALTERATIONS.items():
                with conn.transaction(force_rollback=True):
                    conn.execute(ddl)
                    if snapshot(conn) == base:
                        unchanged.append(label)
            assert unchanged == [], f"the snapshot does not notice: {unchanged}"
            assert snapshot(conn) == base  # everything was rolled back
            # Changes to the bookkeeping table alone are not schema drift.
            with conn.transaction(force_rollback=True):
                conn.execute("ALTER TABLE schema_migrations ADD COLUMN note text")
                assert snapshot(conn) == base
    finally:
        server.drop_db(db)
