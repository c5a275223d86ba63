"""The benchmarks' figures: percentiles and summaries, how numbers are printed, step timers, and where the
machine's CPU went.

Rules:

* **Percentiles.** ``pctl`` is the q-quantile linear between the closest ranks (NaN when empty); ``nearest`` is
  the value at rank ``round(q * (n - 1))``, no interpolation. Each benchmark keeps the one it has always printed,
  so figures stay comparable across versions.
* **Printing.** ``fmt`` prints ``-`` for a figure that was not measured (None or NaN), else the number with
  ``digits`` decimals and thousands separators (``sep=""``: none); ``met`` says whether a target was met.
  Ratios are printed as measured / reference, never the other way round, with the reference named.
* **Steps.** ``Steps`` times named steps inside one measured operation by wrapping the functions it calls
  where they are looked up (nothing timed is changed); a step that runs twice is summed; ``close`` ends one
  operation's row.
* **CPU.** From /proc: a process's CPU seconds are its own user + system time, what its reaped children used,
  and the user + system time of its live children (``deep``: of every live descendant, e.g. the git and hook
  processes below a server's children). ``CpuMeter`` turns two readings into cores over the wall time: the
  server processes, PostgreSQL (its postmaster: the backends are its children; NaN when it does not run here),
  this driver (``driver_children``: with the commands it ran and reaped) and everything else on the machine
  (the machine's busy time from /proc/stat minus those), so other load on the machine is visible.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


# -- percentiles and printing ---------------------------------------------------------------------------------


def pctl(xs: list[float], q: float) -> float:
    """The q-quantile (0..1), linear between closest ranks; NaN when empty."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = (len(s) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def nearest(xs: list[float], q: float) -> float:
    """The value at rank ``round(q * (n - 1))`` of the sorted values; NaN when empty."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def summary(xs: list[float]) -> dict[str, float]:
    """Seconds in, milliseconds out: count, p50, p95, p99, max."""
    return {"n": len(xs), "p50": pctl(xs, 0.5) * 1000, "p95": pctl(xs, 0.95) * 1000,
            "p99": pctl(xs, 0.99) * 1000, "max": max(xs) * 1000 if xs else float("nan")}


def fmt(x: float | None, digits: int = 1, suffix: str = "", *, sep: str = ",") -> str:
    if x is None or x != x:  # None or NaN
        return "-"
    return f"{x:{sep}.{digits}f}{suffix}"


def met(ok: bool) -> str:
    return "met" if ok else "NOT met"


# -- steps ----------------------------------------------------------------------------------------------------


class Steps:
    """Durations (ms) of named steps within one operation, summed when a step runs more than once."""

    def __init__(self) -> None:
        self.current: dict[str, float] = {}
        self.facts: dict[str, Any] = {}
        self.rows: list[dict[str, Any]] = []

    def add(self, name: str, ms: float) -> None:
        self.current[name] = self.current.get(name, 0.0) + ms

    def sync(self, name: str, fn: Callable[..., T]) -> Callable[..., T]:
        def timed(*args: Any, **kwargs: Any) -> T:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(name, (time.perf_counter() - t0) * 1000)
        return timed

    def coro(self, name: str, fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
        async def timed(*args: Any, **kwargs: Any) -> T:
            return await self.around(name, fn(*args, **kwargs))
        return timed

    async def around(self, name: str, aw: Awaitable[T]) -> T:
        t0 = time.perf_counter()
        try:
            return await aw
        finally:
            self.add(name, (time.perf_counter() - t0) * 1000)

    def close(self, **facts: Any) -> dict[str, Any]:
        """End the operation: its steps, facts noted on the way and ``facts``, as one row."""
        done: dict[str, Any] = {**self.current, **self.facts, **facts}
        self.rows.append(done)
        self.current, self.facts = {}, {}
        return done

    def column(self, name: str, kind: str | None = None) -> list[float]:
        """The step's durations, over the operations where it ran (of that ``kind``, when given)."""
        return [float(r[name]) for r in self.rows if name in r and (kind is None or r.get("kind") == kind)]


# -- processes and their CPU ----------------------------------------------------------------------------------


def cpu_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        parts = [int(x) for x in f.readline().split()[1:]]
    idle = parts[3] + (parts[4] if len(parts) > 4 else 0)
    return sum(parts) - idle, sum(parts)


def proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command (state first), or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def parents() -> dict[int, int]:
    """Every live process: its parent."""
    out: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (st := proc_stat(int(entry.name))) is not None:
            out[int(entry.name)] = int(st[1])
    return out


def descendants(root: int) -> list[int]:
    """``root`` and every live process below it."""
    parent = parents()
    out, frontier = [root], [root]
    while frontier:
        frontier = [p for p, pp in parent.items() if pp in frontier]
        out.extend(frontier)
    return out


def cpu_seconds(root: int | None, *, deep: bool = False) -> float:
    """CPU seconds of a process, its reaped children, and its live children (``deep``: every live descendant)."""
    if root is None or (st := proc_stat(root)) is None:
        return float("nan")
    ticks = sum(int(x) for x in st[11:15])
    below = descendants(root)[1:] if deep else [p for p, pp in parents().items() if pp == root]
    for pid in below:
        if (child := proc_stat(pid)) is not None:
            ticks += int(child[11]) + int(child[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds(*, children: bool = True) -> float:
    """This process (the agents or the load generator), with the commands it ran and reaped (``children``)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    total = me.ru_utime + me.ru_stime
    if children:
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        total += kids.ru_utime + kids.ru_stime
    return total


def status_kb(pid: int, field_name: str) -> int:
    """A ``/proc/PID/status`` field in kB (VmRSS, VmHWM), 0 when the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_by_process() -> dict[int, tuple[str, float]]:
    """Every live process: (its command line, shortened; CPU seconds so far)."""
    out: dict[int, tuple[str, float]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or (st := proc_stat(int(entry.name))) is None:
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        out[int(entry.name)] = (cmd[:70] or "?", (int(st[11]) + int(st[12])) / tick)
    return out


def other_load(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], ours: set[int],
               seconds: float, top: int = 4) -> list[tuple[str, float]]:
    """The processes outside this benchmark that used the most CPU in between, in cores."""
    used = []
    for pid, (cmd, cpu) in after.items():
        if pid in ours:
            continue
        used.append((cmd, (cpu - before.get(pid, (cmd, 0.0))[1]) / seconds))
    return [u for u in sorted(used, key=lambda u: -u[1])[:top] if u[1] >= 0.02]


@dataclass(frozen=True)
class CpuReading:
    at: float  # time.monotonic()
    machine: tuple[int, int]
    server: list[float]
    postgres: float
    driver: float


class CpuMeter:
    """Where the machine's CPU went from now on, in cores: the bot, PostgreSQL, this driver, and the rest."""

    def __init__(self, server_pids: list[int], pg_pid: int | None, *, deep: bool = False,
                 driver_children: bool = True) -> None:
        self.pids, self.pg_pid, self.deep, self.driver_children = server_pids, pg_pid, deep, driver_children
        self.start = self.reading()

    def reading(self) -> CpuReading:
        return CpuReading(time.monotonic(), cpu_jiffies(), [cpu_seconds(p, deep=self.deep) for p in self.pids],
                          cpu_seconds(self.pg_pid, deep=self.deep), own_cpu_seconds(children=self.driver_children))

    def read(self, end: CpuReading | None = None, wall: float | None = None) -> dict[str, float]:
        """Cores used from the start to ``end`` (a reading now, without), over ``wall`` seconds (that span's)."""
        end = end or self.reading()
        s = self.start
        wall = wall if wall is not None else end.at - s.at
        cpus = os.cpu_count() or 1
        machine = cpus * (end.machine[0] - s.machine[0]) / max(1, end.machine[1] - s.machine[1])
        server = sum(b - a for a, b in zip(s.server, end.server, strict=True)) / wall
        pg = (end.postgres - s.postgres) / wall
        driver = (end.driver - s.driver) / wall
        other = machine - server - driver - (pg if pg == pg else 0.0)
        return {"cpus": cpus, "machine_busy_cores": machine, "server_cores": server, "postgres_cores": pg,
                "driver_cores": driver, "other_cores": other}


def cpu_line(c: dict[str, Any]) -> str:
    return (f"CPU in cores (of {c['cpus']}): mergebot serve {fmt(c['server_cores'], 2)}, PostgreSQL "
            f"{fmt(c['postgres_cores'], 2)}, this driver {fmt(c['driver_cores'], 2)}, everything else "
            f"{fmt(c['other_cores'], 2)}; machine busy {fmt(c['machine_busy_cores'], 2)}")
