"""The speculation window's policies in a model: the real planner (``mergebot.landing.window.planner.decide``) over an
abstract queue, with no git, no database and no server, so a policy's ceiling is known in seconds.

The model: ``W`` verifier workers, a check of ``D`` (within +-3%), a queue that never runs dry (the fleet's 100 agents
keep about 90 candidates waiting), and candidates that fail with their agent's rate (a uniform ``p``, or a mix of agents
as ``python -m bench.fleet --agents-mix``). A run fails when any candidate it covers is bad: deterministic, as the
fleet's synthetic check, and without retries. The executor here does what ``mergebot.landing.window.executor`` does with
each decision, simplified: it fills the chain up to ``W`` runs with batches that stay likelier to pass than the
threshold, lands a passing prefix, cuts behind a failure (the cut runs count: a worker started them), judges a failing
single apart (rejected on its run), leaves a suspect out (judged on its failed run when its rest lands, else back to the
queue), and judges a failed stretch apart (each candidate on main alone: one run each; one that passes comes back with
the estimate ``planner.PROVEN``). No stage costs time but the check.

Policies (``--policies``):
  * ``speculative``: no batches, no estimates (the fleet's ``speculative`` mode);
  * ``bisect``: risk-aware batches, a failed batch bisected on the free workers (planner rule 4);
  * ``leave-out``: risk-aware batches, the likeliest culprit always left out (rule 4a as it was before rule 4b);
  * ``apart``: risk-aware batches, a clear culprit left out, else the stretch judged apart (rules 4a and 4b: the
    product's default).
Estimates: ``--estimates flat`` gives every candidate the fleet's mean rate (a queue that has learned nothing about
its agents), ``oracle`` each agent's true rate (the most the estimate could know).

Printed per fleet and policy, as means over ``--seeds`` seeds: landings per check duration against the verifier's
capacity (W per D), runs per landing, runs cut per landing, and each policy's capacity against ``speculative``'s in
the same process; then the ceiling of any prefix policy from the information a round carries (W nested runs tell
apart at most W+1 outcomes: log2(W+1) bits, against the fleet's entropy per candidate). Run from the repository
root::

    python -m bench.fleet.window_model
    python -m bench.fleet.window_model --estimates oracle --thresholds 0.7,0.75 --batch 8

It asserts nothing and times nothing: every figure is counted in the model's own time.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import math
import random
import statistics
from dataclasses import dataclass, field

from bench.fleet.agents import agent_mix
from mergebot.landing.window import planner

POLICIES = ("speculative", "bisect", "leave-out", "apart")
CLEAR = {"bisect": planner.CLEAR_SHARE, "leave-out": 0.0, "apart": planner.CLEAR_SHARE, "speculative": 1.0}


@dataclass(eq=False)
class Cand:
    bad: bool
    risk: float


@dataclass(eq=False)
class Run:
    covers: list[Cand]
    slot: Slot | None = None  # None: a run on main alone (judged apart)
    cancelled: bool = False

    @property
    def fails(self) -> bool:
        return any(c.bad for c in self.covers)


@dataclass(eq=False)
class Slot:
    cand: Cand
    run: Run | None = None
    outcome: str | None = None


@dataclass
class Model:
    workers: int
    batch: int
    threshold: float
    policy: str
    rng: random.Random
    fleet: list[tuple[float, float]]  # (share of agents, failure rate)
    oracle: bool
    duration: float = 1.0
    now: float = 0.0
    slots: list[Slot] = field(default_factory=list)
    back: list[Cand] = field(default_factory=list)  # cut or re-planned: taken before new ones, safer first
    suspects: dict[int, tuple[Cand, Cand]] = field(default_factory=dict)  # id(suspect) -> (suspect, its rest)
    waiting: list[Run] = field(default_factory=list)
    events: list[tuple[float, int, Run]] = field(default_factory=list)
    free: int = 0
    landed: int = 0
    runs: int = 0
    cut: int = 0
    seq: itertools.count[int] = field(default_factory=itertools.count)

    def new(self) -> Cand:
        mean = sum(share * rate for share, rate in self.fleet)
        pick, acc = self.rng.random(), 0.0
        rate = self.fleet[-1][1]
        for share, r in self.fleet:
            acc += share
            if pick < acc:
                rate = r
                break
        return Cand(self.rng.random() < rate, rate if self.oracle else mean)

    def take(self) -> Cand:
        if self.back:
            self.back.sort(key=lambda c: c.risk)
            return self.back.pop(0)
        return self.new()

    def start(self, run: Run) -> None:
        self.runs += 1
        self.waiting.append(run)

    def checkpoint(self, slot: Slot) -> None:
        slot.run = Run([s.cand for s in self.slots[:self.slots.index(slot) + 1]], slot)
        slot.outcome = None
        self.start(slot.run)

    def cancel(self, slot: Slot) -> None:
        if slot.run is not None and slot.outcome is None and not slot.run.cancelled:
            slot.run.cancelled = True
            self.cut += 1

    def risky(self) -> bool:
        return self.policy != "speculative"

    def fill(self) -> None:
        def checkpoints() -> int:
            return sum(s.run is not None for s in self.slots)
        while not any(s.outcome == "fail" for s in self.slots) and checkpoints() < self.workers:
            cand = self.take()
            start = max((i + 1 for i, s in enumerate(self.slots) if s.run is not None), default=0)
            batch = self.slots[start:]
            if self.risky() and batch:
                passes = math.prod(1.0 - s.cand.risk for s in batch) * (1.0 - cand.risk)
                if passes < self.threshold or len(batch) >= self.batch:
                    self.checkpoint(batch[-1])
                    if checkpoints() >= self.workers:
                        self.back.append(cand)
                        break
            self.slots.append(Slot(cand))
            if not self.risky() or 1.0 - cand.risk < self.threshold or len(self.slots) - start >= self.batch:
                self.checkpoint(self.slots[-1])
        if self.slots and self.slots[-1].run is None and not any(s.outcome == "fail" for s in self.slots):
            self.checkpoint(self.slots[-1])

    def plan(self) -> list[planner.Slot]:
        return [planner.Slot(i, s.outcome, True, s.run is not None, s.cand.risk if self.risky() else 0.0)
                for i, s in enumerate(self.slots)]

    def act(self) -> bool:
        """One decision of the planner, carried out; False when it says wait."""
        self.fill()
        pending = sum(1 for s in self.slots if s.run is not None and s.outcome is None)
        plan, free = self.plan(), max(0 if pending else 1, self.workers - pending)
        d = planner.decide(plan, free=free, clear_share=CLEAR[self.policy])
        if self.policy == "bisect" and d.action in ("leave_out", "apart"):  # estimates shape batches and bisections,
            points = planner.bisection(plan, len(plan) - 1, free)  # but nothing leaves the chain
            d = planner.Decision("checkpoint", points[0], points[1:]) if points else planner.Decision("wait")
        if d.action == "land":
            unit, self.slots = self.slots[:d.index + 1], self.slots[d.index + 1:]
            for s in unit:
                self.cancel(s)
            self.landed += len(unit)
            done = {id(s.cand) for s in unit}
            for key, (left, rest) in list(self.suspects.items()):
                if id(rest) in done:  # judged on its failed run, the tree it now sits on
                    del self.suspects[key]
                    if not left.bad:
                        self.back.append(left)
        elif d.action == "cut":
            for s in self.slots[d.index:]:
                self.cancel(s)
                self.back.append(s.cand)
            del self.slots[d.index:]
        elif d.action == "checkpoint":
            for i in (d.index, *d.more):
                self.checkpoint(self.slots[i])
        elif d.action == "judge_head":  # rejected on its own run (no retries); its fix is a new push
            self.slots.pop(0)
        elif d.action == "leave_out":
            sus, behind = self.slots[d.index], self.slots[d.index + 1:]
            del self.slots[d.index:]
            for s in behind:
                self.cancel(s)
                s.run, s.outcome = None, None
                self.slots.append(s)
            if not self.slots:
                self.back.append(sus.cand)
                return True
            tail = self.slots[-1]
            if tail.run is None or tail.outcome is not None:
                self.checkpoint(tail)
            self.suspects[id(sus.cand)] = (sus.cand, tail.cand)
        elif d.action == "apart":
            for s in self.slots[d.index:]:
                self.start(Run([s.cand]))
            del self.slots[d.index:]
        else:
            return False
        return True

    def dispatch(self) -> None:
        while self.free and self.waiting:
            run = self.waiting.pop(0)
            if run.cancelled:
                continue
            self.free -= 1
            end = self.now + self.duration * self.rng.uniform(0.97, 1.03)
            heapq.heappush(self.events, (end, next(self.seq), run))

    def simulate(self, landings: int) -> tuple[float, float, float]:
        self.free = self.workers
        while self.act():
            pass
        self.dispatch()
        while self.landed < landings:
            self.now, _, run = heapq.heappop(self.events)
            self.free += 1
            if run.slot is None:  # judged apart on main: a pass comes back proven, a failure is rejected
                if not run.fails:
                    run.covers[0].risk = planner.PROVEN
                    self.back.append(run.covers[0])
            elif not run.cancelled:
                run.slot.outcome = "fail" if run.fails else "pass"
            while self.act():
                pass
            live = {id(s.cand): s for s in self.slots}
            for key, (sus, rest) in list(self.suspects.items()):
                if id(rest) not in live or live[id(rest)].outcome == "fail":
                    del self.suspects[key]
                    self.back.append(sus)
            self.dispatch()
        return (self.landed / self.now * self.duration / self.workers, self.runs / self.landed,
                self.cut / self.landed)


def entropy(p: float) -> float:
    return 0.0 if p in (0.0, 1.0) else -(p * math.log2(p) + (1 - p) * math.log2(1 - p))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.fleet.window_model", description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=4, help="the largest batch (MERGEBOT_BATCH_SIZE)")
    ap.add_argument("--fail-rate", type=float, default=0.1)
    ap.add_argument("--agents-mix", type=agent_mix, default=[(0.7, 0.03), (0.3, 0.3)], metavar="SHARE:RATE,...")
    ap.add_argument("--estimates", choices=["flat", "oracle"], default="flat")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--thresholds", default=str(planner.MIN_PASS), help="a batch's least chance to pass, each")
    ap.add_argument("--landings", type=int, default=1500, help="per seed")
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args(argv)
    policies = [p for p in args.policies.split(",") if p]
    if unknown := [p for p in policies if p not in POLICIES]:
        raise SystemExit(f"unknown policies {unknown}: {', '.join(POLICIES)}")
    fleets = {f"uniform {args.fail_rate}": [(1.0, args.fail_rate)],
              "mixed " + ",".join(f"{s}:{r}" for s, r in args.agents_mix): list(args.agents_mix)}
    print(f"window model: {args.workers} workers, batches up to {args.batch}, {args.estimates} estimates, "
          f"{args.seeds} seeds x {args.landings} landings; the real planner, no I/O")
    for name, fleet in fleets.items():
        print(f"\n  {name}")
        print(f"  {'policy':12} {'least pass':>10} {'x capacity':>10} {'runs/landing':>13} {'cut/landing':>12} "
              f"{'vs speculative':>15}")
        base = None
        for threshold in [float(t) for t in args.thresholds.split(",")]:
            for policy in policies:
                got = [Model(args.workers, args.batch, threshold, policy, random.Random(seed), fleet,
                             args.estimates == "oracle").simulate(args.landings) for seed in range(1, args.seeds + 1)]
                cap, runs, cut = (statistics.mean(g[i] for g in got) for i in range(3))
                base = cap if policy == "speculative" and base is None else base
                vs = f"{cap / base:.2f}x" if base else "-"
                print(f"  {policy:12} {threshold:10.2f} {cap:10.3f} {runs:13.3f} {cut:12.3f} {vs:>15}")
        bits = sum(share * entropy(rate) for share, rate in fleet)
        mean = sum(share * rate for share, rate in fleet)
        decided = math.log2(args.workers + 1) / bits
        print(f"  ceiling of a prefix policy: {math.log2(args.workers + 1):.2f} bits per round of {args.workers} "
              f"nested runs over {bits:.3f} bits per candidate = {decided:.2f} candidates decided per round, "
              f"{decided * (1 - mean) / args.workers:.2f}x capacity landed, at least "
              f"{args.workers / (decided * (1 - mean)):.2f} runs per landing")


if __name__ == "__main__":
    main()
