"""Signed landing statements (issue 44): every landing through real pushes gets an in-toto landing statement and a
test result in DSSE envelopes, signed with the data directory's key, kept with the landed rows and in the bare
repository's ``refs/notes/mergebot``; ``mergebot attest verify`` checks main's history against them on the server
and from a plain clone, and names each tampering. Real server, git, PostgreSQL; the envelopes are
securesystemslib's, opened here with the library alone where an outside verifier would."""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as hs
from securesystemslib.dsse import Envelope
from securesystemslib.signer import CryptoSigner, SSlibKey

from mergebot.attest import chain, keys, notes, statement
from mergebot.attest.envelope import IN_TOTO, Untrusted, open_envelope, seal
from mergebot.git import notes as git_notes
from mergebot.landing.main import audit
from mergebot.landing.main.repos import set_rules
from mergebot.rules import RulesChange
from tests.support.bot import Fleet, commit, git, stop_keepers, until
from tests.test_verifier import Repo
from verifier.outcomes import unpack
from verifier.runner import run_check
from verifier.spec import CheckSpec

# -- the statements alone ------------------------------------------------------------------------------------


def facts(tests: dict[str, str], sha: str = "a" * 40, before: str = "b" * 40, sequence: int = 1) -> statement.Facts:
    return statement.Facts(
        repo="demo", target_ref="refs/heads/main", since="0" * 40, sequence=sequence, before=before, after=sha,
        tree="c" * 40, moved_to=sha, verified=sha, candidate_id=1, candidate_sha="d" * 40, branch="mb/1/1",
        subtask_id=1, claim_version=1, owner="ann", pushed_by="ann", outcome="pass",
        checks=(statement.Check("check", "pytest -q", True, "pass", 10, "e" * 64),), config_digest="f" * 64,
        sandbox="bwrap", limits="memory=cgroup", tests=tests, tests_source="pytest", log_digest="e" * 64,
        timings={"signedAt": keys.now()})


OUTCOME = hs.sampled_from(["passed", "failed", "error", "skipped", "xfailed", "xpassed", "deselected"])


@given(hs.dictionaries(hs.text("abcdef:/_.", min_size=1, max_size=12), OUTCOME, max_size=30))
def test_a_statement_never_reports_a_pass_when_a_test_was_skipped_or_failed(tests: dict[str, str]) -> None:
    f = facts(tests)
    land, result = statement.landing(f), statement.test_result(f)
    not_passing = {t for t, o in tests.items() if o not in ("passed", "xfailed")}
    named = {n["id"] for n in land["predicate"]["tests"]["notPassed"]}
    assert named == not_passing and land["predicate"]["tests"]["notPassedCount"] == len(not_passing)
    assert not not_passing & set(result["predicate"]["passedTests"])  # a skipped or failed test is never passed
    assert land["predicate"]["tests"]["passed"] == len(tests) - len(not_passing)
    if not_passing:
        assert not statement.reports_pass(land) and not statement.reports_pass(result)
        assert result["predicate"]["result"] in ("WARNED", "FAILED")
    if any(o in ("failed", "error", "xpassed") for o in tests.values()):
        assert result["predicate"]["result"] == "FAILED"


def test_a_skips_message_reaches_the_statement_from_a_real_pytest_run(tmp_path: Path) -> None:
    """The verifier's pytest plugin reports why each test was skipped or expected to fail (bounded), so the
    statement names a skipped test with its reason, never among the passed."""
    repo = Repo(tmp_path / "src.git")
    sha = repo.commit({"tests/test_s.py": (b"import pytest\n\n\ndef test_ok():\n    pass\n\n\n"
                                           b"@pytest.mark.skip(reason='needs a GPU')\ndef test_gpu():\n    pass\n\n\n"
                                           b"@pytest.mark.xfail(reason='bug 7')\ndef test_bug():\n    assert 0\n\n\n"
                                           b"def test_long():\n    pytest.skip('x' * 5000)\n")})
    result = run_check(repo.path, sha, CheckSpec(f"{sys.executable} -m pytest -q -p no:cacheprovider tests", 60),
                       slot=tmp_path / "slot", sandbox="none")
    got = unpack(result.tests)
    assert got.tests == {"tests/test_s.py::test_ok": "passed", "tests/test_s.py::test_gpu": "skipped",
                         "tests/test_s.py::test_bug": "xfailed", "tests/test_s.py::test_long": "skipped"}, got
    assert got.reasons["tests/test_s.py::test_gpu"] == "Skipped: needs a GPU"
    assert got.reasons["tests/test_s.py::test_bug"] == "bug 7" and len(got.reasons["tests/test_s.py::test_long"]) == 200
    summary = statement.landing(dataclasses.replace(facts(got.tests), reasons=got.reasons))["predicate"]["tests"]
    assert {"id": "tests/test_s.py::test_gpu", "outcome": "skipped", "reason": "Skipped: needs a GPU"} in \
        summary["notPassed"]
    assert summary["passed"] == 2 and summary["notPassedCount"] == 2  # an xfail that failed counts as a pass


@pytest.fixture
def key_dir(tmp_path: Path) -> Path:
    keys.signer(tmp_path / "attest")
    return tmp_path / "attest"


def sealed(key_dir: Path, **kw: Any) -> dict[str, Any]:
    return seal(statement.landing(facts({"t::ok": "passed", "t::skip": "skipped"}, **kw)), IN_TOTO,
                keys.signer(key_dir))


def trust_of(key_dir: Path) -> keys.Trust:
    return keys.read_trust(keys.trust_path(key_dir).read_text())


def test_the_key_is_private_and_the_trust_file_names_it(key_dir: Path) -> None:
    key = keys.key_path(key_dir)
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    trust = trust_of(key_dir)
    assert [k.keyid for k in trust.keys] == [keys.signer(key_dir).public_key.keyid] and trust.version == 1
    assert keys.signer(key_dir).public_key.keyid == trust.keys[0].keyid  # made once, read after


def test_tampering_with_an_envelope_is_named(key_dir: Path) -> None:
    trust = trust_of(key_dir)
    trusted = [k.key() for k in trust.keys]
    env = sealed(key_dir)
    opened, keyid = open_envelope(env, trusted, IN_TOTO)
    assert opened["predicate"]["sequence"] == 1 and keyid == trust.keys[0].keyid

    flipped = copy.deepcopy(env)  # a flipped byte in the payload
    raw = bytearray(base64.b64decode(flipped["payload"]))
    raw[len(raw) // 2] ^= 0x01
    flipped["payload"] = base64.b64encode(bytes(raw)).decode()
    with pytest.raises(Untrusted, match="changed after it was signed"):
        open_envelope(flipped, trusted, IN_TOTO)

    retyped = {**env, "payloadType": "application/json"}  # a changed payloadType: refused, and it breaks the PAE
    with pytest.raises(Untrusted, match="payloadType"):
        open_envelope(retyped, trusted, IN_TOTO)
    with pytest.raises(Untrusted, match="changed after it was signed"):
        open_envelope(retyped, trusted, "application/json")

    moved = json.loads(base64.b64decode(env["payload"]))  # a skipped test moved into the passed ones
    moved["predicate"]["tests"]["notPassed"], moved["predicate"]["tests"]["passed"] = [], 2
    forged = {**env, "payload": base64.b64encode(json.dumps(moved).encode()).decode()}
    with pytest.raises(Untrusted, match="changed after it was signed"):
        open_envelope(forged, trusted, IN_TOTO)

    stranger = CryptoSigner.generate_ed25519()  # a key the trust file does not list
    with pytest.raises(Untrusted, match="does not list"):
        open_envelope(seal(json.loads(base64.b64decode(env["payload"])), IN_TOTO, stranger), trusted, IN_TOTO)

    # an outside verifier needs nothing of ours: securesystemslib alone opens it with the trust file's key
    public = SSlibKey.from_dict(trust.keys[0].keyid, {"keytype": "ed25519", "scheme": "ed25519",
                                                       "keyval": {"public": trust.keys[0].public}})
    outside = Envelope.from_dict(copy.deepcopy(env))
    assert list(outside.verify([public], 1)) == [trust.keys[0].keyid]
    assert json.loads(outside.payload)["predicateType"] == statement.LANDING


def test_the_chain_names_a_swapped_subject_a_replay_and_a_commit_without_a_statement(key_dir: Path) -> None:
    trust = trust_of(key_dir)
    root, a, b, c = "0" * 40, "a" * 40, "b" * 40, "c" * 40
    history = [(c, b), (b, a), (a, root), (root, None)]
    good = {a: notes.text([sealed(key_dir, sha=a, before=root, sequence=1)]),
            b: notes.text([sealed(key_dir, sha=b, before=a, sequence=2)]),
            c: notes.text([sealed(key_dir, sha=c, before=b, sequence=3)])}
    report = chain.verify(history, good, trust)
    assert report.ok and report.checked == 3 and report.head_sequence == 3 and report.since == root

    swapped = {**good, b: good[c]}  # c's statement on b: another commit's
    assert next(f.why for f in chain.verify(history, swapped, trust).findings if f.sha == b).startswith(
        "the statement is about cccccccccccc")
    replayed = {**good, c: notes.text([sealed(key_dir, sha=c, before=b, sequence=1)])}  # an older number
    assert "not before the next one's" in chain.verify(history, replayed, trust).findings[0].why
    bare = {k: v for k, v in good.items() if k != b}  # main moved without the bot
    assert "no landing statement" in chain.verify(history, bare, trust).findings[0].why
    # a verifier that accepted c finds main moved back to b
    back = chain.verify(history[1:], good, trust, accepted=(c, 3))
    assert "no longer on main" in back.findings[0].why

    # a landing that fast-forwarded a branch of two commits (c1, then c2 on it) carries c1: main moved b -> c2
    c1, c2 = "1" * 40, "2" * 40
    forwarded = [(c2, c1), (c1, b), (b, a), (a, root), (root, None)]
    ff = {**good, c2: notes.text([sealed(key_dir, sha=c2, before=b, sequence=3)])}
    report = chain.verify(forwarded, ff, trust)
    assert report.ok and report.checked == 4, report.findings
    assert audit.unexplained(forwarded[:2], {c2: json.loads(ff[c2])["statements"][0]}, trust, "demo", b) == []
    stray = [(c2, c1), (c1, b), (b, a), (a, root), (root, None)]  # a statement whose main-before is not below it
    wrong = {**good, c2: notes.text([sealed(key_dir, sha=c2, before="9" * 40, sequence=3)])}
    assert "but the commit's parent is" in chain.verify(stray, wrong, trust).findings[0].why

    other = keys.signer(key_dir / "elsewhere")  # a statement by a key the trust file does not list
    foreign = {**good, c: notes.text([seal(statement.landing(facts({}, sha=c, before=b, sequence=3)), IN_TOTO,
                                           other)])}
    assert "does not list" in chain.verify(history, foreign, trust).findings[0].why


def test_a_trust_file_changes_only_by_a_key_it_replaces(key_dir: Path) -> None:
    text = keys.trust_path(key_dir).read_text()
    first = keys.read_trust(text)
    old, new = keys.signer(key_dir), CryptoSigner.generate_ed25519()
    rotated = keys.rotated(text, old, new)
    trust = keys.read_trust(rotated, pinned=(first.root, 1))
    assert trust.version == 2 and {k.keyid for k in trust.keys} == {old.public_key.keyid, new.public_key.keyid}
    assert trust.key(old.public_key.keyid).valid_until is not None  # the replaced key ends when the new one starts

    # a version signed by the key it adds, not one it replaces
    data = json.loads(rotated)
    payload = json.loads(base64.b64decode(data["versions"][1]["payload"]))
    data["versions"][1] = seal(payload, keys.TRUST_TYPE, new)
    with pytest.raises(Untrusted, match="not signed by a key it replaces"):
        keys.read_trust(json.dumps(data))
    # a whole new trust file, self-signed by an attacker's key: not an extension of the one accepted
    (key_dir / "evil").mkdir()
    evil = keys.trust_path(keys.signer(key_dir / "evil") and key_dir / "evil").read_text()
    with pytest.raises(Untrusted, match="does not extend"):
        keys.read_trust(evil, pinned=(first.root, 1))


# -- through real pushes ---------------------------------------------------------------------------------------


def attest(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mergebot", "attest", "verify", *args], env=env,
                          capture_output=True, text=True, check=False)


async def test_twenty_landings_are_proven_on_the_server_and_from_a_plain_clone(fleet: Fleet, tmp_path: Path) -> None:
    db, data = fleet.db, fleet.bot.data_dir
    # a check of no time, so the 20 landings cost the suite little (what statements say of tests: the tests above)
    await set_rules(db, "demo", RulesChange.of(verifier_command="true"))
    for i in range(20):
        await db.subtasks.create_subtask(actor_id=None, title=f"step {i}")
    env = {**os.environ, "MERGEBOT_DATABASE_URL": fleet.bot.db_url, "MERGEBOT_DATA_DIR": str(data)}
    first_key = keys.signer(data / "attest").public_key.keyid
    for round_ in range(10):  # two agents at a time: the window may land them one by one or together
        if round_ == 5:  # halfway, the key is rotated under the running server: it signs with the new one at once
            rotated = subprocess.run([sys.executable, "-m", "mergebot", "attest", "rotate", "--json"], env=env,
                                     capture_output=True, text=True, check=False)
            assert rotated.returncode == 0, rotated.stderr
            assert json.loads(rotated.stdout)["version"] == 2
        pushed = []
        for who in ("ann", "bob"):
            claim, wt = fleet.start(who, f"{who}{round_}")
            commit(wt, {f"{who}_{round_}.txt": f"{who} {round_}\n"})
            git(["push", "-q", "origin", f"HEAD:refs/heads/{claim.branch}"], wt)
            pushed.append(claim.subtask_id)

        async def both_landed(ids: list[int] = pushed) -> bool:
            return [(await db.subtasks.get_subtask(i)).status for i in ids] == ["landed"] * len(ids)

        await until(both_landed, timeout=90)
    stop_keepers(fleet.work)
    landed = await db.landing.landed(repo="demo", limit=100)
    assert len(landed) == 20
    rows = await db.attest.landings("demo")
    assert [r["sequence"] for r in rows] == list(range(1, 21))
    assert {r["subject_sha"] for r in rows} == {ld.merged_sha for ld in landed}

    await until(lambda: git_notes.read(fleet.bare().path, fleet.main()) is not None, timeout=30)  # notes follow
    on_server = attest("--repo", "demo", "--json", env=env)
    assert on_server.returncode == 0, on_server.stdout + on_server.stderr
    report = json.loads(on_server.stdout)
    assert report["checked"] == 20 and report["head_sequence"] == 20
    second_key = keys.signer(data / "attest").public_key.keyid
    assert set(report["keys"]) == {first_key, second_key} and sum(report["keys"].values()) == 20

    clone = tmp_path / "clone"
    git(["clone", "-q", f"http://x:{fleet.tokens['rita']}@127.0.0.1:{fleet.bot.port}/git/demo.git", str(clone)],
        tmp_path)
    git(["fetch", "-q", "origin", "refs/notes/mergebot:refs/notes/mergebot"], clone)
    shown = git(["notes", "--ref", "mergebot", "show", fleet.main()], clone).stdout
    kinds = [json.loads(base64.b64decode(e["payload"]))["predicateType"] for e in notes.envelopes(shown)]
    assert kinds == [statement.LANDING, statement.TEST_RESULT]
    trust = tmp_path / "trust.json"
    trust.write_text(keys.trust_path(data / "attest").read_text())  # what the operators publish
    from_clone = attest("--git-dir", str(clone), "--trust", str(trust), "--ref", "refs/remotes/origin/main")
    assert from_clone.returncode == 0, from_clone.stdout + from_clone.stderr

    # main moved in the bare repository without the bot: the commit is named, exit 1
    bare = fleet.bare()
    head = bare[fleet.main()]
    sneaked = bare.create_commit(None, head.author, head.committer, "sneaked in", head.tree_id, [head.id])
    bare.references["refs/heads/main"].set_target(sneaked)
    failed = attest("--repo", "demo", env=env)
    assert failed.returncode == 1 and f"{str(sneaked)[:12]}: no landing statement" in failed.stdout, failed.stdout
    assert "Traceback" not in failed.stderr
