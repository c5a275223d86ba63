"""A landing's provenance where people read it (issue 44): the landing predicate's JSON schema holds every statement
the landing step makes, the landed page and the API show whether the landing statement verifies and by which key
(and why not, after tampering), and the outside verifier's script in docs/attestations.md checks a real statement
with securesystemslib alone. Real server, git and PostgreSQL for the landing."""

from __future__ import annotations

import base64
import copy
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import jsonschema

from mergebot import agent
from mergebot.attest import keys, notes, statement
from mergebot.attest.envelope import IN_TOTO, seal
from mergebot.db.database import Database
from mergebot.git import notes as git_notes
from mergebot.landing.main.repos import repos_root
from tests.support.bot import Fleet, commit, until

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((resources.files("mergebot.attest") / "schema" / "landing-v1.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def facts(**kw: Any) -> statement.Facts:
    base: dict[str, Any] = dict(
        repo="demo", target_ref="refs/heads/main", since="0" * 40, sequence=1, before="b" * 40, after="a" * 40,
        tree="c" * 40, moved_to="a" * 40, verified="a" * 40, candidate_id=7, candidate_sha="d" * 40,
        branch="mb/3/1", subtask_id=3, claim_version=1, owner="ann", pushed_by="ann", outcome="pass",
        checks=(statement.Check("check", "pytest -q", True, "pass", 1200, "e" * 64),), config_digest="f" * 64,
        sandbox="bwrap", limits="memory=cgroup procs=rlimit", tests={"t.py::ok": "passed"}, tests_source="pytest",
        log_digest="e" * 64, timings={"signedAt": keys.now()})
    return statement.Facts(**{**base, **kw})


def test_the_schema_holds_every_statement_the_landing_step_makes() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    stamp = "2026-12-07T01:02:03.000004+00:00"
    every_outcome = {"a::p": "passed", "a::f": "failed", "a::e": "error", "a::s": "skipped", "a::x": "xfailed",
                     "a::xp": "xpassed", "a::d": "deselected"}
    cases = {
        "one check": facts(),
        "no tests reported": facts(tests={}, tests_source=""),
        "named checks": facts(checks=(statement.Check("unit", "pytest -q tests", True, "pass", 900, ""),
                                      statement.Check("lint", "ruff check .", False, "fail", 80, "")),
                              tests=every_outcome, outcome="flaky"),
        "acceptance and held-out": facts(acceptance={"result": "pass", "files": 2, "digest": "1" * 64},
                                         held_out={"result": "pass", "digest": "2" * 64},
                                         allowed={"testRemoval": True, "checkChanges": False,
                                                  "behaviourChange": False},
                                         approved_by=("lead", "rita"), policy="strict", merge_kind="squash",
                                         timings={"pushedAt": stamp, "queuedAt": stamp, "mergedAt": None,
                                                  "verifiedMs": 1234, "signedAt": stamp}),
        "failed acceptance, held-out without files": facts(acceptance={"result": "fail", "files": 1, "digest": None},
                                                           held_out={"result": "fail", "digest": None}),
        "sha-256 repository": facts(since="0" * 64, before="b" * 64, after="a" * 64, tree="c" * 64,
                                    moved_to="a" * 64, verified="a" * 64, candidate_sha="d" * 64),
    }
    batch = [facts(sequence=4 + i, before=str(i) * 40, after=str(i + 1) * 40, moved_to="3" * 40, verified="3" * 40,
                   batch_size=3, batch_position=i + 1) for i in range(3)]
    cases.update({f"batch member {f.batch_position}": f for f in batch})
    for name, f in cases.items():
        made = statement.landing(f)
        errors = [e.message for e in VALIDATOR.iter_errors(made)]
        assert not errors, (name, errors)
        assert statement.landing(f)["predicate"].keys() == SCHEMA["$defs"]["landing"]["properties"].keys(), name
    # every field is described, every object says which fields it requires
    def described(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for key, sub in (node.get("properties") or {}).items():
                assert "description" in sub or "$ref" in sub or "const" in sub, f"{path}.{key} is not described"
                described(sub, f"{path}.{key}")
            if node.get("type") == "object" and "properties" in node:
                assert set(node.get("required", ())) <= set(node["properties"]), path
            for key in ("items", "oneOf", "$defs"):
                for sub in (node.get(key) or {}).values() if key == "$defs" else (
                        node.get(key) if isinstance(node.get(key), list) else [node.get(key)]):
                    described(sub, f"{path}/{key}")
    described(SCHEMA, "statement")


def test_a_statement_missing_or_adding_a_field_fails_the_schema() -> None:
    made = statement.landing(facts(acceptance={"result": "pass", "files": 1, "digest": "1" * 64}))
    assert VALIDATOR.is_valid(made)
    for path in (("predicate", "main"), ("predicate", "sequence"), ("predicate", "tests", "notPassedCount"),
                 ("predicate", "main", "before"), ("predicate", "timings", "signedAt"),
                 ("predicate", "acceptance", "digest"), ("subject",)):
        broken = copy.deepcopy(made)
        node = broken
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
        assert not VALIDATOR.is_valid(broken), path
    for change in ({"predicate": {**made["predicate"], "secretSauce": 1}},  # a field nobody documented
                   {"predicate": {**made["predicate"], "sequence": 0}},
                   {"predicate": {**made["predicate"], "verdict": "fail"}},  # a failed run never lands
                   {"predicate": {**made["predicate"], "timings": {"signedAt": "yesterday"}}},
                   {"subject": made["subject"] * 2}, {"predicateType": statement.TEST_RESULT}):
        assert not VALIDATOR.is_valid({**made, **change}), change


# -- the outside verifier's script, as docs/attestations.md gives it ---------------------------------------------


def outside_verifier() -> str:
    doc = (ROOT / "docs" / "attestations.md").read_text()
    found = re.search(r"<!-- outside-verifier:[^>]*-->\n```python\n(.*?)```", doc, re.S)
    assert found, "docs/attestations.md lost its outside verifier's script"
    return found.group(1)


def run_outside(tmp: Path, sha: str, note: str, trust: str) -> subprocess.CompletedProcess[str]:
    (tmp / "verify_landing.py").write_text(outside_verifier())
    (tmp / "note.json").write_text(note)
    (tmp / "trust.json").write_text(trust)
    # -I: isolated, neither this checkout nor PYTHONPATH on the path; only what is installed (securesystemslib)
    return subprocess.run([sys.executable, "-I", "verify_landing.py", sha, "note.json", "trust.json"], cwd=tmp,
                          capture_output=True, text=True, check=False)


def test_the_documented_outside_verifier_checks_a_statement_with_the_library_alone(tmp_path: Path) -> None:
    script = outside_verifier()
    assert not re.search(r"^\s*(from|import) mergebot", script, re.M)
    signer = keys.signer(tmp_path / "data")
    trust = keys.trust_path(tmp_path / "data").read_text()
    f = facts(tests={"t::ok": "passed", "t::skip": "skipped"}, sequence=5)
    note = notes.text([seal(statement.landing(f), IN_TOTO, signer), seal(statement.test_result(f), IN_TOTO, signer)])
    (tmp_path / "ok").mkdir()
    ok = run_outside(tmp_path / "ok", f.after, note, trust)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == (f"landing 5 of demo: main {f.before} -> {f.after}, 1 test(s) passed, 1 did not, "
                                 f"signed by {signer.public_key.keyid[:16]}")

    data = json.loads(note)  # a skipped test moved into the passed ones: the signature no longer holds
    moved = json.loads(base64.b64decode(data["statements"][0]["payload"]))
    moved["predicate"]["tests"].update(passed=2, notPassed=[], notPassedCount=0)
    data["statements"][0]["payload"] = base64.b64encode(statement_bytes(moved)).decode()
    (tmp_path / "forged").mkdir()
    forged = run_outside(tmp_path / "forged", f.after, json.dumps(data), trust)
    assert forged.returncode != 0 and "VerificationError" in forged.stderr, forged.stdout
    (tmp_path / "other").mkdir()  # the right statement shown for another commit
    other = run_outside(tmp_path / "other", "9" * 40, note, trust)
    assert other.returncode != 0 and "a statement of another commit" in other.stderr
    (tmp_path / "stranger").mkdir()  # a trust file of another key
    strange = run_outside(tmp_path / "stranger", f.after, note, keys.trust_path(
        keys.signer(tmp_path / "elsewhere") and tmp_path / "elsewhere").read_text())
    assert strange.returncode != 0 and "VerificationError" in strange.stderr


def statement_bytes(data: dict[str, Any]) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


# -- one real landing: its statement, its page, its API ------------------------------------------------------


@contextmanager
def logged_in(fleet: Fleet, who: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=fleet.bot.url, timeout=30) as web:
        r = web.post("/login", data={"token": fleet.tokens[who], "next": "/ui/landed"},
                     headers={"Origin": fleet.bot.url})
        assert r.status_code == 303, r.text
        yield web


async def test_the_landed_page_and_the_api_show_whether_the_statement_verifies(fleet: Fleet, tmp_path: Path,
                                                                                  e2e_db: Database) -> None:
    db = fleet.db
    await db.subtasks.create_subtask(actor_id=None, title="one change")
    _, wt = fleet.start("ann")
    commit(wt, {"one.txt": "one\n"})
    assert agent.push(fleet.client("ann"), wt, wait=60, progress=False)["status"] == "landed"
    landed = (await db.landing.landed(repo="demo"))[0]
    sha, data = landed.merged_sha, fleet.bot.data_dir
    bare = repos_root(data) / "demo.git"

    async def noted() -> bool:
        return git_notes.read(bare, sha) is not None

    await until(noted, timeout=30)
    trust = keys.read_trust(keys.trust_path(data / "attest").read_text())
    keyid = trust.keys[0].keyid

    # the real statement holds to the schema, and the documented script verifies it from the note
    rows = await db.attest.of_landed(landed.id, "demo", sha)
    [row] = [r for r in rows if r["kind"] == "landing"]
    real = json.loads(base64.b64decode(row["envelope"]["payload"]))
    assert not [e.message for e in VALIDATOR.iter_errors(real)]
    assert real["predicate"]["main"] == {"before": landed.base_sha, "after": sha, "movedTo": sha}
    outside = run_outside(tmp_path, sha, str(git_notes.read(bare, sha)), keys.trust_path(data / "attest").read_text())
    assert outside.returncode == 0 and outside.stdout.startswith("landing 1 of demo:"), outside.stderr

    with logged_in(fleet, "rita") as web:  # a reviewer
        page = web.get(f"/ui/landed/{landed.id}").text
        section = page[page.index('<section id="provenance">'):page.index("</section>", page.index('id="provenance"'))]
        assert '<span class="badge good">verifies</span>' in section
        assert f'<code title="{keyid}">{keyid[:16]}</code>' in section
        assert 'id="provenance-sequence">1<' in section
        assert f'title="{landed.base_sha}"' in section and f'title="{sha}"' in section
        assert f'href="/ui/landed/{landed.id}/attestations.json"' in section
        as_json = web.get(f"/ui/landed/{landed.id}/attestations.json").json()
        assert as_json["verified"] is True and as_json["keyid"] == keyid and as_json["sequence"] == 1

    for who in ("ann", "rita", "lead"):  # every role that reads landed records
        r = httpx.get(f"{fleet.bot.url}/api/v1/landed/{landed.id}/attestations",
                      headers={"Authorization": f"Bearer {fleet.tokens[who]}"}, timeout=30)
        assert r.status_code == 200, (who, r.text)
    got = r.json()
    assert got["verified"] is True and got["why"] is None and got["keyid"] == keyid and got["sequence"] == 1
    assert got["main"] == {"before": landed.base_sha, "after": sha} and got["sha"] == sha
    assert [(s["kind"], s["statement"]["predicateType"], s["signature_verifies"]) for s in got["statements"]] == [
        ("landing", statement.LANDING, True), ("test_result", statement.TEST_RESULT, True)]
    assert got["statements"][0]["envelope"] == row["envelope"] and got["statements"][0]["statement"] == real
    missing = httpx.get(f"{fleet.bot.url}/api/v1/landed/999999/attestations",
                        headers={"Authorization": f"Bearer {fleet.tokens['rita']}"}, timeout=30)
    assert missing.status_code == 404
    assert httpx.get(f"{fleet.bot.url}/api/v1/landed/{landed.id}/attestations", timeout=30).status_code == 401

    # a skipped test written into the passed ones in the database (as its owner: the bot's role cannot): named
    forged = copy.deepcopy(real)
    forged["predicate"]["tests"]["passed"] += 1
    payload = base64.b64encode(statement_bytes(forged)).decode()
    async with e2e_db.pool.connection() as conn:
        await conn.execute("UPDATE attestations SET envelope = jsonb_set(envelope, '{payload}', to_jsonb(%s::text)) "
                           "WHERE id = %s", (payload, row["id"]))
    with logged_in(fleet, "rita") as web:
        page = web.get(f"/ui/landed/{landed.id}").text
    assert '<span class="badge bad">does not verify</span>' in page
    why = re.search(r'id="provenance-why">([^<]*)<', page)
    assert why and "changed after it was signed" in why.group(1), page[page.index('id="provenance"'):][:2000]
    assert 'id="provenance-key"' not in page  # no key is named for a statement that does not hold
    r = httpx.get(f"{fleet.bot.url}/api/v1/landed/{landed.id}/attestations",
                  headers={"Authorization": f"Bearer {fleet.tokens['rita']}"}, timeout=30)
    tampered = r.json()
    assert tampered["verified"] is False and "changed after it was signed" in tampered["why"]
    assert [s["signature_verifies"] for s in tampered["statements"]] == [False, True]
    assert tampered["statements"][0]["statement"]["predicate"]["tests"]["passed"] == real["predicate"]["tests"][
        "passed"] + 1  # shown as it reads, flagged as not verifying
