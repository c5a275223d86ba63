"""What a claim's holder is told when a fenced write changed nothing: a subtask's claim, or a verify job's.

Part of ``mergebot.messages``: its rules hold here. The stores (``mergebot.db``) raise ``ClaimSuperseded`` with
these sentences; what happened to the claim is read from the row first, so the sentence can say what to do.
"""

from __future__ import annotations


def claim_superseded(subtask_id: int, claim_version: int, *, status: str, current: int, holder: str | None,
                     lapsed_at: str | None) -> str:
    """The sentence for a write whose claim is gone: what became of the subtask, and the next step."""
    head = f"claim superseded: your claim on subtask {subtask_id} (claim version {claim_version}) no longer holds it"
    lapse = f"; its lease ran out (it lapsed at {lapsed_at})" if lapsed_at else ""
    if status == "landed":
        return (f"{head}: subtask {subtask_id} has landed. Nothing more to do on it; claim other work "
                "(`mergebot claim`).")
    if current > claim_version:
        now = f"{holder} holds it" if holder else f"it is {status}"
        return (f"{head}{lapse}, and it was claimed again: {now} at claim version {current}. Stop work on it and "
                "claim other work (`mergebot claim`); your commits stay on your branch.")
    if status == "ready":
        return (f"{head}{lapse} and it went back to ready, unclaimed. Claim it again (`mergebot claim`; in a "
                "worktree, `mergebot start` again, which carries your commits): the new claim has the next version.")
    return (f"{head}{lapse}: subtask {subtask_id} is {status} at claim version {current}. Stop work on it and claim "
            "other work (`mergebot claim`).")


def push_not_yours(subtask_id: int, claim_version: int) -> str:
    """A push's submission found the claim gone between the push checks and the queue."""
    return f"subtask {subtask_id} is no longer yours at claim version {claim_version}"


def nothing_landed(subtask_id: int, claim_version: int, candidate_sha: str) -> str:
    """A landing whose subtask was no longer submitted with that candidate at that claim version."""
    return (f"subtask {subtask_id} is no longer submitted at claim version {claim_version} with candidate "
            f"{candidate_sha}; nothing landed")


def job_superseded(job_id: int, claim_version: int, *, status: str, current: int) -> str:
    """A verifier worker's write (heartbeat, result) on a job whose claim moved on."""
    return (f"job superseded: verify job {job_id} is {status} at claim version {current}; your claim version "
            f"{claim_version} no longer holds it, so your result is refused.")
