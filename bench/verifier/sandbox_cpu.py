"""The server's latency while a check burns every core, against the idle machine (issue 31's CPU target).

A real ``mergebot serve`` on the embedded PostgreSQL, with one verifier worker. Its repository's check burns every
core for the length of a phase (``os.cpu_count()`` processes spinning). Three phases, in rounds (``--rounds``, 2),
each phase ``--seconds`` long (20), so that drift on this machine falls on all of them alike:

* **idle**: nothing runs but the server and the requests;
* **sandboxed**: the check runs as the verifier runs it, at the least CPU weight this machine allows (its run
  records how: ``cpu=cgroup``, ``sched_idle`` or ``nice``);
* **same priority**: the same burner, started by this script as a plain process at the server's own priority:
  what a check costs the server without the verifier's weight (the reference for the lever).

During each phase one client sends, one at a time with 20 ms between them, ``GET /healthz`` and a claim
(``POST /api/v1/subtasks/claim``, which takes a ready subtask: 6,000 are made first) and records each latency;
the machine's busy cores are read from /proc/stat. It prints p50/p95/p99 per request and phase and the p99 of
each burning phase as a multiple of the idle p99 (the target: at most 3x), and which limits the run enforced.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import harness
from bench.common.measure import cpu_jiffies, fmt, pctl
from mergebot.landing.main.repos import repos_root

BURN = ("import multiprocessing as m, os, sys, time\n"
        "def spin(t):\n"
        "    end = time.time() + t\n"
        "    while time.time() < end:\n"
        "        pass\n"
        "t = float(sys.argv[1])\n"
        "ps = [m.Process(target=spin, args=(t,)) for _ in range(os.cpu_count() or 1)]\n"
        "[p.start() for p in ps]; [p.join() for p in ps]\n")


def probe(url: str, token: str, seconds: float) -> dict[str, list[float]]:
    """Latencies of /healthz and of a claim, alternating, for ``seconds``."""
    got: dict[str, list[float]] = {"healthz": [], "claim": []}
    with httpx.Client(base_url=url, timeout=30, headers={"Authorization": f"Bearer {token}"}) as http:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for name, call in (("healthz", lambda: http.get("/healthz")),
                               ("claim", lambda: http.post("/api/v1/subtasks/claim", json={}))):
                t0 = time.perf_counter()
                r = call()
                got[name].append(time.perf_counter() - t0)
                if r.status_code not in (200, 204):
                    raise RuntimeError(f"{name}: {r.status_code} {r.text[:300]}")
                time.sleep(0.02)
    return got


def busy(seconds: float, fn: Any) -> tuple[Any, float]:
    """``fn()``'s value and the machine's busy cores while it ran."""
    b0, t0 = cpu_jiffies()
    w0 = time.monotonic()
    value = fn()
    b1, t1 = cpu_jiffies()
    wall = time.monotonic() - w0
    cores = (b1 - b0) / max(1, t1 - t0) * (os.cpu_count() or 1)
    return value, cores if wall > 0 else float("nan")


async def setup(server: harness.PgServer, work: Path) -> tuple[str, dict[str, harness.Agent], str]:
    url = server.create_db("cpu")
    async with harness.store_on(url) as db:
        agents = {"root": await harness.add_agent(db, "root", "admin"), "ann": await harness.add_agent(db, "ann")}
        src = work / "src"
        src.mkdir()
        (src / "burn.py").write_text(BURN)
        for args in (["init", "-q", "-b", "main"], ["add", "-A"],
                     ["-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "burner"]):
            subprocess.run(["git", *args], cwd=src, check=True)
        await harness.add_bench_repo(db, repos_root(work / "data"), name="burn", source=src,
                                     command=f"{sys.executable} burn.py 1", timeout_s=3600)
        for i in range(6_000):
            await harness.add_subtask(db, f"claimable {i}")
    server.settle(url)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=src, capture_output=True, text=True,
                          check=True).stdout.strip()
    return url, agents, head


async def start_burn(url: str, head: str, seconds: float) -> int:
    """A verify job running the repository's burner for ``seconds``: the verifier's own run of a check."""
    async with harness.store_on(url) as db:
        job = await db.jobs.enqueue_job(repo="burn", commit_sha=head, command=f"{sys.executable} burn.py {seconds}",
                                        timeout_s=int(seconds) + 60, purpose="manual",
                                        sandbox={"paths": [], "disk_limit_mb": 2048, "memory_mb": 4096})
        return job.id


async def job_state(url: str, job_id: int) -> tuple[str, dict[str, Any] | None]:
    async with harness.store_on(url) as db:
        job = await db.jobs.get_job(job_id)
        return job.status, job.result


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.verifier.sandbox_cpu",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0, help="length of each phase")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="one round of 8 s phases")
    args = ap.parse_args()
    if args.quick:
        args.seconds, args.rounds = 8.0, 1
    print(f"machine: {harness.machine()}; {os.cpu_count()} cores; load {harness.load_average()}")
    with tempfile.TemporaryDirectory(prefix="mb-bench-cpu-", dir="/var/tmp") as tmp, harness.PgServer() as server:
        work = Path(tmp)
        url, agents, head = asyncio.run(setup(server, work))
        serve = harness.Serve(url, work / "data", {"MERGEBOT_VERIFIER_WORKERS": "1", "MERGEBOT_LOG_LEVEL": "warning"})
        results: dict[str, dict[str, list[float]]] = {p: {"healthz": [], "claim": []}
                                                      for p in ("idle", "sandboxed", "same priority")}
        cores: dict[str, list[float]] = {p: [] for p in results}
        enforced = ""
        try:
            probe(serve.url, agents["ann"].token, 2.0)  # warm up
            for _ in range(args.rounds):
                for phase in results:
                    burner: subprocess.Popen[bytes] | None = None
                    job = None
                    if phase == "sandboxed":
                        job = asyncio.run(start_burn(url, head, args.seconds + 4))
                        deadline = time.monotonic() + 30
                        while asyncio.run(job_state(url, job))[0] != "running" and time.monotonic() < deadline:
                            time.sleep(0.1)
                        time.sleep(1.5)  # the sandbox is up and burning
                    elif phase == "same priority":
                        burner = subprocess.Popen([sys.executable, "-c", BURN, str(args.seconds + 4)])
                        time.sleep(1.0)
                    got, busy_cores = busy(args.seconds, lambda: probe(serve.url, agents["ann"].token,
                                                                        args.seconds))
                    for k, v in got.items():
                        results[phase][k] += v
                    cores[phase].append(busy_cores)
                    if burner is not None:
                        burner.kill()
                        burner.wait()
                    if job is not None:
                        while (state := asyncio.run(job_state(url, job)))[0] != "done":
                            time.sleep(0.2)
                        enforced = ((state[1] or {}).get("limits") or {}).get("enforced", "?")
                    time.sleep(1.0)
        finally:
            serve.stop()
    print(f"\n{args.rounds} round(s) of {args.seconds:g} s phases; the check's limits: {enforced}")
    print(f"{'phase':<15} {'busy cores':>10}  " + "  ".join(f"{k + ' p50/p95/p99 ms':>28}" for k in ("healthz",
                                                                                                    "claim")))
    for phase, got in results.items():
        row = [f"{phase:<15} {fmt(sum(cores[phase]) / max(1, len(cores[phase])), 2):>10}"]
        for k in ("healthz", "claim"):
            xs = got[k]
            row.append(f"{fmt(pctl(xs, .5) * 1000, 2)}/{fmt(pctl(xs, .95) * 1000, 2)}/"
                       f"{fmt(pctl(xs, .99) * 1000, 2)} (n={len(xs)})".rjust(28))
        print("  ".join(row))
    print("\np99 as a multiple of the idle p99 (target: sandboxed at most 3x):")
    for phase in ("sandboxed", "same priority"):
        ratios = []
        for k in ("healthz", "claim"):
            idle = pctl(results["idle"][k], .99)
            ratios.append(f"{k} {pctl(results[phase][k], .99) / idle:.2f}x")
        print(f"  {phase:<15} " + ", ".join(ratios))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
