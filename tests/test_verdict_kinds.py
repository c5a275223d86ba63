"""Migration 0026 writes each old rejected candidate's verdict kind onto its row, as its reason's first words gave
it when read (``mergebot.landing.judge.verdicts`` before issue 42), so the kind is never read from a sentence again.
Real PostgreSQL (both servers): old rows are made by hand, the migration's own text is run on them, and each row's
kind is compared with the classification it replaces (kept here as the oracle)."""

from __future__ import annotations

import json
from typing import Any

from mergebot import messages as say
from mergebot.auth import Role
from mergebot.db.database import Database
from mergebot.db.migrate import list_migrations
from mergebot.landing.judge.verdicts import KINDS, kind_for
from mergebot.rules import Rules
from verifier.runner import Result

_FIRST_WORDS = (("conflicts with ", "conflict"), ("nothing to land", "nothing_to_land"),
                ("the verifier could not run", "verifier_error"), ("the check ", "check_failed"))


def old_kind(reason: str | None) -> str:
    """How a rejected row without a kind was classified until issue 42: by its reason's first words."""
    reason = reason or ""
    if reason.startswith("the check ") and " gave timeout" in reason:
        return "check_timeout"
    for limit in ("disk limit", "memory limit"):
        if reason.startswith("the check ") and f" reached its {limit}" in reason:
            return limit.replace(" ", "_")
    return next((k for prefix, k in _FIRST_WORDS if reason.startswith(prefix)), "check_failed")


def _run(outcome: str) -> Result:
    return Result("m" * 40, "t" * 40, "pytest -q", outcome, 1, 10, "", "E   assert 1 == 2", 0, "d" * 64,
                  limits={"disk_limit_mb": 64, "memory_mb": 256})


def _said(kind: str, outcome: str = "fail") -> str:
    return say.rejection(say.Rejection(kind, "main", "c" * 40, command="pytest -q", merged_sha="e" * 40,
                                       paths=("calc/add.py",), run=_run(outcome)))


REASONS: list[str | None] = [
    # what the queue said, kind by kind
    _said("conflict"), _said("nothing_to_land"), _said("verifier_error", "error"), _said("check_failed"),
    _said("check_timeout", "timeout"), _said("disk_limit"), _said("memory_limit"), _said("flaky_then_failed"),
    _said("no_report"),
    # the edges of the first words
    None, "", "the check", "the check gave timeout", "the check  gave timeout", "The check gave timeout",
    "conflicts with", "conflicts with main in: a.py", "nothing to land", "nothing to landing", "the verifier",
    "the verifier could not run", "the check reached its disk limit and gave timeout",
    "the check gave fail, then reached its memory limit", "the check reached its disk limitless",
    "the checker gave timeout", "x conflicts with main", "the check gave 100% _fail_ \\", "the check gave \u00e9",
]


async def _rejected_rows(db: Database, verdicts: list[Any]) -> list[int]:
    """One rejected candidate per verdict, each with its own subtask, written as an old row would be."""
    agent, _ = await db.agents.add_agent(name="old-rows", role=Role.AGENT)
    await db.repos.create_repo(name="demo", root_sha="a" * 40, rules=Rules.of(target_branch="main",
                               verifier_command="pytest", verifier_timeout_s=60, protected_paths=[],
                               max_push_bytes=1 << 20, max_file_bytes=1 << 20))
    ids = []
    for i, _ in enumerate(verdicts):
        await db.subtasks.create_subtask(actor_id=agent.id, title=f"old row {i}")
        sub = await db.subtasks.claim(agent_id=agent.id)
        assert sub is not None
        cand = await db.landing.enqueue(repo="demo", subtask_id=sub.id, claim_version=sub.claim_version,
                                        owner_id=agent.id, sha=f"{i + 1:040x}",
                                        ref=f"refs/heads/subtasks/{sub.id}/v{sub.claim_version}", superseded="newer")
        ids.append(cand.id)
    return ids


async def _set(db: Database, rows: list[tuple[int, str | None, Any]]) -> None:
    async with db.pool.connection() as conn:
        for cand_id, reason, verdict in rows:
            await conn.execute("UPDATE candidates SET status = 'rejected', reason = %s, verdict = %s::jsonb "
                               "WHERE id = %s", (reason, None if verdict is None else json.dumps(verdict), cand_id))


async def _migrate_again(db: Database) -> dict[int, tuple[str, Any]]:
    sql = next(m.sql for m in list_migrations() if m.version == 26)
    async with db.pool.connection() as conn:
        await conn.execute(sql)
        rows = await (await conn.execute("SELECT id, status::text, verdict FROM candidates")).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


async def test_old_rejections_get_the_kind_their_first_words_gave_them(db: Database) -> None:
    keep = {"paths": ["a.py"], "failing_tests": ["t::x"]}
    cases: list[tuple[str | None, Any, str]] = [(r, None, old_kind(r)) for r in REASONS]
    cases += [(r, {}, old_kind(r)) for r in REASONS[:3]]  # an empty verdict: no kind either
    cases += [(_said("conflict"), keep, "conflict"),  # the facts stay, the kind is added
              (_said("conflict"), {"kind": "no_such_kind"}, "conflict"),  # not a kind: as good as none
              (_said("conflict"), [1, 2], "conflict"), (_said("conflict"), "text", "conflict"),  # not an object
              (_said("conflict"), {"kind": "tests_weakened", **keep}, "tests_weakened")]  # recorded: kept as it is
    ids = await _rejected_rows(db, cases)
    await _set(db, [(cand_id, reason, verdict) for cand_id, (reason, verdict, _) in zip(ids, cases, strict=True)])
    after = await _migrate_again(db)
    for cand_id, (reason, verdict, want) in zip(ids, cases, strict=True):
        status, got = after[cand_id]
        assert status == "rejected" and got["kind"] == want, (reason, verdict, got)
        assert kind_for(status, got) == want  # what every door reads now
        if isinstance(verdict, dict):
            assert {k: v for k, v in got.items() if k != "kind"} == {k: v for k, v in verdict.items() if k != "kind"}
    # the real sentences come out as the kinds they were written for (the ones the first words could tell)
    told = {r: old_kind(r) for r in REASONS[:7]}
    assert list(told.values()) == ["conflict", "nothing_to_land", "verifier_error", "check_failed",
                                   "check_timeout", "disk_limit", "memory_limit"], told


async def test_only_rejections_without_a_kind_change(db: Database) -> None:
    ids = await _rejected_rows(db, [0, 1])
    async with db.pool.connection() as conn:  # one still queued, with a flaky note; one rejected with its kind
        await conn.execute("UPDATE candidates SET verdict = '{\"kind\": \"queued\", \"was_flaky\": true}' "
                           "WHERE id = %s", (ids[0],))
    await _set(db, [(ids[1], "conflicts with main in: a.py", {"kind": "check_config", "paths": ["conftest.py"]})])
    before = await _migrate_again(db)
    assert before[ids[0]] == ("queued", {"kind": "queued", "was_flaky": True})
    assert before[ids[1]] == ("rejected", {"kind": "check_config", "paths": ["conftest.py"]})
    assert await _migrate_again(db) == before  # and running it twice changes nothing
    assert all(kind in KINDS for kind in ("check_config", "queued"))
