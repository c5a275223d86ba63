"""Where a push is judged: the bot's side of the ``pre-receive`` and ``post-receive`` hooks.

The hooks in the top-level ``hooks/`` folder are thin: they send the ref updates and the push id to the running
bot and print its answer. The push id was registered by the git HTTP endpoint when the authenticated agent
started the push, so the identity here is the token's, never something the hook or the client says.

At pre-receive the pushed objects are still in quarantine; they are inspected through an alternate object
directory, and nothing here ever updates a ref (git would refuse it, and pygit2 would leave a dangling ref
on a rejected push). At post-receive the refs have moved and each accepted subtask push becomes a candidate.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pygit2

from mergebot import messages as say
from mergebot.db.database import Database
from mergebot.errors import ClaimSuperseded, Forbidden, Invalid, MergebotError
from mergebot.git import changes
from mergebot.git import repo as git
from mergebot.landing.intake import assess
from mergebot.landing.intake.checks import (
    ROOT_MARKERS,
    Content,
    Limits,
    RefUpdate,
    Refusal,
    Twin,
    check_config_paths,
    command_files,
    judge_content,
    judge_ref,
    judge_twin,
    outside_footprint,
    shadowing,
    summary,
)
from mergebot.landing.intake.forecast import forecast
from mergebot.landing.judge import verdicts
from mergebot.landing.judge.reset import is_module
from mergebot.landing.main.orphans import branch_tips
from mergebot.landing.target import open_target
from mergebot.messages.refs import parse_subtask_ref, subtask_ref
from mergebot.models import VERDICT_LINE, Agent, Candidate, Repo, Verdict, record
from verifier import startup

log = logging.getLogger(__name__)


@dataclass
class Judgement:
    """The pre-receive decision on a whole push: ``ok``, the text git shows, and each refusal as a record."""

    ok: bool
    message: str
    refusals: list[Refusal]
    verdicts: list[Verdict] = field(default_factory=list)

    def answer(self, machine: bool = False) -> str:
        """What git prints to the pusher: the sentences, then each refusal as one machine-readable line for a
        ``machine`` that asked for them (``mergebot submit``), else what to do next, in words, for a person."""
        return "\n".join([self.message, *_told(self.verdicts, machine)])


def _told(verdicts: Sequence[Verdict], machine: bool) -> list[str]:
    """The refusals' verdicts, after their sentences: a JSON line each for a machine, the next steps for a person."""
    if machine:
        return [VERDICT_LINE + json.dumps(record(v)) for v in verdicts]
    return say.refused_next(list(dict.fromkeys(v.next for v in verdicts))) if verdicts else []


def parse_updates(lines: list[list[str]]) -> list[RefUpdate]:
    out = []
    for line in lines:
        if len(line) != 3:
            raise ValueError("each update is [old, new, ref]")
        old, new, ref = line
        for sha in (old, new):
            if len(sha) not in (40, 64) or any(c not in "0123456789abcdef" for c in sha):
                raise ValueError(f"not an object id: {sha[:80]!r}")
        if not ref.startswith("refs/") or len(ref) > 1024 or any(ord(c) < 32 for c in ref):
            raise ValueError(f"not a ref name: {ref[:80]!r}")
        out.append(RefUpdate(old, new, ref))
    return out


def quarantine_path(repo_path: Path, quarantine: str | None) -> str | None:
    """The quarantine directory git gave the hook, accepted only inside this repository's objects folder."""
    if not quarantine:
        return None
    q = Path(quarantine).resolve()
    objects = (repo_path / "objects").resolve()
    if q.parent != objects or "incoming-" not in q.name or not q.is_dir():  # git: tmp_objdir-incoming-*
        raise ValueError("the quarantine directory is not inside this repository")
    return str(q)


def _dir_bytes(path: str | None) -> int:
    if not path:
        return 0
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total


def _new_bytes(repo_path: Path, new: str, main: str) -> int:
    """What a push brought that main does not have, on disk (a forge push has no quarantine to measure)."""
    try:
        out = git.run_git(["rev-list", "--objects", "--disk-usage", new, "--not", main], cwd=repo_path, timeout=120)
    except RuntimeError:  # git older than 2.31: the push size limit is not enforced for forge pushes
        return 0
    return int(out.strip() or 0)


def subtask_tips(repo_path: Path) -> dict[int, list[str]]:
    """Subtask id -> the tips of its branches (all claim versions)."""
    tips: dict[int, list[str]] = {}
    for ref, sha in branch_tips(repo_path):
        parsed = parse_subtask_ref(ref)
        assert parsed is not None
        tips.setdefault(parsed[0], []).append(sha)
    return tips


def _foreign(repo: pygit2.Repository, others: list[tuple[int, str]], main: str, ids: set[str],
             max_commits: int) -> list[tuple[str, int]]:
    """The first of ``ids`` (commits main does not have) that another subtask's branch in flight holds, and that
    subtask. One walk over every branch answers "none" (the usual case); only a hit, or a walk too long to
    finish, goes branch by branch to name the subtask."""
    limit = max_commits * 10
    try:
        hit = git.first_reached(repo, [tip for _, tip in others], [main], ids, limit)
    except git.WalkTooLong:
        hit = None
    else:
        if hit is None:
            return []
    too_long: int | None = None
    for other, tip in others:  # only branches of subtasks still in flight: landed work is on main
        try:
            sha = git.first_reached(repo, [tip], [main], ids, limit)
        except git.WalkTooLong:  # cut where that branch's own push was cut
            too_long = other if too_long is None else too_long
            sha = next((str(c.id) for c in git.new_commits(repo, tip, [main], max_commits) if str(c.id) in ids),
                       None)
        if sha is not None:
            return [(sha, other)]
    if hit is not None and too_long is not None:  # held by a branch too long to walk to the end: refuse anyway
        return [(hit, too_long)]
    return []


def inspect(repo_path: Path, quarantine: str | None, target_ref: str, update: RefUpdate, subtask_id: int,
            limits: Limits, others: list[tuple[int, str]], check: tuple[Sequence[str], str] = ((), ""),
            tests: Sequence[str] = ()) -> Content:
    """Facts about what ``update.new`` brings relative to the target branch (blocking: run in a thread).
    ``check``: the repository's check-config globs and its check's command; ``tests``: its test paths (rule 7)."""
    repo = git.open_repo(repo_path, quarantine)
    main = git.head_of(repo, target_ref)
    assert main is not None
    commits = git.new_commits(repo, update.new, [main], limits.max_commits)
    ids = {str(c.id) for c in commits}
    others = [(other, tip) for other, tip in others if other != subtask_id]
    foreign = _foreign(repo, others, main, ids, limits.max_commits) if ids else []
    base = repo.merge_base(pygit2.Oid(hex=main), pygit2.Oid(hex=update.new))
    new_tree = str(repo[update.new].peel(pygit2.Commit).tree_id)
    old_tree = str(repo[base].peel(pygit2.Commit).tree_id) if base else None
    changed = changes.changed_paths(repo, old_tree, new_tree) if ids else []
    texts = {p: (changes.text_at(repo, main, p), changes.text_at(repo, update.new, p))
             for p in changed if p.rsplit("/", 1)[-1] in ROOT_MARKERS}
    main_tree = repo[main].peel(pygit2.Commit).tree
    named = [p for p in command_files(check[1]) if p in changed and changes.has_path(main_tree, p)]
    pushed_tree = repo[update.new].peel(pygit2.Commit).tree
    folders = {found[0] for p in changed if (found := startup.module_name(p))}
    roots = startup.path_roots(folders, lambda f: changes.is_file(pushed_tree, f + "/__init__.py"),
                               lambda f: changes.folder_holds(pushed_tree, f, is_module))
    shadowed = shadowing(changed, startup.interpreter_modules(), roots, tests)
    suspicious = assess.suspicious_lines(repo, main, update.new, changed, tests) if limits.suspicious_refuse and ids \
        else []
    return Content(
        changed_paths=changed,
        check_config=check_config_paths(changed, check[0], named, texts, [p for p, _ in shadowed]),
        shadowed=shadowed,
        suspicious=tuple(assess.findings_json(suspicious)),
        commit_count=len(commits),
        roots=[str(c.id) for c in commits if not c.parent_ids],
        foreign=foreign,
        largest_file=changes.largest_blob(repo, commits) if len(commits) <= limits.max_commits else ("", 0),
        push_bytes=_dir_bytes(quarantine) if quarantine else _new_bytes(repo_path, update.new, main),
        already_on_target=not ids,
        patch_id=changes.patch_id(repo, main, update.new) if ids else None,
    )


async def judge_push(db: Database, repo: Repo, repo_path: Path, agent: Agent, quarantine: str | None,
                     updates: list[RefUpdate]) -> Judgement:
    """The pre-receive decision for a whole push: every ref must pass, or nothing is accepted."""
    q = quarantine_path(repo_path, quarantine)
    ids = [p[0] for u in updates if (p := parse_subtask_ref(u.ref))]
    facts = await db.landing.owner_facts(ids) if ids else {}
    limits = Limits(protected_paths=repo.protected_paths, max_file_bytes=repo.max_file_bytes,
                    max_push_bytes=repo.max_push_bytes, footprint_refuse=repo.footprint_refuse,
                    suspicious_refuse=repo.suspicious == "refuse")
    refusals: list[Refusal] = []
    others: list[tuple[int, str]] | None = None
    for u in updates:
        parsed = parse_subtask_ref(u.ref)
        refusal = judge_ref(u, agent.id, repo.target_branch, facts.get(parsed[0]) if parsed else None)
        if refusal is None and parsed and not u.deletion:
            if others is None:
                tips = await asyncio.to_thread(subtask_tips, repo_path)
                live = await db.landing.owner_facts(list(tips)) if tips else {}
                others = [(sid, tip) for sid, ts in tips.items() for tip in ts
                          if sid in live and live[sid].status in ("running", "submitted")]
            commands = " ; ".join([repo.verifier_command, *(c["command"] for c in repo.checks)])
            content = await asyncio.to_thread(inspect, repo_path, q, repo.target_ref, u, parsed[0], limits, others,
                                              (repo.check_config, commands), repo.test_paths)
            row_now = facts.get(parsed[0])
            allowed = dataclasses.replace(limits, check_config_allowed=bool(row_now and row_now.allow_check_changes))
            refusal = judge_content(u, repo.target_branch, content, allowed, row_now.paths if row_now else ())
            if refusal is None and content.patch_id is not None:
                row = await db.landing.twin(repo=repo.name, patch_id=content.patch_id, subtask_id=parsed[0])
                refusal = judge_twin(u, parsed[0], Twin(**row) if row else None)
        if refusal is not None:
            refusals.append(refusal)
            # The event names the subtask only when it exists (its id is a foreign key); a push to a subtask
            # that does not exist keeps the id it named in the detail, and is refused like any other.
            named = parsed[0] if parsed else None
            await db.subtasks.log_event(actor_id=agent.id, kind="push_refused",
                                        subtask_id=named if named in facts else None,
                                        claim_version=parsed[1] if parsed and named in facts else None,
                                        detail={"repo": repo.name, "ref": u.ref, "sha": u.new, "code": refusal.code,
                                                "message": refusal.message, **({"subtask_id": named} if named else {}),
                                                **({"twin": record(refusal.twin)} if refusal.twin else {})})
    if refusals:
        records = []
        for r in refusals:
            p = parse_subtask_ref(r.ref)
            records.append(verdicts.for_refusal(r.code, r.message, p[0] if p else None, p[1] if p else None,
                                                next((u.new for u in updates if u.ref == r.ref), None),
                                                repo.target_branch, facts.get(p[0]) if p else None, list(r.paths),
                                                record(r.twin) if r.twin else None))
        return Judgement(False, summary(refusals), refusals, records)
    return Judgement(True, "", [])


async def accept_push(db: Database, repo: Repo, agent: Agent, updates: list[RefUpdate],
                      path: Path | None = None, pushed_at: float | None = None) -> list[Candidate]:
    """The post-receive step: each accepted subtask push becomes a queued candidate.

    The claim can change between the pre-receive judgement and here (the previous push landed, the lease was
    handed over): git has already moved the ref and reports the push as accepted, so the refusal is recorded as a
    ``push_refused`` event with its reason before ``ClaimSuperseded`` goes back to the hook. An accepted push
    never vanishes without a record.
    """
    out = []
    for u in updates:
        parsed = parse_subtask_ref(u.ref)
        if parsed is None or u.deletion:
            continue
        change = await asyncio.to_thread(assess.change_of, path, repo.target_ref, u.new, repo.test_paths) \
            if path else assess.Change()
        paths = list(change.paths)
        facts = await db.landing.owner_facts([parsed[0]])
        footprint = facts[parsed[0]].paths if parsed[0] in facts else []
        estimate = await assess.estimate(db, repo=repo.name, owner_id=agent.id, subtask_id=parsed[0], change=change)
        try:
            cand = await db.landing.enqueue(repo=repo.name, subtask_id=parsed[0], claim_version=parsed[1],
                                            owner_id=agent.id, sha=u.new, ref=u.ref,
                                            superseded=say.newer_push(u.new), patch_id=change.patch_id,
                                            outside_footprint=outside_footprint(paths, footprint) or None,
                                            paths=paths if path else None, risk=estimate, pushed_at=pushed_at,
                                            suspicious=assess.findings_json(change.suspicious) or None)
            if held := await db.reverts.unlanded_dependencies(parsed[0]):  # the queue holds it: say why
                await db.landing.finish_candidate(cand.id, "queued", say.dependency_reverted(held[0]))
            out.append(cand)
        except ClaimSuperseded as e:
            await db.subtasks.log_event(actor_id=agent.id, kind="push_refused", subtask_id=parsed[0],
                                        claim_version=parsed[1],
                                        detail={"repo": repo.name, "ref": u.ref, "sha": u.new, "code": e.code,
                                                "stage": "post-receive", "message": e.message})
            raise
    return out


async def answer_post_receive(db: Database, repo: Repo, agent: Agent, updates: list[RefUpdate],
                              path: Path | None = None, pushed_at: float | None = None,
                              machine: bool = False) -> tuple[list[Candidate], str]:
    """The post-receive answer: each accepted update queued, one at a time, so a claim that changed since the
    pre-receive step refuses only its own ref; that refusal goes back to the pusher as a sentence and a verdict
    line (``claim_superseded``: git took the push, nothing of it lands), as pre-receive refusals do (the line
    for a ``machine`` that asked for it, the next step in words for a person)."""
    queued: list[Candidate] = []
    lines: list[str] = []
    for u in updates:
        try:
            for c in await accept_push(db, repo, agent, [u], path, pushed_at):
                queued.append(c)
                lines.append(say.queued(c.subtask_id, c.claim_version, c.sha, c.id))
                if c.outside_footprint:
                    lines.append(say.outside_footprint_warning(c.subtask_id, c.outside_footprint))
                if c.suspicious:
                    lines.append(say.suspicious_warning(c.subtask_id, c.suspicious))
                if path is not None:
                    lines += await _forecast_lines(db, path, repo, c)
        except ClaimSuperseded as e:
            sid, version = parse_subtask_ref(u.ref) or (None, None)
            sub = await db.subtasks.get_subtask(sid) if sid is not None else None
            v = verdicts.for_refusal("claim_superseded", e.message, sid, version, u.new, repo.target_branch, sub)
            lines += [f"Mergebot: {e.message}", *_told([v], machine)]
    return queued, "\n".join(lines)


async def _forecast_lines(db: Database, path: Path, repo: Repo, cand: Candidate) -> list[str]:
    """The forecast for a queued push, as lines of its answer; a forecast that fails says nothing (the push is
    queued all the same)."""
    try:
        return say.forecast(await forecast(db, path, repo, cand.subtask_id, sha=cand.sha, paths=cand.paths,
                                           known=cand.paths is not None), repo.target_branch)
    except (pygit2.GitError, KeyError, ValueError, OSError, MergebotError, psycopg.Error) as e:
        log.warning("no forecast for candidate %s: %s", cand.id, e)
        return []


async def submit_again(db: Database, root: Path, agent: Agent, subtask_id: int,
                       claim_version: int) -> tuple[Candidate, bool]:
    """Queue the claim's branch tip once more, without a new push (after a flaky failure, or when main moved):
    judged again by the push rules, and idempotent: a tip already queued or in flight is that candidate, and
    nothing is queued, judged or run again for it (``True``: it was already there). Twenty babysitters
    re-queueing the same tip at once still make one candidate (``enqueue`` locks the subtask first)."""
    sub = await db.subtasks.get_subtask(subtask_id)
    if sub.owner_id != agent.id or sub.claim_version != claim_version or sub.status not in ("running", "submitted"):
        raise await db.subtasks.superseded(subtask_id, claim_version)
    pushed = await db.landing.candidates(subtask_id=subtask_id, limit=1)
    if not pushed:
        raise Invalid(f"subtask {subtask_id} has no push to queue again: `mergebot submit` pushes your branch",
                      field="subtask")
    repo = await db.repos.get_repo(pushed[0]["repo"])
    path = git.bare_path(root, repo.name)
    ref = subtask_ref(subtask_id, claim_version)
    tip = await open_target(repo, path, db).branch_tip(ref)
    if tip is None:
        raise Invalid(f"{ref} does not exist yet: `mergebot submit` pushes your work to it", field="subtask")
    live = await db.landing.live_candidate(subtask_id=subtask_id, claim_version=claim_version, sha=tip)
    if live is not None and live.status != "landed":
        return live, True
    update = RefUpdate(tip, tip, ref)
    judged = await judge_push(db, repo, path, agent, None, [update])
    if not judged.ok:
        raise Forbidden(judged.message, verdicts=[record(v) for v in judged.verdicts])
    return (await accept_push(db, repo, agent, [update], path))[0], False
