"""The fleet benchmark's landing tables (``python -m bench.fleet``): throughput against the model bound and serial, the
risk estimate's calibration, and the idle agents' cost.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from bench.common.measure import cpu_line, fmt, met
from bench.fleet.agents import VERIFY_PURPOSES

SPEC_TARGET = 3.0  # speculative landings/h over serial
BOUND_TARGET = 0.8  # measured / model bound


def print_trace_and_note(r: dict[str, Any]) -> None:
    """A run's verdict against the protocol's model (``harness.trace_of``) and the bench's note on it, if any."""
    if r.get("trace"):
        print(f"    trace against the protocol's model: {r['trace']}")
    if r["note"]:
        print(f"    note: {r['note']}")


def print_landing(results: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    print(f"\nScenario 1: landing throughput -- {args.agents} agents, {args.subtasks} independent subtasks, "
          f"check {args.duration:g} s, failure rate {args.fail_rate:g}, {args.workers} verifier workers")
    retry = ("run once more on the same commit (--retry-failed; the model counts no retries)" if args.retry_failed
             else "judged on its first run (MERGEBOT_RETRY_FAILED_CHECKS=0: the synthetic check is deterministic, "
             "and the model counts no retries)")
    print("  a failed check is " + retry)
    how = ("mergebot.agent.push (it looks for its candidate every 0.2 s, then long-polls it)" if args.poll is None
           else f"polls every {args.poll:g} s (--poll)")
    print("  agents wait for verdicts with " + how)
    cols = [("mode", 12, "s"), ("landed", 7, "s"), ("wall s", 8, "s"), ("landings/h", 11, "s"),
            ("steady/h", 9, "s"), ("push->landed p50", 17, "s"), ("p95", 7, "s"), ("first push p50", 15, "s"),
            ("p95", 7, "s"), ("runs/landed", 12, "s"), ("bound/h", 8, "s"), ("vs bound", 9, "s")]
    print("  " + " ".join(f"{c:>{w}}" if i else f"{c:<{w}}" for i, (c, w, _) in enumerate(cols)))
    print("  " + "-" * (sum(w for _, w, _ in cols) + len(cols) - 1))
    for r in results:
        vals = [r["mode"], f"{r['landed']}/{r['subtasks']}", fmt(r["wall_s"]), fmt(r["landings_per_hour"], 0),
                fmt(r["steady_landings_per_hour"], 0), fmt(r["push_to_landed_s"]["median"], 2),
                fmt(r["push_to_landed_s"]["p95"], 2), fmt(r["first_push_to_landed_s"]["median"], 2),
                fmt(r["first_push_to_landed_s"]["p95"], 2), fmt(r["verifier_runs_per_landed"], 2),
                fmt(r["bound_per_hour"], 0), fmt(r["vs_bound"], 2)]
        print("  " + " ".join(f"{v:>{w}}" if i else f"{v:<{w}}" for i, (v, (_, w, _)) in enumerate(
            zip(vals, cols, strict=True))))
    print("\n  per mode (times in seconds):")
    for r in results:
        runs = r["verifier_runs"]
        shown = ", ".join(f"{k} {runs.get(k, 0)}" for k in (*VERIFY_PURPOSES, "post_land"))
        seen = r["push_to_agent_saw_landed_s"]
        print(f"  {r['mode']}: verifier runs {shown};"
              f" mean check run {fmt(r['check_run_s_mean'], 3)} (sandbox {', '.join(r['sandbox']) or '-'}); checks at"
              f" once: max {r['checks_at_once_max']}, mean {fmt(r['checks_at_once_mean'], 2)};"
              f" workers busy with any run"
              f" {fmt(r['workers_busy_mean'], 2)} of {args.workers}; a run waits for a worker p50"
              f" {fmt(r['run_queued_s']['median'], 3)} p95 {fmt(r['run_queued_s']['p95'], 3)}; first push queued"
              f" {fmt(r['first_queued_s'], 2)} s and first run {fmt(r['first_run_s'], 2)} s after the agents started"
              f" (from the first push: {fmt(r['from_first_push_per_hour'], 0)}/h)")
        print(f"    candidates {dict(sorted(r['candidates'].items()))}; agent saw landed p50 "
              f"{fmt(seen['median'], 2)} p95 {fmt(seen['p95'], 2)}"
              f"; agent.start p50 {fmt(r['claim_s_median'], 3)}, commit p50 {fmt(r['commit_s_median'], 3)}")
        print(f"    bound at the measured check run ({fmt(r['check_run_s_mean'], 3)} s): "
              f"{fmt(r['bound_at_measured_check_per_hour'], 0)}/h, measured/that "
              f"{fmt(r['vs_bound_at_measured_check'], 2)}"
              f"; load {r['load_start']} -> {r['load_end']}; setup {fmt(r['setup_s'])}, run {fmt(r['run_s'])}")
        print(f"    {cpu_line(r)}")
        print_trace_and_note(r)
        if r["main_red"]:
            print(f"    main went red at {r['main_red']}")
        if r["refused_pushes"]:
            print(f"    {r['refused_pushes']} pushes refused by pre-receive (the agent rebased onto main and pushed "
                  f"again), e.g.: {r['refusals'][0].splitlines()[-1][:230]}")
        if r["error_count"]:
            print(f"    {r['error_count']} agent errors, first: {r['errors'][:3]}")
        if r["landed"] < r["subtasks"]:
            why = f"stalled (nothing landed for {args.stall_seconds:g} s)" if r["stalled"] else "not everything landed"
            print(f"    {why}: subtask statuses {r['subtask_statuses']}")
        if r["server_log"]:
            print("    server log (last lines):")
            for line in r["server_log"]:
                print(f"      | {line[:200]}")
    by = {r["mode"]: r for r in results}
    facts: dict[str, Any] = {}
    print()
    if "serial" in by and "speculative" in by and by["serial"]["landings_per_hour"] > 0:
        ratio = by["speculative"]["landings_per_hour"] / by["serial"]["landings_per_hour"]
        facts["speculative_over_serial"] = ratio
        print(f"  speculative / serial landings per hour: {ratio:.2f}x "
              f"(target >= {SPEC_TARGET:g}x: {met(ratio >= SPEC_TARGET)})")
    for r in results:
        if r["window"]:
            ok = r["vs_bound"] >= BOUND_TARGET
            facts[f"{r['mode']}_vs_bound"] = r["vs_bound"]
            target = f" (target >= {BOUND_TARGET:g}: {met(ok)})" if r["mode"] == "speculative" else ""
            print(f"  {r['mode']} measured / bound (window {r['window']}: {fmt(r['bound_per_hour'], 0)} landings/h): "
                  f"{fmt(r['vs_bound'], 2)}{target}")
    # The verifier's capacity: every queue that spends a run per landing is capped at W x 3600 / T an hour.
    for r in results:
        capacity = args.workers * 3600 / r["check_run_s_mean"] if r["check_run_s_mean"] > 0 else float("nan")
        facts[f"{r['mode']}_vs_capacity"] = r["landings_per_hour"] / capacity
        print(f"  {r['mode']}: {fmt(r['landings_per_hour'] / capacity, 2)} of the verifier's capacity "
              f"({args.workers} x 3600 / {r['check_run_s_mean']:.3f} s = {capacity:,.0f} landings/h) at "
              f"{fmt(r['verifier_runs_per_landed'], 2)} runs per landing, {fmt(r['started_runs_per_landed'], 2)} "
              "counting only runs a worker started")
    if "risk" in by and "speculative" in by:
        facts.update(print_risk(by["risk"], by["speculative"], facts, args))
    if "speculative-batched" in by and "speculative" in by:
        b, sp = by["speculative-batched"], by["speculative"]
        p95_b, p95_s = b["push_to_landed_s"]["p95"], sp["push_to_landed_s"]["p95"]
        cap = facts["speculative-batched_vs_capacity"]
        facts.update(batched_over_speculative=b["landings_per_hour"] / sp["landings_per_hour"],
                     batched_p95_over_speculative=p95_b / p95_s)
        print(f"  speculative-batched / speculative: {fmt(facts['batched_over_speculative'], 2)}x landings/h, "
              f"p95 push->landed {fmt(facts['batched_p95_over_speculative'], 2)}x; targets: runs per landing "
              f"<= 0.67 ({met(b['verifier_runs_per_landed'] <= 0.67)}), >= 1.5 of capacity ({met(cap >= 1.5)}), "
              f"p95 no worse than speculative ({met(p95_b <= p95_s)})")
    return facts


def print_risk(r: dict[str, Any], sp: dict[str, Any], facts: dict[str, Any],
               args: argparse.Namespace) -> dict[str, Any]:
    """The risk-aware queue against its targets (issue 34), and its estimate's calibration."""
    mixed = bool(args.agents_mix)
    cap_target, runs_target = (1.3, 0.7) if mixed else (1.0, 0.85)
    cap, runs = facts["risk_vs_capacity"], r["verifier_runs_per_landed"]
    p95, p95_sp = r["push_to_landed_s"]["p95"], sp["push_to_landed_s"]["p95"]
    print(f"  risk ({'mixed fleet ' + args.agents_mix_text if mixed else f'uniform p = {args.fail_rate:g}'}): "
          f"{fmt(cap, 2)} of capacity (target >= {cap_target:g}: {met(cap >= cap_target)}), {fmt(runs, 2)} runs per "
          f"landing (target <= {runs_target:g}: {met(runs <= runs_target)}), p95 push->landed {fmt(p95, 2)} s against "
          f"speculative's {fmt(p95_sp, 2)} s ({met(p95 <= p95_sp)}); passed over at most {r['passed_over_max']} "
          f"times (bound {args.max_passes}: {met(r['passed_over_max'] <= args.max_passes)})")
    print("  calibration (candidates judged on their own check, by decile of the estimate):")
    print(f"    {'from p':>7} {'mean p':>7} {'observed':>9} {'n':>5}")
    for low, mean, observed, n in r["calibration"]:
        print(f"    {low:7.3f} {mean:7.3f} {observed:9.3f} {n:5d}")
    return {"risk_meets": {"capacity": cap >= cap_target, "runs": runs <= runs_target, "p95": p95 <= p95_sp}}


def print_idle(results: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """The idle agents' cost: the server's CPU per landing for each way of waiting for work, against the first
    variant given (the baseline), medians over the rounds."""
    print(f"\nScenario 1, idle agents: {args.agents} agents, {args.subtasks} subtasks in {args.depends or 'no'} "
          f"chain(s) (subtask i waits for i-{args.depends}), check {args.duration:g} s, {args.workers} workers, "
          f"{args.rounds} round(s) alternating")
    print("  when nothing is ready an agent claims again: " + ", ".join(
        f"poll {s:g} = after {s:g} s" if k == "poll" else f"wait {s:g} = with a claim that waits up to {s:g} s"
        for k, s in args.idle))
    cols = [("mode", 12), ("idle", 10), ("runs", 5), ("landed", 8), ("wall s", 7), ("empty claims", 13),
            ("server CPU s/landing", 21), ("x base", 7), ("PG CPU s/landing", 17), ("x base", 7),
            ("landings/h", 11)]
    print("  " + " ".join(f"{c:>{w}}" if i > 1 else f"{c:<{w}}" for i, (c, w) in enumerate(cols)))
    print("  " + "-" * (sum(w for _, w in cols) + len(cols) - 1))
    facts: dict[str, Any] = {}
    for mode in dict.fromkeys(r["mode"] for r in results):
        base: tuple[float, float] | None = None
        for kind, sec in args.idle:
            label = f"{kind} {sec:g} s"
            rs = [r for r in results if r["mode"] == mode and r["idle"] == label]
            server = statistics.median(r["server_cpu_s_per_landed"] for r in rs)
            pg = statistics.median(r["postgres_cpu_s_per_landed"] for r in rs)
            base = base or (server, pg)
            facts[f"{mode} {label}"] = {"server_cpu_s_per_landed": server, "postgres_cpu_s_per_landed": pg,
                                         "server_vs_base": server / base[0], "postgres_vs_base": pg / base[1],
                                         "runs": [r["server_cpu_s_per_landed"] for r in rs]}
            vals = [mode, label, str(len(rs)), f"{min(r['landed'] for r in rs)}/{args.subtasks}",
                    fmt(statistics.median(r["wall_s"] for r in rs)),
                    fmt(statistics.median(r["empty_claims"] for r in rs), 0), fmt(server, 3),
                    fmt(server / base[0], 2), fmt(pg, 3), fmt(pg / base[1], 2),
                    fmt(statistics.median(r["landings_per_hour"] for r in rs), 0)]
            print("  " + " ".join(f"{v:>{w}}" if i > 1 else f"{v:<{w}}" for i, (v, (_, w)) in enumerate(
                zip(vals, cols, strict=True))))
    for r in results:
        if r["error_count"] or r["landed"] < r["subtasks"]:
            print(f"  {r['mode']} {r['idle']}: {r['landed']}/{r['subtasks']} landed, {r['error_count']} agent "
                  f"errors, first: {r['errors'][:2]}")
    return facts
