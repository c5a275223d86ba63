"""The landing benchmark's references (``python -m bench.landing``): the naive landing (clone, merge, check, push) and
what the push hooks add to a push.
"""

from __future__ import annotations

import asyncio
import itertools
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pygit2

from bench.common import harness
from bench.landing.repo import GIT, NOOP, header, make_commit, row, run, touched_file
from mergebot.git import repo as gitrepo
from mergebot.landing.main.repos import repos_root

# -- 2. the naive script ------------------------------------------------------------------------------------


class Naive:
    """The naive landing script, one landing per call, on its own bare copy of the repository."""

    def __init__(self, tmp: Path, source: Path, files: int) -> None:
        self.tmp, self.files = tmp, files
        self.bare_path = tmp / "naive.git"
        run(["git", "clone", "-q", "--bare", str(source), str(self.bare_path)])
        self.bare = pygit2.Repository(str(self.bare_path))
        self.mains = [gitrepo.head_of(self.bare, "refs/heads/main") or ""]
        self.out: dict[str, list[float]] = {k: [] for k in ("clone", "merge", "check", "push", "total", "cleanup")}
        self.kinds: list[str] = []

    def land_one(self) -> None:
        i = len(self.kinds)
        mains = self.mains
        base = mains[-1] if i % 2 == 0 or len(mains) < 2 else mains[-2]
        sha = make_commit(self.bare, base, touched_file(10_000 + i, self.files), f"naive landing {i}")
        branch = f"subtasks/{i + 1}/v1"
        self.bare.references.create(f"refs/heads/{branch}", pygit2.Oid(hex=sha))
        clone = self.tmp / f"naive-clone-{i}"
        t = {
            "clone": run([*GIT, "clone", "-q", str(self.bare_path), str(clone)]),
            "merge": run([*GIT, "merge", "-q", "--no-edit", f"origin/{branch}"], cwd=clone),
            "check": run(["/bin/sh", "-c", NOOP], cwd=clone),
            "push": run([*GIT, "push", "-q", "origin", "HEAD:refs/heads/main"], cwd=clone),
        }
        t["total"] = sum(t.values())
        t0 = time.perf_counter()
        shutil.rmtree(clone)
        t["cleanup"] = (time.perf_counter() - t0) * 1000
        for k, v in t.items():
            self.out[k].append(v)
        head = gitrepo.head_of(pygit2.Repository(str(self.bare_path)), "refs/heads/main") or ""
        self.kinds.append("fast-forward" if head == sha else "merge")
        mains.append(head)

    def figures(self) -> dict[str, Any]:
        return {**self.out, "kinds": self.kinds}


def interleave(naive: Naive | None, count: int, landings: int) -> Callable[[int], None]:
    """After bot landing ``i``, run the naive landings due by then, so both see the machine's load alike."""
    due = sorted(min(landings - 1, (2 * j + 1) * landings // (2 * count)) for j in range(count))

    def after(i: int) -> None:
        while naive is not None and due and due[0] <= i:
            due.pop(0)
            naive.land_one()
    return after


def print_naive(naive: dict[str, Any], landings: int, interleaved: bool) -> None:
    kinds: list[str] = naive["kinds"]
    med = statistics.median(naive["total"])
    print(f"\n2. naive script: git clone + git merge + `{NOOP}` + git push ({landings} landings: "
          f"{kinds.count('fast-forward')} fast-forward, {kinds.count('merge')} merge"
          f"{'; interleaved with the bot landings' if interleaved else ''})")
    print(header("ms per landing"))
    print(row("total (clone + merge + check + push)", naive["total"], med))
    print(row("git clone (local path, hardlinked objects, full checkout)", naive["clone"], med))
    print(row("git merge", naive["merge"], med))
    print(row(f"`{NOOP}`", naive["check"], med))
    print(row("git push (local, to main)", naive["push"], med))
    print(row("rm -rf the clone (not counted)", naive["cleanup"]))


# -- 3. the hook, through a real server ---------------------------------------------------------------------


HOOK_REPOS = ("hooked", "pre-only", "no-hook")


def curl_start_ms(n: int) -> list[float]:
    """What the hook's one external program costs to start, alone (``curl --version``)."""
    return [run(["curl", "--version"]) for _ in range(n)]


async def bench_hooks(server: harness.PgServer, tmp: Path, source: Path, files: int, pushes: int) -> dict[str, Any]:
    url = server.create_db("hooks")
    data = tmp / "serve"
    data.mkdir()
    root = repos_root(data)
    async with harness.store_on(url) as store:
        agent = await harness.add_agent(store, "bench-pusher")
        for name in HOOK_REPOS:
            await harness.add_bench_repo(store, root, name=name, source=source, command=NOOP, timeout_s=60)
        hooks = {name: gitrepo.bare_path(root, name) / "hooks" for name in HOOK_REPOS}
        (hooks["pre-only"] / "post-receive").unlink()
        for stage in ("pre-receive", "post-receive"):
            (hooks["no-hook"] / stage).unlink()
        # The queue must not land (checkout of every file) while pushes are timed: pause where hooks queue.
        await harness.pause_repos(store, ["hooked", "pre-only"], "bench: pushes being timed")
        client = tmp / "push-client.git"
        run(["git", "clone", "-q", "--bare", str(source), str(client)])
        crepo = pygit2.Repository(str(client))
        main = gitrepo.head_of(crepo, "refs/heads/main") or ""
        with harness.Serve(url, data) as bot:
            counter = itertools.count(1)
            fake_ids = itertools.count(900_001)

            async def push_once(name: str) -> float:
                k = next(counter)
                if name == "no-hook":
                    ref = f"refs/heads/subtasks/{next(fake_ids)}/v1"
                else:
                    sid = await harness.add_subtask(store, f"bench push {k}")
                    got = await harness.claim(store, agent.id)
                    assert got is not None and got[0] == sid, "another subtask was ready"
                    ref = f"refs/heads/subtasks/{sid}/v{got[1]}"
                sha = make_commit(crepo, main, touched_file(20_000 + k, files), f"push {k}")
                remote = f"http://bench:{quote(agent.token, safe='')}@127.0.0.1:{bot.port}/git/{name}.git"
                ms = await asyncio.to_thread(run, ["git", "-C", str(client), "push", "-q", remote, f"{sha}:{ref}"])
                got_sha = gitrepo.head_of(pygit2.Repository(str(gitrepo.bare_path(root, name))), ref)
                if got_sha != sha:
                    raise RuntimeError(f"push to {name} did not arrive: {ref} is {got_sha}")
                return ms

            for name in HOOK_REPOS:  # warm-up: first requests, first hook runs, caches
                for _ in range(2):
                    await push_once(name)
            samples: dict[str, list[float]] = {name: [] for name in HOOK_REPOS}
            for i in range(pushes):
                order = HOOK_REPOS[i % len(HOOK_REPOS):] + HOOK_REPOS[:i % len(HOOK_REPOS)]
                for name in order:
                    samples[name].append(await push_once(name))
            queued = await harness.candidate_count(store, "hooked")
    return {"pushes": samples, "curl_start": curl_start_ms(max(10, pushes)), "queued_by_hooked": queued,
            "n": pushes}


def print_hooks(h: dict[str, Any]) -> dict[str, float]:
    p = h["pushes"]
    base = statistics.median(p["no-hook"])
    print(f"\n3. git push over HTTP of a one-file commit to refs/heads/subtasks/<id>/v<n> "
          f"({h['n']} pushes per repository, round robin, one server)")
    print(header("ms per push"))
    labels = {"hooked": "hooked: real pre-receive + post-receive",
              "pre-only": "pre-only: real pre-receive, no post-receive",
              "no-hook": "no-hook: no hooks at all"}
    for name in HOOK_REPOS:
        print(row(labels[name], p[name]))
    added = {name: statistics.median(p[name]) - base for name in ("hooked", "pre-only")}
    print(f"  {'pre-receive adds (pre-only - no-hook, medians)':<64} {added['pre-only']:9.2f}")
    print(f"  {'both hooks add (hooked - no-hook, medians)':<64} {added['hooked']:9.2f}")
    print(f"  ({h['queued_by_hooked']} candidates queued by the hooked repository's post-receive; "
          "its queue was paused)")
    print("\n  where a hook's time goes (the hook is /bin/sh + curl; the bot judges the push in between):")
    print(header("ms per run"))
    print(row("curl --version (starting the hook's one program)", h["curl_start"]))
    return added
