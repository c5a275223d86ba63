"""What the signed landing statements cost (issue 44), in one process on one PostgreSQL server:

1. **A landing** (``--landings``, 20; ``bench/attest/landing.py``): real landings of the serial queue on a generated
   repository (``--files``, 1,000), each timed inside: building and signing the statements
   (``provenance.statements``) and storing them in the git notes (``provenance.publish``), against the landing's own
   database write (``db.landing.finish_landing``, which now writes the statements' rows too) and the land stage.
   Printed per landing: median, p95 and max of each, the statements' cost / finish_landing, and the target
   (what the landing waits for at most 20 ms a landing; the notes are written beside the queue).
2. **``mergebot attest verify``** (``--commits``, 1,000; ``--rounds``, 3; ``bench/attest/verify.py``): a bare
   repository of that many first-parent landings, each with its note of sealed statements, checked end to end
   through the CLI (target: under 10 s), and its parts apart.

Run from the repository root::

    python -m bench.attest             # 20 landings on 1,000 files; verify over 1,000 landings, 3 rounds
    python -m bench.attest --quick     # a smoke run: 4 landings on 200 files; verify over 100 landings, 1 round

The database: an embedded PostgreSQL in a temporary directory, or the server MERGEBOT_DATABASE_URL names. Other
load on the machine slows every figure; the load average is printed. This prints figures and whether each target
was met; it asserts nothing about timing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
from typing import Any

from bench.attest.landing import PARTS, bench_landings
from bench.attest.verify import bench_verify
from bench.common import cli, harness
from bench.common.measure import met
from bench.landing.repo import fmt, header, row, stats

LANDING_TARGET_MS = 20.0  # what building, signing and storing the statements may add to a landing
VERIFY_TARGET_S = 10.0  # attest verify over 1,000 landings

LABELS = {
    "attest.statements": "provenance.statements: facts, build, sign (2 statements)",
    "attest.publish": "provenance.publish: git notes written, rows marked (beside the queue)",
    "attest.total": "what the landing waits for: the statements",
    "db.begin_landing": "db.landing.begin_landing (the intent, with the envelopes)",
    "db.finish_landing": "db.landing.finish_landing (the landing's own write)",
    "stage.land": "land stage (statements, intent, CAS, write, notes)",
    "total": "the whole landing (Speculator.alone, verify included)",
}


def print_landings(got: dict[str, Any], files: int) -> float:
    rows = got["rows"]
    print(f"\n1. a landing: {got['landings']} landings (+1 warm-up) of the serial queue on {files:,} files, no-op "
          f"check through a verify job; {got['landed']} landed, {got['signed']} landing statements stored")
    print(header("ms per landing"))
    whole = statistics.median([r["total"] for r in rows]) if rows else None
    for name in PARTS:
        print(row(LABELS[name], [float(r.get(name, 0.0)) for r in rows], whole))
    ratios = [r["ratio"] for r in rows if r["ratio"] == r["ratio"]]
    print(f"  statements + notes / finish_landing: median {fmt(stats(ratios)['median'], 2)}x, "
          f"p95 {fmt(stats(ratios)['p95'], 2)}x")
    return stats([r["attest.total"] for r in rows])["median"]


def print_verify(got: dict[str, Any]) -> float:
    t = got["times"]
    print(f"\n2. mergebot attest verify: {got['commits']:,} first-parent landings, each note "
          f"{got['note_bytes'] / max(got['commits'], 1) / 1024:.1f} KB (built in {got['built_s']:.1f} s, not "
          f"timed); {got['rounds']} round(s); the CLI said {got['report']}")
    print(header("ms"))
    for name, label in (("cli", "mergebot attest verify --git-dir ... --json (end to end)"),
                        ("first_parent", "  first_parent: main's history"),
                        ("all_notes", "  all_notes: every note of refs/notes/mergebot"),
                        ("read_trust", "  read_trust: the trust file opened"),
                        ("verify", "  chain.verify: every envelope opened and chained")):
        print(row(label, [x * 1000 for x in t[name]]))
    per = statistics.median(t["verify"]) / max(got["commits"], 1) * 1000
    print(f"  chain.verify per landing: {per:.2f} ms")
    return statistics.median(t["cli"])


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    with harness.scratch("mb-bench-attest-") as tmp:
        print(f"machine: {harness.machine()}, {harness.git_version()}")
        load0 = os.getloadavg()[0]
        print(f"load average at the start: {load0:.2f} (other load on the machine slows every figure)")
        figures: dict[str, Any] = {"params": {k: getattr(args, k) for k in ("files", "landings", "commits",
                                                                            "rounds")}}
        targets = []
        with harness.PgServer(tmp, prefix="mb_bench_attest") as server:
            print(f"database: {server.kind}; {server.version('fsync', 'synchronous_commit')}")
            landing = await bench_landings(server, tmp, args.files, args.landings)
        added = print_landings(landing, args.files)
        targets.append((f"signing and storing add <= {LANDING_TARGET_MS:g} ms to a landing", f"{added:.1f} ms",
                        added <= LANDING_TARGET_MS))
        verify = await asyncio.to_thread(bench_verify, tmp, args.commits, args.rounds)
        took = print_verify(verify)
        scaled = took * 1000 / args.commits
        targets.append((f"attest verify over {args.commits:,} landings < {VERIFY_TARGET_S:g} s (scaled to 1,000: "
                        f"{scaled:.2f} s)", f"{took:.2f} s", scaled < VERIFY_TARGET_S))
        load1 = os.getloadavg()[0]
        print(f"\nload average at the end: {load1:.2f}")
        print("\ntargets (facts, not assertions):")
        for what, value, ok in targets:
            print(f"  {what:<72} {value:>10}  {met(ok)}")
        figures.update(landing=landing, verify={k: v for k, v in verify.items()}, load=[load0, load1],
                       targets=[{"target": w, "value": v, "met": ok} for w, v, ok in targets])
        return figures


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = cli.parser("python -m bench.attest", __doc__, "4 landings on 200 files, verify over 100")
    return cli.parse_counts(p, argv, files=(1000, 200, "files in the generated repository"),
                                landings=(20, 4, "timed landings"),
                                commits=(1000, 100, "landings in the verified history"),
                                rounds=(3, 1, "timed rounds of attest verify"))


def main(argv: list[str] | None = None) -> None:
    cli.run_and_write(bench, parse_args(argv))
