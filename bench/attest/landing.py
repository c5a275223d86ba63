"""The first part of ``python -m bench.attest``: what a landing's signed statements add to it, timed inside real
landings of the serial queue (``bench.landing.bot``'s instrumented ``Speculator.alone``, the no-op check ``true``
through a verify job and an in-process worker).

Per landing, wrapped where the landing path looks them up: ``provenance.statements`` (the facts read from the
database, two statements built and sealed with the data directory's Ed25519 key: what the landing waits for) and
``provenance.publish`` (the statements not yet in the git notes read back and written to ``refs/notes/mergebot``,
marked noted: beside the queue, after the landing, timed when it ends within the landing's step), against the
landing's own database write ``Settle.finish`` (timed as ``db.finish_landing``: the landed row, the subtask, the
candidates and now the statements' rows in one transaction) and the land stage around them all. The first landing
makes the signing key and is not counted.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any
from unittest import mock

import pygit2

from bench.common import harness
from bench.common.measure import Steps
from bench.landing.bot import Timed, instrumented, start_worker, until_done
from bench.landing.repo import NOOP, generate_repo, make_commit, touched_file
from mergebot.git import repo as gitrepo
from mergebot.landing.main import provenance

PARTS = ("attest.statements", "attest.publish", "attest.total", "db.begin_landing", "db.finish_landing",
         "stage.land", "total")


async def bench_landings(server: harness.PgServer, tmp: Path, files: int, landings: int) -> dict[str, Any]:
    url = server.create_db("attest")
    source = tmp / "source.git"
    generate_repo(source, files)
    data = tmp / "data"
    root = data / "repos"  # the queue's signing key lives beside it, in data/attest (``Context.signer``)
    steps = Steps()
    worker = None
    async with harness.store_on(url) as store:
        try:
            agent = await harness.add_agent(store, "bench-attest-agent")
            repo = await harness.add_bench_repo(store, root, name="bench", source=source, command=NOOP, timeout_s=60)
            path = gitrepo.bare_path(root, repo.name)
            queue = Timed(store, root, steps)
            with instrumented(queue, steps), \
                    mock.patch.object(provenance, "statements",
                                      steps.coro("attest.statements", provenance.statements)), \
                    mock.patch.object(provenance, "publish", steps.coro("attest.publish", provenance.publish)):
                worker = start_worker(store, root, data, url, queue)
                for i in range(landings + 1):
                    bare = pygit2.Repository(str(path))
                    sid = await harness.add_subtask(store, f"attested landing {i}")
                    got = await harness.claim(store, agent.id)
                    assert got is not None and got[0] == sid, "another subtask was ready"
                    head = gitrepo.head_of(bare, repo.target_ref) or ""
                    sha = make_commit(bare, head, touched_file(i, files), f"landing {i}")
                    ref = f"refs/heads/subtasks/{sid}/v{got[1]}"
                    bare.references.create(ref, pygit2.Oid(hex=sha))
                    cand = await harness.enqueue(store, repo=repo.name, subtask_id=sid, claim_version=got[1],
                                                 owner_id=agent.id, sha=sha, ref=ref)
                    steps.current.clear()
                    steps.facts.clear()
                    t0 = time.perf_counter()
                    taken = await until_done(queue.process_next(repo), worker, 600.0)
                    total = (time.perf_counter() - t0) * 1000
                    status, reason = await harness.candidate_outcome(store, cand)
                    ok = taken is not None and taken.id == cand and status == "landed"
                    # what the landing waits for: the statements (the notes are written beside the queue)
                    steps.current["attest.total"] = steps.current.get("attest.statements", 0.0)
                    row = steps.close(total=total, landed=ok, status=status, reason=reason[:300], warm=i == 0)
                    await until_done(queue.settle(), worker, 600.0)  # the post-land check, off the clock
                    steps.current.clear()
                    if not ok:
                        print(f"  landing {i} did not land: {row['status']}: {row['reason']}")
            await queue.close()
            signed = len(await store.attest.landings(repo.name))
        finally:
            if worker is not None:
                worker.cancel()
                await asyncio.gather(worker, return_exceptions=True)
    rows = [r for r in steps.rows if not r["warm"] and r["landed"]]
    for r in rows:
        r["ratio"] = r["attest.total"] / r["db.finish_landing"] if r.get("db.finish_landing") else float("nan")
    return {"rows": rows, "landings": landings, "landed": sum(1 for r in steps.rows if r["landed"]),
            "signed": signed}
