"""The second part of ``python -m bench.attest``: ``mergebot attest verify`` over a history of ``--commits`` landings.

A bare repository made with pygit2: a start commit, then ``--commits`` first-parent commits on ``main``, each
changing one small file, each with its git note under ``refs/notes/mergebot`` holding a landing statement and a test
result sealed with a real Ed25519 key (``mergebot.attest``), numbered 1, 2, 3, ... and chained (main before = the
parent), each naming 50 tests, two of them skipped; the data directory's trust file beside it. Building it is not
timed. Timed per round: the command as a person runs it on a clone, ``mergebot attest verify --git-dir DIR --trust
FILE --ref refs/heads/main --json`` through the CLI's own parser and function (its remembered state removed
before each round, so every round checks the whole history), and apart: ``first_parent``, ``all_notes``,
``read_trust`` and ``chain.verify``.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
from pathlib import Path
from typing import Any

import pygit2

from mergebot.attest import chain, keys, notes, statement
from mergebot.attest.envelope import IN_TOTO, seal
from mergebot.cli import attest as cli_attest
from mergebot.cli.parser import build_parser
from mergebot.git import notes as git_notes

AUTHOR = pygit2.Signature("Bench", "bench@localhost", 1_700_000_000, 0)
TESTS = {f"tests/test_mod.py::test_{i}": "skipped" if i < 2 else "passed" for i in range(50)}


def build(tmp: Path, commits: int) -> tuple[Path, Path]:
    """The bare repository and its trust file."""
    data = tmp / "verify-data"
    signer = keys.signer(data)
    path = tmp / "history.git"
    repo = pygit2.init_repository(str(path), bare=True, initial_head="main")

    def tree(i: int) -> pygit2.Oid:
        tb = repo.TreeBuilder()
        tb.insert("landing.txt", repo.create_blob(f"landing {i}\n".encode()), pygit2.enums.FileMode.BLOB)
        return tb.write()

    start = str(repo.create_commit("refs/heads/main", AUTHOR, AUTHOR, "start", tree(0), []))
    parent, texts = start, {}
    for i in range(1, commits + 1):
        t = tree(i)
        sha = str(repo.create_commit("refs/heads/main", AUTHOR, AUTHOR, f"landing {i}", t, [pygit2.Oid(hex=parent)]))
        f = statement.Facts(
            repo="bench", target_ref="refs/heads/main", since=start, sequence=i, before=parent, after=sha,
            tree=str(t), moved_to=sha, verified=sha, candidate_id=i, candidate_sha=sha, branch=f"mb/{i}/1",
            subtask_id=i, claim_version=1, owner="agent", pushed_by="agent", outcome="pass",
            checks=(statement.Check("check", "pytest -q", True, "pass", 1000, "e" * 64),), config_digest="f" * 64,
            sandbox="bwrap", limits="memory=cgroup", tests=TESTS, tests_source="pytest", log_digest="e" * 64,
            allowed={"testRemoval": False, "checkChanges": False, "behaviourChange": False},
            timings={"signedAt": keys.now(), "verifiedMs": 1000})
        texts[sha] = notes.text([seal(statement.landing(f), IN_TOTO, signer),
                                 seal(statement.test_result(f), IN_TOTO, signer)])
        parent = sha
    git_notes.write(path, texts)
    return path, keys.trust_path(data)


def bench_verify(tmp: Path, commits: int, rounds: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    path, trust = build(tmp, commits)
    built = time.perf_counter() - t0
    note_bytes = sum(len(n) for n in git_notes.all_notes(path).values())
    argv = ["attest", "verify", "--git-dir", str(path), "--trust", str(trust), "--ref", "refs/heads/main", "--json"]
    times: dict[str, list[float]] = {"cli": [], "first_parent": [], "all_notes": [], "read_trust": [], "verify": []}
    report: dict[str, Any] = {}
    for _ in range(rounds):
        (path / cli_attest.STATE).unlink(missing_ok=True)  # every round checks the whole history
        args = build_parser().parse_args(argv)
        out = io.StringIO()
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(out):
            args.fn(args)
        times["cli"].append(time.perf_counter() - t0)
        report = json.loads(out.getvalue())

        t0 = time.perf_counter()
        history = cli_attest.first_parent(path, "refs/heads/main", None)
        t1 = time.perf_counter()
        note_of = git_notes.all_notes(path)
        t2 = time.perf_counter()
        trusted = keys.read_trust(trust.read_text())
        t3 = time.perf_counter()
        parts = chain.verify(history, note_of, trusted, repo="bench")
        t4 = time.perf_counter()
        assert parts.ok and parts.checked == commits, parts.findings[:3]
        for name, took in (("first_parent", t1 - t0), ("all_notes", t2 - t1), ("read_trust", t3 - t2),
                           ("verify", t4 - t3)):
            times[name].append(took)
    return {"commits": commits, "rounds": rounds, "built_s": built, "note_bytes": note_bytes, "times": times,
            "report": {k: report.get(k) for k in ("ok", "checked", "head_sequence")}}
