"""``mergebot attest verify``: main's history checked against the signed landing statements in its git notes.

On the server (``--repo NAME``): the bare repository in the data directory, its target branch, the data directory's
trust file, and the commit main stood at when the repository was added as the start. From a plain clone
(``--git-dir DIR --trust FILE``), after ``git fetch origin refs/notes/mergebot:refs/notes/mergebot``: the clone's
main (``--ref``), the start named by the statements. Each verifier remembers what it accepted (the head, its landing
number, the trust file's root and version) and refuses a later history or trust file that goes back on it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pygit2

from mergebot import messages as say
from mergebot.attest import chain, keys
from mergebot.attest.envelope import Untrusted
from mergebot.cli.admin import settings_from, with_db
from mergebot.cli.render import emit
from mergebot.errors import Invalid
from mergebot.git import notes as git_notes
from mergebot.landing.main.repos import repos_root

STATE = "mergebot-attest.json"


def first_parent(path: Path, ref: str, since: str | None) -> list[tuple[str, str | None]]:
    """main's first-parent history from ``ref``'s commit, head first, down to ``since`` (included) or the root."""
    repo = pygit2.Repository(str(path))
    try:
        head = repo.references[ref].resolve().target
    except (KeyError, pygit2.InvalidSpecError) as e:
        raise Invalid(say.attest_no_ref(ref)) from e
    out: list[tuple[str, str | None]] = []
    commit = repo.get(head)
    while isinstance(commit, pygit2.Commit):
        parents = commit.parent_ids
        out.append((str(commit.id), str(parents[0]) if parents else None))
        if str(commit.id) == since or not parents:
            break
        commit = repo.get(parents[0])
    return out


def cmd_attest_verify(args: argparse.Namespace) -> None:
    if args.git_dir:
        clone = pygit2.Repository(args.git_dir)
        path, ref = Path(clone.path), args.ref or _clone_main(clone)
        if not args.trust:
            raise Invalid(say.ATTEST_NEEDS_TRUST)
        trust_file, state_file, since, name = Path(args.trust), Path(clone.path) / STATE, args.since, args.repo
    else:
        if not args.repo:
            raise Invalid(say.ATTEST_NEEDS_REPO)
        settings = settings_from(args)
        repo = with_db(settings, lambda db: db.repos.get_repo(args.repo))
        data = settings.data_dir
        path, ref, name = repos_root(data) / f"{repo.name}.git", args.ref or repo.target_ref, repo.name
        trust_file = Path(args.trust) if args.trust else keys.trust_path(settings.attest_folder)
        state_file, since = settings.attest_folder / f"accepted-{repo.name}.json", args.since or repo.root_sha
    state = _read_state(state_file)
    pinned = (state["trust_root"], int(state["trust_version"])) if state.get("trust_root") else None
    try:
        trust = keys.read_trust(trust_file.read_text(), pinned)
    except Untrusted as e:
        raise Invalid(e.message) from e
    history = first_parent(path, ref, since)
    accepted = (state["head"], int(state["sequence"])) if state.get("head") and not args.since else None
    report = chain.verify(history, git_notes.all_notes(path), trust, since=since, accepted=accepted, repo=name)
    out = {"ok": report.ok, "checked": report.checked, "since": report.since, "head": report.head,
           "head_sequence": report.head_sequence, "keys": report.keys,
           "findings": [{"sha": f.sha, "why": f.why} for f in report.findings]}
    if args.json:
        emit(args, out)
    else:
        for f in report.findings:
            print(say.attest_finding(f.sha, f.why))
        print(say.attest_verified(report.checked, report.since, sorted(report.keys)) if report.ok
              else say.attest_failed(len(report.findings), report.checked), file=sys.stdout if report.ok
              else sys.stderr)
    if not report.ok:
        raise SystemExit(1)
    if report.head is not None and report.head_sequence is not None:
        _write_state(state_file, {"head": report.head, "sequence": report.head_sequence, "trust_root": trust.root,
                                  "trust_version": trust.version})


def _clone_main(clone: pygit2.Repository) -> str:
    for ref in ("refs/heads/main", "refs/remotes/origin/main"):
        if ref in clone.references:
            return ref
    return "refs/heads/main"


def _read_state(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_state(path: Path, state: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    tmp.replace(path)


def cmd_attest_rotate(args: argparse.Namespace) -> None:
    """A new signing key in this data directory's key folder (see ``keys.rotate``); the servers on it sign with it at
    once."""
    data = settings_from(args).attest_folder
    if not keys.key_path(data).exists():
        raise Invalid(say.ATTEST_NO_KEY_TO_ROTATE)
    new, trust = keys.rotate(data)
    emit(args, {"keyid": new.public_key.keyid, "trust_file": str(keys.trust_path(data)), "version": trust.version})
    if not args.json:
        print(say.attest_rotated(trust.version), file=sys.stderr)
