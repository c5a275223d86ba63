"""The offered-load fleet's figures and tables (``python -m bench.fleet --offered``).

Per run: landings, claim -> landed (the agent's claim answer to the landed row of that claim) and push -> landed
(the candidate's ``queued_at`` to ``landed_at``), p50 and p95; the claims lost while their agents worked and the
work redone (``offered_figures.lease_accounting``), next to the leases the server's recovery loop found lapsed;
Jain's index of verifier-seconds across all agents (``bench.common.fairness.jain``, the queue's own
``mergebot.landing.window.fair.jain_index``; an agent that got none counts as 0): each run's seconds split evenly
over the candidates it was started for (a window's checkpoint covers its batch: ``verify_jobs.covers``, else the one
candidate it names), each share to that candidate's owner: what the verifier spent on each agent's behalf. Beside it
the index as the cost view charges landings (``run_charges``: a landing run's seconds split over every member it
landed, any other run to the one candidate it names), which charges a slot whose own run was cancelled under a
later pass twice (its run, and a share of the one that landed it) and the slot that passed once; ``charged_s`` in
the JSON says where the seconds went by charge. The most work in
progress any agent held; the verifiers' busy share while work waited; every refusal by
kind, and how many named a next step. Ratios are against the first run of the sitting (the baseline), and
``--compare-admission`` adds the ratios issue 45 sets targets for.
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from typing import Any

from bench.common.fairness import busy_while_waiting, even_split_jain, jain, refill_gaps
from bench.common.measure import fmt, met, pctl
from bench.fleet.agents import VERIFY_PURPOSES
from bench.fleet.offered import Log
from bench.fleet.offered_figures import (
    counts_by_kind,
    every_refusal_named_next,
    lease_accounting,
    max_wip,
    refusal_tally,
)
from bench.fleet.report import print_trace_and_note

P95_TARGET = 2.5  # p95 claim -> landed at 10x over 1x, admission on
JAIN_TARGET = 0.95
BUSY_TARGET = 0.9


def per_agent_seconds(charges: list[tuple[Any, ...]], agent_ids: list[int]) -> dict[int, float]:
    """Verifier-seconds per agent: each run's seconds split evenly over the rows it has (a batch: one per member)."""
    rows_per_run: dict[Any, int] = defaultdict(int)
    for run_id, *_ in charges:
        rows_per_run[run_id] += 1
    out = dict.fromkeys(agent_ids, 0.0)
    for run_id, pusher, seconds, *_ in charges:
        if pusher in out:
            out[pusher] += float(seconds or 0.0) / rows_per_run[run_id]
    return out


def per_agent_run_seconds(runs: list[tuple[Any, ...]], owner_of: dict[int, int],
                          agent_ids: list[int]) -> dict[int, float]:
    """Verifier-seconds per agent: each run's seconds split evenly over the candidates it was started for (its
    ``covers``), each share to that candidate's owner."""
    out = dict.fromkeys(agent_ids, 0.0)
    for covers, seconds in runs:
        members = [c for c in covers or [] if c is not None]
        for cand in members:
            owner = owner_of.get(cand)
            if owner in out:
                out[owner] += float(seconds or 0.0) / len(members)
    return out


def per_agent(events: list[Any], kind: str, agents: int) -> list[int]:
    """How many events of ``kind`` each of the ``agents`` agents had (every agent counted, a zero included)."""
    counts = [0] * agents
    for e in events:
        if e.kind == kind and 0 <= e.agent < agents:
            counts[e.agent] += 1
    return counts


def charged(charges: list[tuple[Any, ...]]) -> dict[str, float]:
    """Verifier-seconds by charge and purpose (``run_charges``; a batch run's seconds counted once)."""
    rows_per_run: dict[Any, int] = defaultdict(int)
    for run_id, *_ in charges:
        rows_per_run[run_id] += 1
    out: dict[str, float] = defaultdict(float)
    for run_id, _, seconds, charge, purpose in charges:
        out[f"{charge}:{purpose}"] += float(seconds or 0.0) / rows_per_run[run_id]
    return dict(out)


def ratio(a: float, b: float) -> float:
    """``a / b``, NaN when ``b`` is 0 or either was not measured."""
    return a / b if b and a == a and b == b else float("nan")


def bound_by_gap(r: dict[str, Any]) -> float:
    """d / (d + g): the busy share a run of d seconds followed by the median refill gap g allows."""
    d, g = r["check_run_s_mean"], r["refill_gap_s"]["p50"]
    return d / (d + g) if d == d and g == g and d + g > 0 else float("nan")


def _p(xs: list[float]) -> dict[str, float]:
    return {"p50": pctl(xs, 0.5), "p95": pctl(xs, 0.95), "n": len(xs)}


def offered_figures(args: argparse.Namespace, t0: float, ended: float, db: dict[str, Any], log: Log,
                    thinks: list[float], lease: float) -> dict[str, Any]:
    landed_at = {(sid, cv): at for sid, cv, at in db["landed"]}
    times = sorted(landed_at.values())
    n = len(landed_at)
    wall = (times[-1] - t0) if times and n >= args.subtasks else ended - t0
    claim_lat = [at - log.claim_at[k] for k, at in landed_at.items() if k in log.claim_at]
    push_lat = [landed_at[(sid, cv)] - queued for _, sid, cv, _, status, queued, _, _ in db["candidates"]
                if status == "landed" and (sid, cv) in landed_at]
    checks = [j for j in db["jobs"] if j[0] in VERIFY_PURPOSES and j[2] is not None and j[3] is not None]
    d_eff = statistics.fmean(j[3] - j[2] for j in checks) if checks else float("nan")
    capacity = args.workers * 3600 / d_eff if checks and d_eff > 0 else float("nan")
    pushes = [e for e in log.events if e.kind == "pushed"]
    span = (max(e.at for e in pushes) - t0) if pushes else float("nan")
    offered = len(pushes) / span * d_eff / args.workers if pushes and span > 0 else float("nan")
    owner_of = {c[0]: c[3] for c in db["candidates"]}
    seconds = per_agent_run_seconds(db["runs"], owner_of, sorted(db["agents"]))
    charged_to = per_agent_seconds(db["charges"], sorted(db["agents"]))
    runs = [(j[2], j[3]) for j in db["jobs"] if j[2] is not None and j[3] is not None]
    waits = [(c[5], c[6] or c[7] or ended) for c in db["candidates"]] + \
            [(j[1], j[2] or j[3] or ended) for j in db["jobs"]]
    tally = refusal_tally(log.refusals)
    verify_runs = sum(1 for j in db["jobs"] if j[0] in VERIFY_PURPOSES)
    return {
        "agents": args.agents, "subtasks": args.subtasks, "landed": n, "wall_s": wall,
        "landings_per_hour": n / wall * 3600 if wall > 0 else 0.0,
        "vs_capacity": (n / wall * 3600) / capacity if wall > 0 and capacity == capacity else float("nan"),
        "check_run_s_mean": d_eff, "think_s_mean": statistics.fmean(thinks) if thinks else float("nan"),
        "lease_s": lease, "offered_measured": offered,
        "verifier_runs_per_landed": verify_runs / n if n else float("nan"),
        "claim_to_landed_s": _p(claim_lat), "push_to_landed_s": _p(push_lat),
        "leases": {**lease_accounting(log.events), "lapsed_server": len(db["lapsed"])},
        "jain_verifier_seconds": jain(seconds.values()),
        "jain_even_bound": even_split_jain(n, len(seconds)),
        "jain_among_served": jain(v for v in seconds.values() if v > 0),
        "jain_run_charges": jain(charged_to.values()),
        "jain_claims": jain(per_agent(log.events, "claim", args.agents)),
        "jain_landings": jain(per_agent(log.events, "landed", args.agents)),
        "agent_seconds": {"min": min(seconds.values(), default=float("nan")),
                          "max": max(seconds.values(), default=float("nan")),
                          "top": sorted(seconds.values(), reverse=True)[:5]},
        "charged_s": charged(db["charges"]),
        "max_wip": max_wip(log.events), "busy_while_waiting": busy_while_waiting(runs, waits, args.workers),
        "refill_gap_s": _p(refill_gaps(runs, waits)),
        "refusals": tally, "every_refusal_named_next": every_refusal_named_next(tally),
        "events": counts_by_kind(log.events), "errors": log.errors[:20], "error_count": len(log.errors),
        "subtask_statuses": db["statuses"],
    }


def print_offered(results: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    wip_cap = dict(kv.split("=", 1) for kv in args.server_env).get("MERGEBOT_AGENT_WIP")
    print(f"\nScenario 1 at the seeds' scale: {args.agents} agents ({results[0]['concurrency'] if results else ''}), "
          f"{args.subtasks} subtasks, check {args.duration:g} s, failure rate {args.fail_rate:g}, {args.workers} "
          f"workers, up to {args.pipeline} claims per agent, heartbeats {args.heartbeat}")
    cols = [("run", 26), ("landed", 10), ("wall s", 7), ("x cap", 6), ("offered", 8), ("claim->land p50", 16),
            ("p95", 7), ("push->land p50", 15), ("p95", 7), ("lost", 5), ("redone", 7), ("Jain", 6),
            ("WIP max", 8), ("busy|wait", 10), ("refusals", 9)]
    print("  " + " ".join(f"{c:>{w}}" if i else f"{c:<{w}}" for i, (c, w) in enumerate(cols)))
    print("  " + "-" * (sum(w for _, w in cols) + len(cols) - 1))
    for r in results:
        vals = [r["name"], f"{r['landed']}/{r['subtasks']}", fmt(r["wall_s"]), fmt(r["vs_capacity"], 2),
                fmt(r["offered_measured"], 2), fmt(r["claim_to_landed_s"]["p50"], 1),
                fmt(r["claim_to_landed_s"]["p95"], 1), fmt(r["push_to_landed_s"]["p50"], 1),
                fmt(r["push_to_landed_s"]["p95"], 1), str(r["leases"]["claims_lost_while_working"]),
                str(r["leases"]["work_redone"]), fmt(r["jain_verifier_seconds"], 3), str(r["max_wip"]["max"]),
                fmt(r["busy_while_waiting"], 2), str(sum(t["n"] for t in r["refusals"].values()))]
        print("  " + " ".join(f"{v:>{w}}" if i else f"{v:<{w}}" for i, (v, (_, w)) in enumerate(
            zip(vals, cols, strict=True))))
    print("  (x cap: landings over the verifier's capacity W x 3600 / mean check run; offered: pushes per second x "
          "mean check run / W, as measured; lost: claims lost while their agent worked; Jain: of verifier-seconds "
          "over every agent, each run split over the candidates it was started for; busy|wait: the workers' busy "
          "share while work waited)")
    base = results[0] if results else None
    for r in results:
        lz = r["leases"]
        print(f"\n  {r['name']}: planned {r['factor']:g}x the verifier's capacity (mean think "
              f"{fmt(r['think_s_mean'], 1)} s, lease {r['lease_s']:g} s); {lz['claims']} claims, "
              f"{lz['pushes_refused_not_under_claim']} pushes refused as not under a claim, {lz['lapsed_server']} "
              f"leases lapsed by the server's clock; {fmt(r['verifier_runs_per_landed'], 2)} runs per landing; "
              f"agents' verifier-seconds min {fmt(r['agent_seconds']['min'], 1)} max "
              f"{fmt(r['agent_seconds']['max'], 1)} (Jain among agents served {fmt(r['jain_among_served'], 3)}; "
              f"as run_charges charges landings {fmt(r['jain_run_charges'], 3)}); "
              f"Jain of claims per agent {fmt(r['jain_claims'], 3)}, of landings {fmt(r['jain_landings'], 3)}; "
              f"its landings split as evenly as whole ones go would score "
              f"{fmt(r['jain_even_bound'], 3)}; a verifier freed while work waited got its next run after p50 "
              f"{fmt(r['refill_gap_s']['p50'], 2)} s, p95 {fmt(r['refill_gap_s']['p95'], 2)} s (busy about "
              f"{fmt(bound_by_gap(r), 2)})")
        if base is not None and r is not base:
            p95 = ratio(r["claim_to_landed_s"]["p95"], base["claim_to_landed_s"]["p95"])
            print(f"    against the baseline {base['name']}: p95 claim->landed {fmt(p95, 2)}x, landings/h "
                  f"{fmt(ratio(r['landings_per_hour'], base['landings_per_hour']), 2)}x, Jain "
                  f"{fmt(ratio(r['jain_verifier_seconds'], base['jain_verifier_seconds']), 2)}x")
        for kind, t in r["refusals"].items():
            print(f"    refused {kind}: {t['n']}, {t['named_next']} named a next step; e.g. {t['example'][:160]!r}")
        cap = f" (MERGEBOT_AGENT_WIP={wip_cap}: {met(r['max_wip']['max'] <= int(wip_cap))})" \
            if wip_cap and wip_cap.isdigit() else ""
        print(f"    most work in progress by one agent: {r['max_wip']['max']}{cap}; events {r['events']}; "
              f"setup {fmt(r['setup_s'])} s, run {fmt(r['run_s'])} s, {args.agents} threads started in "
              f"{fmt(r['threads_start_s'], 2)} s, ended {fmt(r['agents_ended_s'], 1)} s after the run "
              f"({r['agents_still_running']} still running); load {r['load_start']} -> {r['load_end']}")
        print_trace_and_note(r)
        if r["error_count"]:
            print(f"    {r['error_count']} agent errors, first: {r['errors'][:3]}")
        if r["landed"] < r["subtasks"]:
            print(f"    {'stalled' if r['stalled'] else 'not everything landed'}: subtasks {r['subtask_statuses']}")
    return compare(results) if args.compare_admission else {}


def compare(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Admission on against off, and the highest offered factor against the lowest, per mode."""
    facts: dict[str, Any] = {}
    print("\n  admission control, one sitting:")
    for note in dict.fromkeys(r["note"] for r in results if r["note"]):
        print(f"    note: {note} (on and off ran the same server: their ratios are the machine's noise)")
    for mode in dict.fromkeys(r["mode"] for r in results):
        by = {(r["admission"], r["factor"]): r for r in results if r["mode"] == mode}
        fs = sorted({f for _, f in by})
        lo, hi = fs[0], fs[-1]
        for f in fs:
            on, off = by.get(("on", f)), by.get(("off", f))
            if on and off:
                p95 = ratio(on["claim_to_landed_s"]["p95"], off["claim_to_landed_s"]["p95"])
                jain = ratio(on["jain_verifier_seconds"], off["jain_verifier_seconds"])
                facts[f"{mode} {f:g}x"] = {"p95_on_over_off": p95, "jain_on_over_off": jain}
                print(f"    {mode} {f:g}x: p95 claim->landed on/off {fmt(p95, 2)}x; Jain on "
                      f"{fmt(on['jain_verifier_seconds'], 3)} off {fmt(off['jain_verifier_seconds'], 3)} "
                      f"(on/off {fmt(jain, 2)}x)")
        for adm in ("off", "on"):
            a, b = by.get((adm, hi)), by.get((adm, lo))
            if a and b and hi > lo:
                growth = ratio(a["claim_to_landed_s"]["p95"], b["claim_to_landed_s"]["p95"])
                facts[f"{mode} admission {adm} p95 {hi:g}x over {lo:g}x"] = growth
                target = f" (target <= {P95_TARGET:g}: {met(growth <= P95_TARGET)})" if adm == "on" else ""
                print(f"    {mode} admission {adm}: p95 claim->landed at {hi:g}x over {lo:g}x {fmt(growth, 2)}x"
                      f"{target}")
        top = by.get(("on", hi))
        if top:
            ok = {"no_lost_claims": top["leases"]["claims_lost_while_working"] == 0,
                  "jain": top["jain_verifier_seconds"] >= JAIN_TARGET,
                  "busy_while_waiting": top["busy_while_waiting"] >= BUSY_TARGET,
                  "refusals_named_next": top["every_refusal_named_next"]}
            facts[f"{mode} targets at {hi:g}x, admission on"] = ok
            print(f"    {mode} at {hi:g}x with admission on: no claim lost {met(ok['no_lost_claims'])}, Jain >= "
                  f"{JAIN_TARGET:g} {met(ok['jain'])}, busy while work waits >= {BUSY_TARGET:g} "
                  f"{met(ok['busy_while_waiting'])}, every refusal named a next step {met(ok['refusals_named_next'])}")
    return facts
