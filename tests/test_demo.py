"""``mergebot demo`` shows what the README promises: each scene is checked from the records it left (landed rows,
verdicts, refusals, events and notes), never from the demo's text, and its temporary directory is gone after."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from mergebot.db.database import Database
from mergebot.demo import LEASE
from mergebot.landing.judge.told import candidate_verdict
from mergebot.models import Candidate


async def test_the_demo_plays_every_scene_for_real(e2e_db: Database, e2e_db_url: str, tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ,  # the README's first try: the defaults
           "MERGEBOT_DATABASE_URL": e2e_db_url, "TMPDIR": str(tmp)}
    out = subprocess.run([sys.executable, "-m", "mergebot", "demo"], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=600, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    # the temporary data directory and its worktrees are removed (the git CGI's empty HOME is reused by design)
    assert [p.name for p in tmp.iterdir() if not p.name.startswith("mergebot-git-home-")] == []

    db = e2e_db
    rows = await db.subtasks.list_subtasks(limit=100)
    ids = {r["title"].removeprefix("Implement "): int(r["id"]) for r in rows}
    landed = {row.subtask_id: row for row in await db.landing.landed(repo="calc")}
    assert {r["status"] for r in rows} == {"landed"} and len(landed) == 7  # six operations and the root
    # on the defaults: a window as wide as the workers, risk-aware (no landing went the serial way)
    assert all((r.policy or "").startswith("speculative") for r in landed.values()), [r.policy for r in landed.values()]

    rejected = [Candidate.from_row(r) for r in await db.landing.candidates(repo="calc", limit=200)
                if r["status"] == "rejected"]
    verdicts = {v.subtask_id: v for v in [await candidate_verdict(db, c) for c in rejected]}
    # 1. a conflict: bob's sub, rejected with the conflicting path and hunk, then landed by bob
    conflict = verdicts[ids["sub"]]
    assert conflict.kind == "conflict" and conflict.paths == ["CHANGES.md"] and conflict.hunks
    assert landed[ids["sub"]].owner == "bob"
    # 2. a failing test: cy's mul, rejected with the test named, then fixed and landed
    failed = verdicts[ids["mul"]]
    assert failed.kind == "check_failed" and failed.failing_tests == ["tests/test_mul.py::test_mul"], failed
    assert landed[ids["mul"]].owner == "cy"
    # ... and between the two, a tampering: a conftest.py that skips the failing test, refused at push time
    tampered = [e for e in await db.subtasks.events(subtask_id=ids["mul"], limit=200) if e["kind"] == "push_refused"]
    assert [(e["actor"], e["detail"]["code"]) for e in tampered] == [("cy", "check_config")], tampered
    # 3. a silent agent: zed's lease on mod lapsed, and its late push was refused as stale
    mod = ids["mod"]
    events = await db.subtasks.events(subtask_id=mod, limit=200)
    assert any(e["kind"] == "status" and (e["from_status"], e["to_status"], e["claim_version"]) == (
        "running", "ready", 1) and e["detail"].get("reason") == "lease expired" for e in events), events
    refused = [e for e in events if e["kind"] == "push_refused"]
    assert [(e["actor"], e["claim_version"], e["detail"]["code"]) for e in refused] == [("zed", 1, "stale_claim")]
    # 4. the handoff: zed's note, and ann landing mod at the next claim version
    notes = await db.subtasks.notes(subtask_id=mod)
    assert [n["author"] for n in notes if n["body"].startswith("## Handoff")] == ["zed"]
    assert (landed[mod].owner, landed[mod].claim_version) == ("ann", 2)
    # 5. a long thinker: bob held div for more than three leases with only his keeper beating, and landed it
    div = ids["div"]
    assert (landed[div].owner, landed[div].claim_version) == ("bob", 1)
    claimed = next(e["at"] for e in await db.subtasks.events(subtask_id=div, limit=200)
                   if e["kind"] == "status" and e["to_status"] == "running")
    assert isinstance(claimed, datetime) and (landed[div].landed_at - claimed).total_seconds() > 3 * LEASE
    kept = [n["body"] for n in await db.subtasks.notes(subtask_id=div) if n["body"].startswith("[keeper]")]
    assert kept and kept[-1].endswith("the subtask landed"), kept
