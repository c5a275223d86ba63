"""A subtask's acceptance tests (FAIL_TO_PASS): attached by a lead or admin, read by anyone, changed by no push.

Rules:
  * They are files (path, content), at most ``MAX_FILES`` of ``MAX_BYTES`` each, at paths inside the repository
    (no ``..``, no ``.git``); they live in PostgreSQL, so every replica and remote worker has the same ones.
  * The queue writes them into every merge of the subtask's candidates, over whatever the candidate has at those
    paths (``land.merge_onto``): the commit that is verified, and lands, holds them, and the landed record names
    them. The run must pass every test in them (``compare.judge``: ``acceptance_failed``).
  * When they are attached, they run once on main (a verify job of purpose ``acceptance`` on main with them
    written in): a passing probe means they test nothing new, and whoever reads the subtask's acceptance tests is
    told so (``probe``).
"""

from __future__ import annotations

import asyncio
import posixpath
from typing import Any

from mergebot import messages as say
from mergebot.db.database import Database
from mergebot.errors import Invalid
from mergebot.git import repo as git
from mergebot.landing.judge import runs
from mergebot.landing.target import open_target
from mergebot.models import Job, Repo
from verifier import compare as cmp
from verifier import outcomes

MAX_FILES = 50
MAX_BYTES = 1 << 20


def check_files(files: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """Acceptance test files as the store takes them: normalized paths inside the repository, bounded."""
    if len(files) > MAX_FILES:
        raise Invalid(f"at most {MAX_FILES} acceptance test files", field="files")
    out = []
    for path, content in files:
        norm = posixpath.normpath(path)
        parts = norm.split("/")
        if norm.startswith("/") or ".." in parts or "." in parts or ".git" in parts or not norm or len(norm) > 1000:
            raise Invalid(f"{path!r} is not a path inside the repository", field="files")
        if len(content) > MAX_BYTES:
            raise Invalid(f"{path} is over {MAX_BYTES >> 20} MiB", field="files")
        out.append((norm, content))
    if len({p for p, _ in out}) != len(out):
        raise Invalid("two acceptance test files have the same path", field="files")
    return out


async def attach(db: Database, repo: Repo, path: Any, *, subtask_id: int, files: list[tuple[str, bytes]],
                 actor_id: int | None) -> int | None:
    """Replace the subtask's acceptance tests; with any, queue their run on main (the probe). Its job id."""
    files = check_files(files)
    await db.subtasks.set_acceptance(subtask_id=subtask_id, files=files, actor_id=actor_id)
    if not files:
        return None
    sub = await db.subtasks.get_subtask(subtask_id)

    target = open_target(repo, path, db)
    main = await target.head()  # a forge's: this replica's mirror, following the forge's main
    sha = await asyncio.to_thread(lambda: git.commit_with_files(git.open_repo(path), main, files,
                                                                say.acceptance_probe(subtask_id, sub.title)))
    await target.publish(sha)  # for a worker on another machine; the leader's sweep deletes it
    spec = runs.check_spec(repo, "acceptance").as_json()
    job = await db.jobs.enqueue_job(repo=repo.name, commit_sha=sha, command=spec["command"],
                                    timeout_s=spec["timeout_s"], purpose="acceptance", cache=spec["cache"],
                                    sandbox=spec["sandbox"])
    await db.subtasks.set_acceptance_probe(subtask_id=subtask_id, job_id=job.id, actor_id=actor_id)
    return job.id


def probe(job: Job | None, paths: list[str]) -> dict[str, Any]:
    """What the probe on main says: ``pending``, ``new`` (they fail on main: they test the change), ``nothing_new``
    (they already pass on main), or ``unknown`` (the run could not tell)."""
    if job is None:
        return {"status": "none"}
    if job.status != "done" or not job.result:
        return {"status": "pending", "job": job.id}
    now = outcomes.unpack((job.result or {}).get("tests"))
    if now.none:
        return {"status": "unknown", "job": job.id, "message": say.acceptance_probe_unknown()}
    wrong = cmp.accepted(now, paths)
    if wrong:
        return {"status": "new", "job": job.id, "message": say.acceptance_tests_new(len(wrong))}
    return {"status": "nothing_new", "job": job.id, "message": say.acceptance_tests_nothing_new(job.commit_sha)}
