"""``mergebot submit`` in a worktree: push HEAD to the claim's branch (or queue its tip again) and follow the
candidate to its verdict.

Rules:
  * The push goes to exactly the branch the claim names, ``subtasks/<id>/v<version>``, forced: after a rejection
    the agent pushes its fix to the same branch. The push's answer names the candidate it queued; it asks for a
    refusal's verdict as JSON lines (``models.VERDICT_HEADER``), which a person's ``git push`` is spared.
  * Pushing a commit the branch already has changes nothing in git; ``again`` asks the bot to queue the
    branch's current tip once more instead (after a flaky failure, or when main moved): idempotent, twice is once,
    and while that tip is queued or running a no-op whose notice names its candidate (``wait_commit`` follows it).
  * The wait is one long-poll request per verdict (or 30 s), never a tight poll. It ends at a final verdict;
    ``parked`` is not final (it lands by itself once main is green again) but it ends the wait too, unless
    ``through_parked`` asks to wait on.
  * Nothing is pushed (nor queued again) while git is in the middle of a rebase, merge, cherry-pick or revert in
    the worktree (a conflict verdict asks for a rebase): the refusal says how to finish it or go back.
  * The answer is the candidate's record with its typed ``verdict`` (``mergebot.landing.judge.verdicts``), or, for a
    push git refused, a verdict built from the refusal.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mergebot import messages as say
from mergebot.agent.worktree import current_claim, head_sha, touch, unfinished
from mergebot.client import Client
from mergebot.errors import Invalid
from mergebot.messages.refs import subtask_ref
from mergebot.models import VERDICT_HEADER, VERDICT_LINE

QUEUED = re.compile(r"as candidate (\d+)")
# a wait ends at these statuses (awaiting_approval too: a person decides when it lands, not the queue)
STOPS = ("landed", "rejected", "superseded", "cancelled", "parked", "awaiting_approval")


def push(client: Client, workdir: Path, *, wait: float = 3600.0, progress: bool = True, again: bool = False,
         through_parked: bool = False) -> dict[str, Any]:
    """Push HEAD (or, with ``again``, queue the branch's tip once more) and follow its candidate to a verdict.
    Returns the candidate as the API shows it (``status``, ``reason``, ``verdict``), or a refusal; ``notices``:
    what the push's answer said besides (the conflict forecast, a footprint warning), when it said anything."""
    claim = current_claim(workdir)
    touch(workdir)
    operation = unfinished(workdir)
    if operation is not None:  # mid-rebase HEAD is main's commit, or half the change: never push that
        raise Invalid(say.submit_unfinished(workdir, operation), field="dir")
    sha = head_sha(workdir)
    ref = subtask_ref(claim.subtask_id, claim.claim_version)
    cand_id: int | None = None
    notices: list[str] = []  # what the push's answer said besides queueing it: the forecast, warnings
    if again:
        got = client.post(f"/api/v1/subtasks/{claim.subtask_id}/submit-again", {"claim_version": claim.claim_version})
        cand_id, sha = got["candidate"]["id"], got["candidate"]["sha"]
        if got.get("already"):  # that tip is queued or running: nothing was queued again, this follows it
            notices.append(got["message"])
    else:
        out = subprocess.run(["git", "-c", f"http.extraHeader={VERDICT_HEADER}: 1", "push", "--force", "--porcelain",
                              "origin", f"HEAD:{ref}"],
                             cwd=workdir, capture_output=True, text=True, check=False)
        remote = "\n".join(line.removeprefix("remote:").strip() for line in out.stderr.splitlines()
                           if line.startswith("remote:"))
        if out.returncode != 0 or VERDICT_LINE in remote:  # refused, or taken by git but not queued (post-receive)
            return refused(claim.subtask_id, claim.claim_version, sha, remote or out.stderr.strip(),
                           branch=ref)
        found = QUEUED.search(remote)
        cand_id = int(found.group(1)) if found else None
        notices = [line.removeprefix("Mergebot: ") for line in remote.splitlines()
                   if line.startswith(("Mergebot: forecast:", "Mergebot: warning:"))]
        if cand_id is None and "[up to date]" in out.stdout:  # git pushed nothing: say so, unless it is in flight
            cands = client.get("/api/v1/candidates", subtask=claim.subtask_id, limit=20)["candidates"]
            last = next((c for c in cands if c["sha"] == sha and c["claim_version"] == claim.claim_version), None)
            if last is None or last["status"] not in ("queued", "verifying", "landing", "parked", "awaiting_approval"):
                return unchanged(claim.subtask_id, claim.claim_version, sha, last, branch=ref)
            cand_id = last["id"]
    try:
        got = follow(client, claim.subtask_id, claim.claim_version, sha, cand_id, wait=wait, progress=progress,
                     through_parked=through_parked)
    except KeyboardInterrupt:  # the push stands: say where it is and how to follow it again
        raise KeyboardInterrupt(say.still_queued(claim.subtask_id, cand_id)) from None
    return {**got, "notices": notices} if notices else got


def follow(client: Client, subtask_id: int, claim_version: int, sha: str, cand_id: int | None, *, wait: float,
           progress: bool = False, through_parked: bool = False) -> dict[str, Any]:
    """Wait for the verdict on candidate ``cand_id`` (or, not known, on the candidate of this push)."""
    deadline = time.monotonic() + wait
    last = None
    mine: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        if mine is None and cand_id is None:  # a forge's push: its candidate comes from the webhook, soon after
            cands = client.get("/api/v1/candidates", subtask=subtask_id, limit=20)["candidates"]
            found = next((c for c in cands if c["sha"] == sha and c["claim_version"] == claim_version), None)
            if found is None:
                time.sleep(0.2)
                continue
            cand_id = found["id"]
        left = max(1.0, min(30.0, deadline - time.monotonic()))
        # the first look answers at once, so a person sees the candidate queued now, not after the first long poll
        mine = client.get(f"/api/v1/candidates/{cand_id}", wait=0 if progress and mine is None else round(left, 1))
        assert mine is not None
        if progress and mine["status"] != last:
            print(say.candidate_progress(subtask_id, mine["id"], mine["status"]), file=sys.stderr)
            last = mine["status"]
        if mine["status"] in STOPS and not (through_parked and mine["status"] == "parked"):
            return mine
    return {"status": "waiting", "sha": sha, "id": cand_id, "verdict": mine["verdict"] if mine else None,
            "reason": say.no_verdict_yet(wait, mine["status"] if mine else None, subtask_id)}


def refused(subtask_id: int, claim_version: int, sha: str, message: str, *,
            branch: str | None = None) -> dict[str, Any]:
    """A push git refused (or took without queueing it): the sentences, and the verdict the bot sent with them
    (the first refused ref's); with none, git itself failed (``push_failed``: the claim's ``branch`` still holds)."""
    records = [json.loads(line.split(VERDICT_LINE, 1)[1]) for line in message.splitlines() if VERDICT_LINE in line]
    text = "\n".join(line for line in message.splitlines() if VERDICT_LINE not in line).strip()
    verdict = records[0] if records else {"kind": "push_failed", "message": text, "final": True, "branch": branch,
                                          "subtask_id": subtask_id, "claim_version": claim_version, "sha": sha,
                                          "next": say.PUSH_FAILED_NEXT}
    return {"status": "refused", "reason": text, "sha": sha, "subtask_id": subtask_id, "claim_version": claim_version,
            "verdict": verdict, "verdicts": records}


def unchanged(subtask_id: int, claim_version: int, sha: str, last: dict[str, Any] | None, *,
              branch: str | None = None) -> dict[str, Any]:
    """The branch already held this commit, so git pushed nothing and nothing was queued."""
    text = say.nothing_pushed(subtask_id, sha, last)
    return {"status": "unchanged", "reason": text, "sha": sha, "subtask_id": subtask_id,
            "claim_version": claim_version, "last": last,
            "verdict": {"kind": "unchanged", "message": text, "final": True, "next": say.UNCHANGED_NEXT,
                        "branch": branch, "subtask_id": subtask_id, "claim_version": claim_version, "sha": sha}}


def wait_commit(client: Client, subtask_id: int, sha: str, *, wait: float, progress: bool = False) -> dict[str, Any]:
    """Wait for the verdict of exactly the commit ``sha`` of the subtask (``GET /subtasks/{id}/verdict``, one long
    poll of up to 30 s at a time): a babysitter's way to follow a push without queueing it again. Returns the
    server's answer (``status``, ``done``, ``candidate_id``, the typed ``verdict``), ``done`` false when ``wait``
    ran out first."""
    deadline = time.monotonic() + wait
    last = None
    while True:
        left = max(0.0, min(30.0, deadline - time.monotonic()))
        out: dict[str, Any] = client.get(f"/api/v1/subtasks/{subtask_id}/verdict", sha=sha, wait=round(left, 1))
        if progress and out["status"] != last:
            print(say.commit_progress(subtask_id, out["sha"], out["status"], out["candidate_id"]), file=sys.stderr)
            last = out["status"]
        if out["done"] or time.monotonic() >= deadline:
            return out
