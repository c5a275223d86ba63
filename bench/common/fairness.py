"""Fairness and sharing figures for the benchmarks, pure: Jain's fairness index, and how busy a set of servers was
while work waited for them.

Rules:

* **Jain's index** of allocations ``x_1..x_n`` is ``(sum x)^2 / (n * sum x^2)``: 1 when every one got the same,
  ``1/n`` when one got everything. An agent that got nothing counts (a zero), so pass every agent of equal weight,
  not only those that were served. NaN when there is nothing to share (no agents, or all zero).
* **Busy while waiting**: over the moments when some work waited (the union of the ``waits`` intervals), the mean
  share of ``servers`` that were running something (at most all of them): 1.0 means no server stood idle while
  work waited. NaN when nothing ever waited.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def jain_index(xs: Iterable[float]) -> float:
    """Jain's fairness index of the allocations ``xs`` (1 = equal shares, 1/n = one took all)."""
    values = [float(x) for x in xs]
    total = sum(values)
    squares = sum(x * x for x in values)
    if not values or squares <= 0:
        return float("nan")
    return total * total / (len(values) * squares)


def _union(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for start, end in sorted((s, e) for s, e in intervals if e > s):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def busy_while_waiting(runs: Sequence[tuple[float, float]], waits: Sequence[tuple[float, float]],
                       servers: int) -> float:
    """The mean share of ``servers`` running one of ``runs`` while any of ``waits`` was waiting."""
    waiting = _union(waits)
    span = sum(e - s for s, e in waiting)
    if span <= 0 or servers < 1:
        return float("nan")
    edges = sorted([(s, 1) for s, e in runs if e > s] + [(e, -1) for s, e in runs if e > s])
    busy = 0.0
    for w_start, w_end in waiting:
        running, at = 0, w_start
        for t, d in edges:
            if t > at and t > w_start:  # the stretch [at, t) clipped to the wait
                lo, hi = max(at, w_start), min(t, w_end)
                if hi > lo:
                    busy += min(running, servers) * (hi - lo)
                at = t
            if t >= w_end:
                break
            running += d
        if w_end > at:
            busy += min(running, servers) * (w_end - max(at, w_start))
    return busy / (servers * span)
