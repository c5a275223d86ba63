"""What a forge is answered for a webhook delivery (``mergebot.forge.webhooks``): the outcome recorded for the
delivery and shown in the forge's delivery log, or the error of a delivery refused.

Part of ``mergebot.messages``: its rules hold here. An outcome starts with what became of the delivery
(``ignored``, ``refused``, ``already queued``, ``queued as candidate``): the metrics and the tests read that.
"""

from __future__ import annotations

from mergebot.messages.refs import PATTERN as SUBTASK_BRANCH
from mergebot.messages.words import _short

# -- a delivery refused before it is processed -----------------------------------------------------------------


def wrong_endpoint(forge: str, endpoint: str) -> str:
    return f"this is a {forge} delivery; send it to /webhooks/{endpoint}"


DELIVERY_BODY_CHANGED = "this delivery id was already received with a different body"
DELIVERY_IN_PROGRESS = "this delivery is being processed now; redeliver it if it does not land"


def delivery_failed(error: str) -> str:
    """Our own failure (the forge unreachable, the database down): the forge's redelivery processes it again."""
    return f"could not process the delivery now ({error}); redeliver it"


# -- what became of a delivery ----------------------------------------------------------------------------------

PONG = "pong"


def ignored(why: str) -> str:
    return f"ignored: {why}"


def foreign_repository(repository: str | None) -> str:
    return ignored(f"{repository!r} is not a repository this secret belongs to")


def not_a_candidate(event: str, *, tag: bool, deleted: bool, action: str | None) -> str:
    """Why an event (a push or a pull request's action) brings no candidate."""
    if tag:
        return ignored("tags are not candidates")
    if deleted or event == "delete":
        return ignored("a deletion is not a candidate")
    if event == "pull_request":
        return ignored(f"pull request action {action!r}")
    return ignored(f"{event} events are not candidates")


def into_other_branch(base_ref: str, target_ref: str) -> str:
    return ignored(f"the pull request is into {base_ref}, not {target_ref}")


def not_subtask_branch(ref: str) -> str:
    return ignored(f"{ref} is not a subtask branch ({SUBTASK_BRANCH})")


def already_queued(sha: str, candidate_id: int, status: str) -> str:
    return f"already queued: {_short(sha)} is candidate {candidate_id} ({status})"


def stale_delivery(ref: str, tip: str | None, sha: str) -> str:
    """A late or out-of-order delivery: only the branch's current tip on the forge is a candidate."""
    return ignored(f"stale delivery: {ref} is at {_short(tip) or 'nothing'} on the forge now, not {_short(sha)}")


def refused(why: str) -> str:
    return f"refused: {why}"


def queued_as(candidate_id: int) -> str:
    return f"queued as candidate {candidate_id}"


NOT_A_NEW_COMMENT = ignored("not a new comment on a pull request")
NO_COMMAND = ignored("the comment holds no command")


def pull_not_followed(number: int) -> str:
    return ignored(f"pull request #{number} is not one the bot follows (no subtask branch seen for it)")


NOT_AN_APPROVING_REVIEW = "a review that does not approve: nothing to do"


# -- a named check's own check run (issue 43) -------------------------------------------------------------------------


def named_check_title(name: str, required: bool, outcome: str) -> str:
    kind = "required" if required else "optional: shown, never blocks"
    return f"{name}: {outcome} ({kind})"


def named_check_summary(name: str, required: bool, outcome: str, seconds: float) -> str:
    rule = ("it must pass for the change to land" if required else
            "an optional check: its failure is shown and does not block the landing")
    return (f"The named check **{name}** gave **{outcome}** in {seconds:.1f} s on the merged commit; {rule}. The "
            "candidate's own check run (`mergebot`) has the verdict; its details link the check's log.")


# -- a named check's commit status (``mergebot/NAME``), on a repository without a GitHub App (issue 43) ----------

def named_check_status(required: bool, outcome: str, seconds: float) -> str:
    """The description of a decided candidate's named check's status (a commit status has no neutral state: an
    optional check that failed is a success that says so)."""
    if outcome != "pass" and not required:
        return f"optional: failed, does not block ({outcome} in {seconds:.1f} s)"
    return f"{outcome} in {seconds:.1f} s ({'required' if required else 'optional'})"


NAMED_CHECK_RUNNING = "running on the merged commit"


def named_check_not_run(status: str) -> str:
    return f"not run: the candidate was {status} first"
