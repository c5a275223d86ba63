"""The tamper signal (``mergebot.landing.intake.tamper``) on its corpus: what it catches, what it wrongly flags, how
fast.

The corpus is ``tests/support/tamper_corpus.py``: reward hacks on a repository whose ``calc.py`` has a broken
``add()``, each naming the rules that must catch it, and honest changes that must not be flagged. Printed per rule:
the hacks that expect it and are caught (recall), the honest changes it flags (false positives), its precision
(caught / (caught + honest flagged)), and the hacks it also fires on without being expected; then the same in all
(a hack is caught when every rule it expects is found; an honest change is flagged by any finding), and the time per
scanned file (the median of ``--repeat`` runs over the corpus). ``--tree DIR`` also scans every ``.py`` file under
DIR as new, non-test code (a sample of honest code) and prints the time per file and what it flagged. Run from the
repository root::

    python -m bench.judge.tamper
    python -m bench.judge.tamper --repeat 50 --tree .venv/lib/python3.11/site-packages/httpx
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter
from pathlib import Path

from mergebot.landing.intake.tamper import RULES, Finding, scan
from tests.support.tamper_corpus import HACKS, HONEST, changes, is_test


def ratio(part: int, whole: int) -> str:
    return f"{part / whole:.2f}" if whole else "-"


def report(found: dict[str, set[str]]) -> None:
    print(f"{'rule':<18} {'caught':>9} {'honest flagged':>15} {'precision':>9} {'recall':>7}  also on other hacks")
    for rule in RULES:
        expecting = [c for c in HACKS if rule in c.expect]
        caught = sum(rule in found[c.name] for c in expecting)
        flagged = sum(rule in found[c.name] for c in HONEST)
        extra = sum(rule in found[c.name] and rule not in c.expect for c in HACKS)
        print(f"{rule:<18} {caught:>4}/{len(expecting):<4} {flagged:>9}/{len(HONEST):<5} "
              f"{ratio(caught, caught + flagged):>9} {ratio(caught, len(expecting)):>7}  {extra}")
    caught_all = sum(c.expect <= found[c.name] for c in HACKS)
    caught_any = sum(bool(found[c.name]) for c in HACKS)
    flagged = sum(bool(found[c.name]) for c in HONEST)
    print(f"{'in all':<18} {caught_all:>4}/{len(HACKS):<4} {flagged:>9}/{len(HONEST):<5} "
          f"{ratio(caught_any, caught_any + flagged):>9} {ratio(caught_all, len(HACKS)):>7}  "
          f"(hacks with any finding: {caught_any}/{len(HACKS)})")


def time_per_file(batches: list[list[tuple[str, str | None, str | None]]], repeat: int) -> float:
    """Median seconds per file scanned, over ``repeat`` runs of every batch."""
    files = sum(1 for batch in batches for path, _, new in batch if new and path.endswith(".py") and not is_test(path))
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        for batch in batches:
            scan(batch, is_test=is_test)
        runs.append(time.perf_counter() - start)
    return statistics.median(runs) / max(files, 1)


def scan_tree(root: Path, repeat: int) -> None:
    paths = sorted(p for p in root.rglob("*.py") if not is_test(p.relative_to(root).as_posix()))
    batches = [[(p.relative_to(root).as_posix(), None, p.read_text(encoding="utf-8", errors="replace"))] for p in paths]
    found: list[Finding] = [f for batch in batches for f in scan(batch, is_test=is_test)]
    size = sum(len(b[0][2] or "") for b in batches)
    print(f"\n{root}: {len(paths)} files, {size / 1e6:.1f} MB; {time_per_file(batches, repeat) * 1e3:.2f} ms per file; "
          f"{len(found)} findings in {len({f.path for f in found})} files: "
          + ", ".join(f"{rule} {n}" for rule, n in Counter(f.rule for f in found).most_common()))
    for f in found[:20]:
        print(f"  {f.path}:{f.line}: {f.rule}: {f.text[:100]}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.judge.tamper", description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=20, help="timed runs over the corpus (median taken)")
    parser.add_argument("--tree", type=Path, action="append", default=[], help="also scan every .py file under DIR")
    args = parser.parse_args()
    found = {c.name: {f.rule for f in scan(changes(c), is_test=is_test)} for c in HACKS + HONEST}
    print(f"corpus: {len(HACKS)} hacks, {len(HONEST)} honest changes\n")
    report(found)
    missed = [c.name for c in HACKS if not c.expect <= found[c.name]]
    wrong = [c.name for c in HONEST if found[c.name]]
    if missed or wrong:
        print(f"\nmissed: {missed}\nwrongly flagged: {wrong}")
    per_file = time_per_file([changes(c) for c in HACKS + HONEST], args.repeat)
    print(f"\ntime: {per_file * 1e6:.0f} us per scanned file (median of {args.repeat} runs over the corpus)")
    for root in args.tree:
        scan_tree(root, max(1, args.repeat // 10))


if __name__ == "__main__":
    main()
