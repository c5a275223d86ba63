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


def _secs(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 600 else f"{seconds:.0f} s"


def capacity_refused(lanes: list[dict[str, object]], *, retry_after: int, elsewhere: list[str], ready: int,
                     completed: int | None = None) -> str:
    """A claim refused for want of verifier capacity (``mergebot.landing.intake.admission``): each full lane's
    backlog against what it admits, when to try again, and where else work is taken now."""
    full = "; ".join(
        f"{lane['lane']} holds about {_secs(float(str(lane['backlog_seconds'])))} of verifier work in "
        f"{lane['candidates']} candidates, over the {_secs(float(str(lane['threshold_seconds'])))} it admits "
        f"(its verifiers clear {lane['capacity']} runs at once)" for lane in lanes)
    done = f"Subtask {completed} was submitted as you asked. " if completed is not None else ""
    other = (f"or claim for {', '.join(elsewhere)} instead, which admit now (`mergebot start REPO`; {ready} subtasks "
             "are ready)" if elsewhere else "or work on what you hold meanwhile")
    return (f"not now: the queue is full ({full}). {done}Claim again in {retry_after} s (a claim with `--wait` "
            f"waits for you), {other}.")


def wip_limit_reached(agent: str, cap: int, holds: list[dict[str, object]], *, completed: int | None = None) -> str:
    """A claim refused because the agent holds as many subtasks as its cap (MERGEBOT_AGENT_WIP) allows."""
    def one(h: dict[str, object]) -> str:
        cands = h.get("candidates") or []
        cand = f", candidate {', '.join(str(c) for c in cands)}" if isinstance(cands, list) and cands else ""
        key = f" [{h['key']}]" if h.get("key") else ""
        return f"subtask {h['id']}{key} ({h['status']}{cand})"

    done = f"Subtask {completed} was submitted as you asked. " if completed is not None else ""
    return (f"not now: {agent} holds {len(holds)} subtasks, its cap on work in progress is {cap} "
            f"(MERGEBOT_AGENT_WIP): {'; '.join(one(h) for h in holds[:20])}"
            f"{' and more' if len(holds) > 20 else ''}. {done}Finish one (push it with `mergebot submit` and let it "
            "land) or give one back (`mergebot release ID --version V`), then claim again.")


def admission_line(lane: dict[str, object]) -> str:
    """One lane's admission state, for `mergebot status` and the queue page."""
    state = ("admitting (measurements stale: admits all)" if lane.get("stale") else
             "admitting" if lane["admitting"] else f"refusing claims (try again in {lane['retry_after']} s)")
    return (f"{lane['lane']}: {state}; backlog {_secs(float(str(lane['backlog_seconds'])))} in "
            f"{lane['candidates']} candidates, admits up to {_secs(float(str(lane['threshold_seconds'])))} "
            f"(again below {_secs(float(str(lane['low_seconds'])))}), verifiers {lane['capacity']} runs at once"
            + (f"; {lane['in_flight']} claims out, up to {lane['in_flight_cap']:g}" if lane.get("in_flight_cap")
               is not None else ""))


ADMISSION_OFF = "admission control is off (MERGEBOT_ADMISSION=off): every claim is admitted"

ADMISSION_HEADING = "admission control (claims per repository's queue):"
WIP_NEXT = "finish one of the subtasks you hold (push it and let it land) or release one, then claim again"
CAPACITY_NEXT = "claim again after retry_after seconds (or with wait), or claim for a repository in elsewhere"


def capacity_in_flight(lane: str, *, in_flight: int, cap: float, push_seconds: float | None, retry_after: int,
                       completed: int | None = None) -> str:
    """A claim refused at a lane whose queue has room, because enough claimed work is on its way to it already
    (``mergebot.landing.intake.admission``, rule 8)."""
    done = f"Subtask {completed} was submitted as you asked. " if completed is not None else ""
    back = (f"a claim comes back in about {_secs(push_seconds)}" if push_seconds is not None else
            "none has come back yet to tell how many its verifiers need")
    return (f"not now: {lane} has {in_flight} claims out whose work is not pushed yet ({back}), as many as it "
            f"lets out ({cap:g}); more would only wait in its queue. "
            f"{done}Claim again in {retry_after} s (a claim with `--wait` waits for you), or work on what you hold "
            "meanwhile.")


def capacity_fair_share(lane: str, *, in_line: int, served: float, least: float | None, retry_after: int,
                        completed: int | None = None) -> str:
    """A claim refused at a lane with room, because agents that have had less of the verifiers' time wait for it
    first (``mergebot.landing.intake.admission``, rule 7; in verifier-seconds, a claim not yet run as one run)."""
    done = f"Subtask {completed} was submitted as you asked. " if completed is not None else ""
    return (f"not now: {lane} has room, but agents that have had less of the verifiers' time than you ({least or 0:g} "
            f"verifier-seconds against your {served:g}, a claim not yet run counting as one run) are waiting for it "
            f"first; you are number {in_line} in line. {done}Claim again in {retry_after} s (a claim with "
            "`--wait` waits for you), or work on what you hold meanwhile.")
