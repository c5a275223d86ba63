"""Answers to commands in a pull request's comments (``mergebot.forge.commands``, ``mergebot.forge.answer``).

Part of ``mergebot.messages``: its rules hold here.
"""

from __future__ import annotations

from mergebot.messages.words import _counted, _short

# -- commands in a pull request's comments (mergebot.forge.commands) ------------------------------------------


def command_unknown(name: str, names: tuple[str, ...]) -> str:
    return f"`@mergebot {name[:40]}` is no command of mine; the commands are " + ", ".join(
        f"`@mergebot {n}`" for n in names) + "."


def command_unlinked(sender: str | None, forge: str) -> str:
    return (f"{sender!r} is not linked to a Mergebot agent, so its commands change nothing (only `@mergebot why` "
            f"is for everyone). An admin links it with `mergebot agent link NAME --{forge} {sender}`.")


def _refused(why: str) -> str:
    """A command refused: why, and that it changed nothing."""
    return f"{why} Nothing changed."


def command_needs_manager(name: str) -> str:
    return _refused(f"`@mergebot {name}` is for leads and admins only: an owner must not move its own work up the "
                    "queue.")


def command_priority_number(low: int, high: int) -> str:
    return _refused(f"`@mergebot priority N` takes a whole number from {low} to {high}.")


def command_not_owner(name: str) -> str:
    return _refused(f"`@mergebot {name}` is for the pull request's owner (the agent whose claim it is), or a lead "
                    "or admin.")


def command_done(login: str | None, name: str, what: str) -> str:
    return f"@{login} `@mergebot {name}`: {what}"


def command_refused(login: str | None, name: str, why: str) -> str:
    return f"@{login} `@mergebot {name[:40]}` refused: {why}"


# -- what a command did (``mergebot.forge.answer``), or why it could not ----------------------------------------

WHOLE_VERDICT_BELOW = "the whole verdict is below."


def command_by(name: str, login: str | None) -> str:
    """The reason recorded for what a command changed."""
    return f"@mergebot {name} by {login} on the pull request"


def verifies_again(candidate_id: int, sha: str) -> str:
    return f"candidate {candidate_id} verifies `{_short(sha)}` again."


def retry_not_failed(subtask_id: int, status: str) -> str:
    return (f"subtask {subtask_id} is {status}: a lead's retry revives a failed subtask; its owner verifies its "
            "commit again with `@mergebot retry`.")


def another_round(subtask_id: int) -> str:
    return f"subtask {subtask_id} is ready for another round."


def nothing_to_withdraw(candidate_id: int | None, status: str | None) -> str:
    state = f"candidate {candidate_id} is {status}" if candidate_id is not None else "no candidate waits"
    return f"{state}: only a waiting candidate can be withdrawn."


def withdrawn(candidate_id: int) -> str:
    return f"candidate {candidate_id} is out of the queue."


def cancelled(subtask_id: int) -> str:
    return f"subtask {subtask_id} is cancelled."


def priority_set(subtask_id: int, priority: int, moved: int) -> str:
    return f"subtask {subtask_id} has priority {priority} now ({_counted(moved, 'waiting candidate')} moved)."


def approved(candidate_id: int, sha: str) -> str:
    """An approval given (``mergebot approve``, ``@mergebot approve``, an approving review)."""
    return (f"candidate {candidate_id} (`{_short(sha)}`) is approved: it lands once its checks pass where main is "
            "then (one that waited goes back to the queue now).")


def nothing_to_approve(ref: str) -> str:
    return f"{ref} has no candidate: push first, then approve its commit. Nothing changed."


def command_needs_approver(name: str) -> str:
    return _refused(f"`@mergebot {name}` is for leads, reviewers and admins only: an agent does not approve "
                    "changes.")
