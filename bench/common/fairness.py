"""Sharing figures for the benchmarks, pure: how busy a set of servers was while work waited for them, and Jain's
fairness index over what each party got (``jain``: the queue's own ``mergebot.landing.window.fair.jain_index``, NaN
when there was nothing to share).

Rules:

* **Jain's index** of allocations ``x_1..x_n`` is ``(sum x)^2 / (n * sum x^2)``: 1 when every one got the same,
  ``1/n`` when one got everything. An agent that got nothing counts (a zero), so pass every agent of equal weight,
  not only those that were served.
* **The even split's index** (``even_split_jain``): the index of ``units`` whole units (landings) split among
  ``parties`` as evenly as they go (each ``units // parties`` or one more): a yardstick for a short run, where some
  agents land nothing however fair the queue (1,000 agents, 503 landings: 0.503). Not a strict bound on
  verifier-seconds, which come in fractions, and also to agents whose work did not land.
* **Busy while waiting**: over the moments when some work waited (the union of the ``waits`` intervals), the mean
  share of ``servers`` that were running something (at most all of them): 1.0 means no server stood idle while
  work waited. NaN when nothing ever waited.
* **Refill gaps** (``refill_gaps``): for each run that ended while work waited, the time until the next run started
  (any server's): how long a freed server stood idle before the queue gave it work. With checks of d seconds and
  a gap g after each, the servers are busy about d / (d + g) of the time (with the median gap: roughly what the gap
  alone allows).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from mergebot.landing.window.fair import jain_index


def jain(xs: Iterable[float]) -> float:
    """Jain's index of ``xs`` (``jain_index``), NaN when there is nothing to share (no party, or none got any)."""
    values = [float(x) for x in xs]
    return jain_index(values) if any(values) else float("nan")


def even_split_jain(units: int, parties: int) -> float:
    """Jain's index of ``units`` whole units split as evenly as they go among ``parties`` (NaN: none to split)."""
    if units <= 0 or parties <= 0:
        return float("nan")
    q, r = divmod(units, parties)
    return jain_index([float(q + 1)] * r + [float(q)] * (parties - r))


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


def refill_gaps(runs: Sequence[tuple[float, float]], waits: Sequence[tuple[float, float]]) -> list[float]:
    """Per run that ended while some of ``waits`` waited: seconds from its end to the next start of any run."""
    waiting = _union(waits)
    starts = sorted(s for s, e in runs if e > s)
    out: list[float] = []
    for _, end in runs:
        if not any(lo <= end < hi for lo, hi in waiting):
            continue
        i = bisect.bisect_left(starts, end)
        if i < len(starts):
            out.append(starts[i] - end)
    return out
