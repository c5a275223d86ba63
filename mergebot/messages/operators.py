"""What an operator is told about a repository's main and the database, in the board's announcements every agent
reads too, on ``/healthz`` and the queue page: main turned red (and why), was mended or could not be, is green
again; landing paused because the forge refused the bot, resumed by someone; commits stalled on a standby.

Part of ``mergebot.messages``: its rules hold here. An announcement starts with ``[repo]`` and names the command
that undoes a pause.
"""

from __future__ import annotations

from mergebot.messages.words import _short

# -- why main is red, as the paused repository's reason ----------------------------------------------------------


def base_fails(target_branch: str, main: str) -> str:
    return f"the check fails on {target_branch} itself ({_short(main)})"


def post_land_failed(outcome: str) -> str:
    return f"the post-land check gave {outcome}"


def _red_at(target_branch: str, sha: str) -> str:
    return f"{target_branch} is red at {_short(sha)}"


def red_main(target_branch: str, sha: str, why: str) -> str:
    return _red_at(target_branch, sha) + f": {why}. Landing is paused: only a fix lands."


# -- announced on the board ------------------------------------------------------------------------------------


def red_main_announcement(repo: str, reason: str) -> str:
    return f"[{repo}] {reason} An admin can resume with `mergebot repo resume {repo}`."


def flaky_on_main(repo: str, target_branch: str, sha: str, outcome: str) -> str:
    return (f"[{repo}] the post-land check on {target_branch} at {_short(sha)} gave {outcome}, then passed when run "
            "again: recorded as flaky on main; nothing reverted, landing goes on.")


# The failed run a mend resumed after a restart starts from (``runs.unfinished``'s ``why``).
MEND_RESUMED = "main's check failed before a restart; its result is on the landed row's post-land run"


def mend_found(repo: str, target_branch: str, red_sha: str, subtask_id: int, owner: str | None,
               merged_sha: str) -> str:
    return (f"[{repo}] {_red_at(target_branch, red_sha)}; bisection found subtask {subtask_id}'s landing "
            f"{_short(merged_sha)} (by {owner or 'unknown'}) to be the culprit. Its revert is queued first; the rest "
            "of the queue waits only until it lands.")


def mend_gave_up(repo: str, target_branch: str, why: str) -> str:
    return (f"[{repo}] {target_branch} stays red and parked: the bot could not mend it ({why}). Land a fix, or "
            f"`mergebot repo resume {repo}`.")


# Why the bot could not mend a red main (``mend_gave_up``'s ``why``).
MEND_NO_SUSPECTS = "no landing since the last green check to blame"
MEND_REVERT_RED = "the red commits include a revert the bot made already; it does not revert twice"
MEND_CONFLICT = "the culprit's revert no longer applies cleanly on main"


def mend_inconclusive(sha: str, outcome: str) -> str:
    return f"a bisection run on {_short(sha)} could not judge it ({outcome})"


def green_again(repo: str, target_branch: str, sha: str) -> str:
    return f"[{repo}] {target_branch} is green again at {_short(sha)}; landing resumed."


def forge_refused(repo: str, why: str, target_branch: str) -> str:
    return (f"[{repo}] landing paused: {why}. Let the bot push to {target_branch}, then "
            f"`mergebot repo resume {repo}`.")


def resumed_by(repo: str, who: str) -> str:
    return f"[{repo}] landing resumed by {who}."


# -- the database ------------------------------------------------------------------------------------------------

STALL_SECONDS = 2.0  # a commit waiting this long for a synchronous standby is a stall, not a slow disk


def commits_stalled(n: int, seconds: float) -> str | None:
    """What to say of ``n`` commits waiting for a synchronous standby, the oldest for ``seconds``; None while that
    is no stall (``/healthz`` and the queue page)."""
    if not n or seconds < STALL_SECONDS:
        return None
    return (f"{n} commit(s) wait for a synchronous standby, the oldest for {seconds:.0f} s: nothing can be written "
            "until the standby is back, or synchronous_standby_names is cleared on this server (after a failover "
            "by hand, the promoted server keeps the old primary's)")


# -- an operator's hold on a repository's queue ----------------------------------------------------------------


def paused_by(who: str, reason: str | None = None) -> str:
    """The paused repository's reason when an admin paused it (``mergebot pause``, with ``--reason``)."""
    return f"paused by {who}" + (f": {reason}" if reason else "")


# -- admission control at claim time (mergebot.landing.intake.admission) -----------------------------------------


def admission_stale(lane: str, age: float | None) -> str:
    """Logged when a lane's measurements are stale, so its claims are admitted unchecked (fail open)."""
    since = "no run of it has finished yet" if age is None else f"its last run finished {age:.0f} s ago"
    return (f"admission control admits every claim for {lane} unchecked: {since} and none runs now, so its "
            "verifiers' capacity is not known; check that verifier workers run (`mergebot status`)")


def admission_flipped(lane: str, admitting: bool, backlog: float, threshold: float, low: float) -> str:
    """Logged when a lane starts or stops refusing claims."""
    if admitting:
        return (f"{lane} admits claims again: its backlog of {backlog:.0f} verifier-seconds is under its low mark "
                f"of {low:.0f}")
    return (f"{lane} refuses claims now: its backlog of {backlog:.0f} verifier-seconds is over its threshold of "
            f"{threshold:.0f}; it admits again under {low:.0f}")
