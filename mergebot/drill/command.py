"""``mergebot drill``: the over-the-wire drills against a running server, then the invariant check.

With an admin token it runs the push stream, the lease race and (on a forge repository, given the webhook secret
and a forge login linked to an agent) the redelivery storm, cancels what the run left behind, and then checks the
invariants until the answer is stable. ``--check-only`` runs only the check, with any role's token. The exit status
is 1 on a violation or a failed drill; ``--json`` prints the whole report.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from mergebot.agent.worktree import check_repo
from mergebot.client import ApiError, Client
from mergebot.drill.gather import stable_check
from mergebot.drill.invariants import Push
from mergebot.drill.scenarios import Drill
from mergebot.drill.storm import github_push_body, redelivery_storm
from mergebot.drill.wire import _git, commit_file, retry
from mergebot.messages.refs import subtask_ref


def _print(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run(args: argparse.Namespace, token: str, server: str) -> int:
    """``mergebot drill``: the over-the-wire drills against a running server, then the invariant check."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mergebot-drill-") as tmp:
        work = Path(tmp)
        client = Client(server, token, timeout=30)
        check_repo(client, args.repo)  # first: an unreachable server or a wrong name is one sentence, at once
        pushes: list[Push] = []
        report: dict[str, Any] = {"repo": args.repo, "server": server}
        failed = False
        if not args.check_only:
            drill = Drill(server, token, args.repo, work, log=_print, seed=args.seed)
            report["run_id"] = drill.run_id
            until = time.monotonic() + args.timeout
            skip = set(args.skip or [])
            try:
                if "stream" not in skip:
                    agents = drill.agents(args.agents, until=until)
                    ids = drill.subtasks(args.subtasks, "push stream", until=until)
                    _print(f"drill {drill.run_id}: {len(agents)} agents push {len(ids)} subtasks at once")
                    result, threads = drill.stream(agents, until=until)
                    for t in threads:
                        t.join(max(0.0, until - time.monotonic()))
                    pushes += result.pushes
                    landed = {sid for sid in ids if retry(lambda sid=sid: client.get(  # type: ignore[misc]
                        f"/api/v1/subtasks/{sid}")["subtask"]["status"], until=until + 60) == "landed"}
                    stream = {"subtasks": len(ids), "landed": len(landed),
                              "pushes": len(result.pushes),
                              "accepted": sum(p.accepted for p in result.pushes), "errors": result.errors,
                              "foreign_claims_given_back": result.foreign}
                    report["stream"] = stream
                    if result.errors or landed != set(ids):
                        failed = True
                    _print(f"push stream: {stream}")
                if "lease" not in skip:
                    old, new = drill.agents(2, until=until)
                    _print("lease race: holding the old owner's push until its lease lapses (lease + grace)")
                    race = drill.lease_race(old, new, until=until)
                    pushes += [p for p in (race.held_push, race.new_push, *race.late_pushes) if p is not None]
                    report["lease_race"] = {"subtask": race.subtask_id, "old_version": race.old_version,
                                            "new_version": race.new_version, "verdict": race.verdict,
                                            "heartbeat_after_expiry": race.heartbeat_after_expiry,
                                            "held_push": race.held_push and {
                                                "outcome": race.held_push.outcome,
                                                "message": race.held_push.message[-1000:]},
                                            "late_pushes": [p.outcome for p in race.late_pushes],
                                            "problems": race.problems}
                    failed = failed or bool(race.problems)
                    _print(f"lease race: {report['lease_race']}")
                if "storm" not in skip:
                    report["storm"] = _cli_storm(args, client, server, token)
                    failed = failed or bool(report["storm"].get("problems"))
            finally:
                report["cancelled_leftovers"] = drill.cancel_leftovers()
        violations = stable_check(client, server, token, args.repo, work / "check", pushes,
                                  settled=not args.check_only or args.settled, attempts=args.attempts)
        report["violations"] = [{"kind": v.kind, "subject": v.subject, "message": v.message} for v in violations]
        report["seconds"] = round(time.monotonic() - started, 1)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        for v in violations:
            print(f"VIOLATION {v}")
        print(f"{len(violations)} violation(s) on {args.repo}" + ("" if args.check_only else
              f"; drills {'FAILED' if failed else 'passed'}") + f" in {report['seconds']} s")
    return 1 if violations or failed else 0


def _cli_storm(args: argparse.Namespace, client: Client, server: str, token: str) -> dict[str, Any]:
    """A redelivery storm needs a forge repository, the webhook secret, and an agent a forge login is linked to."""
    repo = next(r for r in client.get("/api/v1/repos")["repos"] if r["name"] == args.repo)
    if not repo.get("forge"):
        return {"skipped": "not a forge repository"}
    secret = os.environ.get(repo.get("webhook_secret_env") or "MERGEBOT_WEBHOOK_SECRET", "")
    if not (secret and args.forge_login and args.forge_agent_token):
        return {"skipped": f"needs ${repo.get('webhook_secret_env')}, --forge-login and --forge-agent-token"}
    until = time.monotonic() + args.timeout
    with tempfile.TemporaryDirectory(prefix="mergebot-storm-") as tmp:
        drill = Drill(server, token, args.repo, Path(tmp), log=_print)
        try:
            return _storm(args, client, server, repo, secret, drill, until)
        finally:
            drill.cancel_leftovers()


def _storm(args: argparse.Namespace, client: Client, server: str, repo: dict[str, Any], secret: str, drill: Drill,
           until: float) -> dict[str, Any]:
    from mergebot.git import mirror

    sid = drill.subtasks(1, "redelivery storm", until=until)[0]
    agent = Client(server, args.forge_agent_token, timeout=30)
    got = agent.post("/api/v1/subtasks/claim")
    problems: list[str] = []
    if got is None or got["handle"]["id"] != sid:
        if got is not None:  # not ours: give it back untouched
            with contextlib.suppress(ApiError, httpx.HTTPError):
                agent.post(f"/api/v1/subtasks/{got['handle']['id']}/release",
                           {"claim_version": got["handle"]["claim_version"], "reason": "claimed by a mergebot drill"})
        return {"skipped": f"the forge agent did not get the drill subtask: {got and got['handle']}"}
    version = got["handle"]["claim_version"]
    remote = mirror.remote_of(repo)
    wt = drill.work / "storm"
    _git(["clone", "-q", "--single-branch", "--branch", repo["target_branch"], remote.url, str(wt)], drill.work,
         env=remote.env())
    sha = commit_file(wt, f"drill/{drill.run_id}/storm.txt", "storm\n", "drill: redelivery storm")
    ref = subtask_ref(sid, version)
    _git(["push", "-q", remote.url, f"HEAD:{ref}"], wt, env=remote.env())
    body = github_push_body(repo["forge_repo"], ref, "0" * 40, sha, args.forge_login)
    answers = redelivery_storm(server, repo["forge"], secret, body, copies=args.copies)
    queued = [b for s, b in answers if s == 202]
    if len(queued) != 1 or any(s not in (200, 202, 503) for s, _ in answers):
        problems.append(f"answers: {sorted(s for s, _ in answers)}")
    v = drill.verdict(agent, Push("forge", sid, version, sha, "accepted"), until=until)
    cands = client.get("/api/v1/candidates", subtask=sid)["candidates"]
    if v is None or v["status"] != "landed" or len(cands) != 1:
        problems.append(f"verdict {v and v['status']}, {len(cands)} candidate(s)")
    return {"subtask": sid, "copies": args.copies, "statuses": sorted({s for s, _ in answers}),
            "candidates": len(cands), "problems": problems}


def add_arguments(sp: argparse.ArgumentParser) -> None:
    """``mergebot drill``'s options (the parser lives in ``mergebot.cli``)."""
    sp.add_argument("--url", help="the server (same as --server; default MERGEBOT_URL)")
    sp.add_argument("--repo", required=True, help="the repository to drill: use a scratch one, drills land commits")
    sp.add_argument("--check-only", action="store_true", dest="check_only",
                    help="only the invariant check (any role's token); exit 1 on a violation")
    sp.add_argument("--settled", action="store_true", help="with --check-only: the queue is idle, so also check "
                    "that no subtask branch or submitted subtask was left behind")
    sp.add_argument("--agents", type=int, default=4, help="agents pushing at once in the push stream")
    sp.add_argument("--subtasks", type=int, default=8, help="subtasks the push stream lands")
    sp.add_argument("--skip", action="append", choices=["stream", "lease", "storm"], help="leave a drill out "
                    "(repeatable); the lease race waits for the server's lease plus its grace period")
    sp.add_argument("--timeout", type=float, default=900.0, help="seconds for all the drills together")
    sp.add_argument("--attempts", type=int, default=5, help="a violation counts if seen on this many reads in a row")
    sp.add_argument("--seed", type=int, help="seed of the drill's random choices")
    sp.add_argument("--copies", type=int, default=50, help="deliveries in the redelivery storm")
    sp.add_argument("--forge-login", dest="forge_login", help="storm: a forge login linked to the agent below")
    sp.add_argument("--forge-agent-token", dest="forge_agent_token", help="storm: that agent's token")
